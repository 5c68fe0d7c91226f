"""Wall relaxation on a library template: gemm-tiling's shared-memory and accumulator walls.

    python studies/wall_relaxation_gemm_tiling.py [--json] [--plot PATH]

The walls are gemm-tiling's own constraints whose right side is a chip parameter: C1 (the S slots
fit in shared memory, Ms) and the upper half of C2 (the accumulator tile fits, R_acc). The chip is
the illustrative chip of the tiling study drawn from the illustrative hardware library, with shared
memory per SM and registers per SM open (40 chips, 32 within 430 mm2); every chip wall relaxation
scores is first proved (K1 and K3 at the chip's parameters, the template's other obligations from
its family certificate). Scenarios: the tiling study's GEMMs 4096^3, 64x4096x4096 and 1000^3
(fp32). Each cell: final ratio to the template's optimum on the illustrative chip (distinct inner
problems). Figure: .formloop/codesign-wall-relaxation-gemm-tiling.png (or --plot)."""
from __future__ import annotations

import sys
from pathlib import Path

from formloop.cli import app

STUDY = Path(__file__).with_suffix(".toml")

if __name__ == "__main__":
    app(["codesign", str(STUDY), *sys.argv[1:]])
