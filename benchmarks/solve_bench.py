"""Solver and instance-check cost for the tiling template (CPU; not a test).

    python benchmarks/solve_bench.py [--repeats 7]

Per paper shape: HiGHS time to proven optimality (first stage alone, and with the tie-break
stages), enumeration of the joint menu, and the instance check of the chosen design. Medians of
`--repeats` runs (checks: of 200 calls). Seed 000 reports 0.03-0.16 s per MILP (93 variables) and
about 25 ms per instance check."""
from __future__ import annotations

import argparse
import platform

from rich.console import Console
from rich.table import Table

from cpu_timing import median_seconds  # this folder; `python benchmarks/...` puts it on the path
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import workload
from formloop.solve import enumerate_designs, solve_milp

SHAPES = [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000)]



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    chip, template = get_chip("illustrative"), get_template("gemm-tiling")
    table = Table(title=f"tiling template solve/check cost, median of {args.repeats} ({platform.processor() or platform.machine()}, CPU)")
    for col in ("GEMM", "model vars/bin/rows", "MILP 1st stage s", "MILP + tie-break s", "enumerate s", "check ms"):
        table.add_column(col, justify="right")
    for shape in SHAPES:
        wl = workload(shape)
        f = template.formulate(wl, chip)
        sol = solve_milp(f)
        first = median_seconds(lambda: solve_milp(f, break_ties=False), args.repeats)
        full = median_seconds(lambda: solve_milp(f), args.repeats)
        enum = median_seconds(lambda: enumerate_designs(f), args.repeats)
        check = median_seconds(lambda: template.check(sol.assignment, wl, chip), 200)
        m = sol.model
        table.add_row("x".join(map(str, shape)), f"{m.variables}/{m.binaries}/{m.rows}", f"{first:.3f}", f"{full:.3f}",
                      f"{enum:.4f}", f"{check * 1e3:.3f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
