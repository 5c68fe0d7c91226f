"""Seed 000 Table 11: software only vs hardware only vs sequential vs joint at 1.11 mm2.

    python studies/codesign_table11.py [--json]

Worst-scenario ratio to the reference program on the reference chip (2 SMs, 8 warps, 128 KiB shared
memory and 64 KiB L1 per SM, 128 KiB L2, 64 B/cycle) over a wider menu: shared memory, L1, L2,
resident warps and memory queue depth (432 chips, 238 within the ceiling), on our
analytic Ventus-like model. The joint optimum is one MILP over both sides, cross-checked by
exhaustive enumeration. The seed's numbers are printed beside ours for orientation only."""
from __future__ import annotations

import sys
from pathlib import Path

from formloop.cli import app

STUDY = Path(__file__).with_suffix(".toml")

if __name__ == "__main__":
    app(["codesign", str(STUDY), *sys.argv[1:]])
