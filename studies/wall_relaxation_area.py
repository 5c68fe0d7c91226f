"""Wall relaxation where the area ceiling binds: pricing per mm² against pricing by raw latency drop.

    python studies/wall_relaxation_area.py [--json] [--plot PATH]

The capacity study's setting (Qwen2.5-0.5B-shaped prefill and decode on our analytic Ventus-like
model) with shared memory opened beside the vector and scalar register files: 48 chips, 35 of them
within a 1.05 mm2 ceiling, the Table 11-style program menus. Each cell: final ratio (distinct inner
problems). The row "wall relaxation, raw drop" ranks moves by latency drop alone: from the small
start it buys the largest drop (vector registers to 2048) and cannot afford the shared memory the
best affordable program needs, where pricing per mm² reaches the joint optimum. The random row is
the worst of ten seeds with a budget of 8 chips. Figure: .formloop/codesign-wall-relaxation-area.png
(or --plot)."""
from __future__ import annotations

import sys
from pathlib import Path

from formloop.cli import app

STUDY = Path(__file__).with_suffix(".toml")

if __name__ == "__main__":
    app(["codesign", str(STUDY), *sys.argv[1:]])
