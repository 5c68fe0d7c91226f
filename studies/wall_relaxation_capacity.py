"""Seed 000 Table 12 and Figure 6: wall relaxation against fixed, sequential, random and joint search.

    python studies/wall_relaxation_capacity.py [--json] [--plot PATH]

Qwen2.5-0.5B-shaped workload (prefill 128/512, decode from histories 128/512) on our analytic
Ventus-like model; twelve chips = vector {512, 1024, 2048} x scalar {128, 256, 512, 2048} register
slots per SM under 1.11 mm2; objectives prefill, decode and mixed (worst scenario ratio); starts at
the small and the large chips. Each cell: final ratio (distinct inner problems). The seed's table is
printed beneath for orientation: different chip model and programs, so compare shape, not value.
The figure (quality vs distinct inner problems from the small starts) goes to --plot
(default .formloop/codesign-wall-relaxation-capacity.png)."""
from __future__ import annotations

import sys
from pathlib import Path

from formloop.cli import app

STUDY = Path(__file__).with_suffix(".toml")

if __name__ == "__main__":
    app(["codesign", str(STUDY), *sys.argv[1:]])
