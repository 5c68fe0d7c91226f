"""Verification cost for the tiling template (CPU; not a test).

    python benchmarks/verify_bench.py [--repeats 5]

Whole-template proof (K1, K3, index obligations at every menu tile size, schedule obligations for
every admitted (S, P, beta)) per contract; the per-candidate instance check (scope, menus, C, Pre,
and the MILP encoding's rows at the design) of each paper shape's pick; the five design-level
obligations of that pick; and the 24-schedule sweep of Table 16. Medians of `--repeats` runs
(instance checks: of 200 calls). Seed 000 reports about 25 ms per candidate check."""
from __future__ import annotations

import argparse
import platform

from rich.console import Console
from rich.table import Table

from cpu_timing import median_seconds  # this folder; `python benchmarks/...` puts it on the path
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import workload
from formloop.library.gemm_tiling_program import check_design, verify_schedule
from formloop.solve import solve_milp
from formloop.verify import check_instance, prove_template

SHAPES = [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000)]



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    console, chip = Console(), get_chip("illustrative")

    proofs = Table(title=f"whole-template proof, median of {args.repeats} ({platform.machine()}, CPU)")
    for col in ("contract", "obligations", "proved / cex / unresolved", "verdict", "proof s (wall)"):
        proofs.add_column(col, justify="right")
    for pre in ("exact", "strong", "weak"):
        t = get_template("gemm-tiling", pre=pre)
        cert = prove_template(t)
        c = cert.counts()
        secs = median_seconds(lambda: prove_template(t), args.repeats)
        proofs.add_row(pre, str(len(cert.obligations)), f"{c['proved']} / {c['counterexample']} / {c['unresolved']}",
                       cert.verdict.value, f"{secs:.3f}")
    console.print(proofs)

    checks = Table(title="per-candidate cost of each paper shape's pick (exact contract)")
    for col in ("GEMM", "design", "conditions", "instance check ms (median of 200)", "5 obligations s (wall)"):
        checks.add_column(col, justify="right")
    t = get_template("gemm-tiling")
    for shape in SHAPES:
        a = solve_milp(t.formulate(workload(shape), chip)).assignment
        first = check_instance(t, a, workload(shape), chip)
        assert first.ok, first.violations
        ms = 1e3 * median_seconds(lambda: check_instance(t, a, workload(shape), chip), 200)
        full = median_seconds(lambda: check_design(a, shape), args.repeats)
        checks.add_row("x".join(map(str, shape)), str(tuple(a.values())), str(first.conditions), f"{ms:.2f}", f"{full:.3f}")
    console.print(checks)

    sweep = median_seconds(lambda: [verify_schedule(S, P, b) for S in (1, 2, 3) for P in range(4) for b in (0, 1)],
                           args.repeats)
    console.print(f"Table 16 sweep (24 schedules x readiness + lifetime, 2 warps x 5 phases, z3 + replay): "
                  f"{sweep:.3f} s (wall, median of {args.repeats})")


if __name__ == "__main__":
    main()
