"""`formloop optimize` on the problems the vecops regions cover, on one GPU, one command, resumable:

    PYTHONPATH=src python3 benchmarks/optimize_vecops.py --out DIR [--budget-s 480] [--dtype bf16]

The problems (level1): group_norm, instance_norm, batch_norm, cumsum, argmax_dim, cross_entropy, max_pool2d,
unfold_patches, at their real (KernelBench) sizes, fp32 (--dtype bf16: models and floating inputs cast to bf16,
cross_entropy stays fp32 for its int64 targets), KernelBench's tolerances: each ModelNew checked by
the harness (fresh inputs, poisoned outputs, float64 truth) and the integrity battery in a child process,
timed against eager and torch.compile by formloop.measure.timer (CUDA graphs). The report is
DIR/report.md / report.json (speedups vs eager and vs torch.compile, SOL fraction per problem).
--dry-run (any machine): each problem's region and the MILP designs at full size, nothing run.
Without CUDA it runs the pipeline in the Triton interpreter at SMALL sizes (labelled; not kernel speedups)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "problems" / "level1"
PROBLEMS = ("group_norm", "instance_norm", "batch_norm", "cumsum", "argmax_dim", "cross_entropy", "max_pool2d",
            "unfold_patches")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--only", action="append", default=[], choices=PROBLEMS, help="these problems only (repeatable)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="no new attempt after this many seconds")
    ap.add_argument("--attempts", type=int, default=1, help="attempts per problem at most")
    ap.add_argument("--dry-run", action="store_true", help="regions and designs only (model), nothing run")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"), help="the problem set's variant")
    args = ap.parse_args(argv)
    import torch

    from formloop import api

    files = [str(ROOT / f"{p}.py") for p in (args.only or PROBLEMS)]
    if args.dry_run:
        from formloop.optimize.assemble import assemble
        from formloop.optimize.capture import capture
        from formloop.optimize.recognize import recognize
        from formloop.sol.problem import load_problem

        for f in files:
            cast = torch.bfloat16 if args.dtype == "bf16" and not f.endswith("cross_entropy.py") else None
            cap = capture(load_problem(f), cast)
            asm = assemble(cap, recognize(cap), tier="gpu")
            print(Path(f).stem, json.dumps([(r["kind"], r["design"]) for r in asm.regions]), asm.skipped or "",
                  flush=True)
        return 0
    gpu = torch.cuda.is_available()
    report = api.optimize(files, out=str(args.out), budget=args.attempts, small=not gpu,
                          tier="gpu" if gpu else "interpreter", chip="h200", tolerance="kernelbench", workers=4,
                          deadline_s=args.budget_s, dtype=args.dtype)
    print((args.out / "report.md").read_text())
    print(json.dumps({"tier": report["tier"], "summary": report["summary"]}, indent=1))
    for r in report["problems"]:
        best = r.get("best") or {}
        print(f"{r['problem']}: {r['status']} regions={[g['kind'] for g in r.get('regions') or []]} "
              f"time={best.get('time_s')} s ({best.get('time_source')}) verdicts="
              f"{[v.get('verdict') for v in r.get('verdicts', [])]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
