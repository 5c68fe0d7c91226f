"""`formloop optimize` over the shipped problem set on one GPU, one command, resumable across calls:

    PYTHONPATH=src python3 benchmarks/optimize_set.py --out DIR --budget-s 480 [--dtype bf16] [--ray auto]
    PYTHONPATH=src python3 benchmarks/optimize_set.py --out DIR --only bmm_heads --only gemm_skinny   # a subset
    PYTHONPATH=src python3 benchmarks/optimize_set.py --out /tmp/opt --bundle $OUT/opt.tgz   # on the device: one file back
    PYTHONPATH=src python3 benchmarks/optimize_set.py --out DIR --report-only   # the report from DIR's store, anywhere
    PYTHONPATH=src python3 benchmarks/optimize_set.py --out /tmp/opt --compile-only --workers 12   # baselines only
    PYTHONPATH=src python3 benchmarks/optimize_set.py --out /tmp/opt --only conv2d_3x3 --restart conv2d_3x3   # again,
        # from the MILP's design, after the problem's kernels changed (the old attempts are kept as 'retired')
    PYTHONPATH=src python3 benchmarks/optimize_set.py --out /tmp/opt --compile-only --recompile relu   # its
        # torch.compile baseline timed again, after the harness's timing changed (the old one kept as 'previous')

Every problem at its real size, fp32 as written, KernelBench's tolerances: capture, recognize, choose
each region's instance by MILP, assemble ModelNew, check it with the harness (fresh inputs, poisoned
outputs, float64 truth) and the integrity battery in a child process, time it against eager and
torch.compile by formloop.measure.timer (CUDA graphs), and schedule attempts by SOL gap. The
torch.compile baselines (every problem's, those keeping the reference included) come after the
attempts, or alone with --compile-only: the references are compiled in parallel in the process pool
into an Inductor cache under DIR/compile_cache, then each is checked and timed in its own sandboxed
harness child from the warm cache. The record
is a population store, DIR/population.db unless --store names another (campaign 'fp32/full' or
'bf16/full'): a second call with the same DIR continues where the first stopped (no new attempt
starts after --budget-s seconds, so one call fits a 10-minute device slot). Each call rewrites
DIR/report.json, DIR/report.md, DIR/fast_p.svg (and DIR/fast_p.png with matplotlib) and prints the
summary last, with the engine that ran (process pool, or Ray with --ray) and the time per phase.

--dtype bf16: the bf16 variant (models, inputs and both baselines cast to bf16, the harness's bf16
tolerance; problems that cannot be cast stay fp32, with the reason).

Without CUDA it runs the same pipeline in the Triton interpreter at SMALL sizes (labelled; the
speedups are not kernel speedups); --dry-run lists the problems and their coverage only."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "problems"


def main(argv=None) -> int:
    # Every attempt and baseline runs in a fresh child that imports torch (and Inductor) again; where the
    # interpreter's site-packages are read-only (the GPU image), their bytecode is never cached and each
    # child compiles those sources anew (RESULTS.md, torch.compile baselines: the timing children's wall times
    # before and after). A shared bytecode cache for the children, unless one is set.
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "formloop-pycache"))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--root", type=Path, default=ROOT, help="problem set (default: the shipped problems/)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="no new attempt after this many seconds")
    ap.add_argument("--attempts", type=int, default=3, help="attempts per problem at most")
    ap.add_argument("--chip", default="h200")
    ap.add_argument("--workers", type=int, default=8, help="process pool for capture, MILP and assembly")
    ap.add_argument("--level", type=int, action="append", default=[], help="only these levels (repeatable)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="only the problem NAME (file stem, e.g. bmm_heads; repeatable)")
    ap.add_argument("--restart", action="append", default=[], metavar="NAME",
                    help="retire NAME's attempts (kept in the store as 'retired', no longer counted) and start it "
                         "again from the MILP's design: after its kernels changed (repeatable)")
    ap.add_argument("--recompile", action="append", default=[], metavar="NAME",
                    help="clear NAME's torch.compile baseline (the old one kept in its record as 'previous') so that "
                         "--compile-only times it again: after the harness's timing changed (repeatable)")
    ap.add_argument("--fp32-operands", default="auto", help="GEMM operands of fp32 problems: auto | tf32 | tf32x3 | "
                                                           "fp32 (auto: the fastest whose error bound fits)")
    ap.add_argument("--small", action="store_true", help="SMALL sizes (forced without CUDA)")
    ap.add_argument("--dry-run", action="store_true", help="bootstrap only: coverage, no measurement")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"), help="the problem set's variant")
    ap.add_argument("--store", type=Path, default=None, help="population store (default: OUT/population.db)")
    ap.add_argument("--ray", default=None, help="auto | local | ADDRESS: Ray tasks instead of the process pool")
    ap.add_argument("--compile-only", action="store_true",
                    help="only the torch.compile baselines of the store's problems (warm in parallel, then time "
                         "each in a sandboxed child; resumable, no new step after --budget-s)")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild DIR's report from the store, nothing measured (any machine; the store's tier)")
    ap.add_argument("--bundle", type=Path, default=None, help="also write the report, the store and the plot as one "
                                                              ".tar.gz here (a device call returns few files)")
    args = ap.parse_args(argv)
    import torch

    from formloop import api
    from formloop.optimize.engine import problem_files

    dirs = [args.root / f"level{n}" for n in args.level] if args.level else [args.root]
    if args.only:
        found = {f.stem: f for f in problem_files(dirs)}
        missing = [n for n in args.only if n not in found]
        if missing:
            ap.error(f"--only: no problem named {', '.join(missing)} (allowed: {', '.join(sorted(found))})")
        dirs = [found[n] for n in args.only]
    gpu = torch.cuda.is_available()
    small = args.small or not gpu
    if args.report_only:
        return report_only(args, problem_files(dirs))
    if args.dry_run:
        from formloop.optimize.attempt import bootstrap
        for f in problem_files(dirs):
            b = bootstrap(str(f), small=small, chip=args.chip, dtype=args.dtype)
            regions = [r["kind"] for r in (b["recognition"] or {}).get("regions", [])]
            print(f"{f.stem}: {b['status']} {b['dtype']} {regions or ''} {b['reason'][:120]} {b['dtype_reason'][:80]}",
                  flush=True)
        return 0
    if args.restart:
        restart(args, small)
    if args.recompile:
        recompile(args, small)
    report = api.optimize([str(d) for d in dirs], out=str(args.out), budget=args.attempts, small=small,
                          tier="gpu" if gpu else "interpreter", chip=args.chip, tolerance="kernelbench",
                          workers=args.workers, deadline_s=args.budget_s, dtype=args.dtype, ray=args.ray,
                          fp32_operands=args.fp32_operands, compile_only=args.compile_only,
                          store=str(args.store or args.out / "population.db"))
    s = report["summary"]
    print((args.out / "report.md").read_text())
    print(json.dumps({"tier": report["tier"], "dtype": report["dtype"], "engine": report["engine"], "summary": s},
                     indent=1))
    pending = [r["problem"] for r in report["problems"] if r["status"] == "ready" and r["attempts"] < args.attempts]
    print(f"{len(pending)} problems still have attempts left" + (": call again with the same --out to resume"
                                                                if pending else " (campaign complete)"))
    if args.bundle:
        bundle(args.out, report, args.bundle)
    return 0


def restart(args, small: bool) -> None:
    from formloop.optimize.store import OptimizeStore

    campaign = f"{args.dtype}/{'small' if small else 'full'}"
    with OptimizeStore(args.store or args.out / "population.db", campaign) as store:
        for name in args.restart:
            n = store.retire_attempts(name, "--restart: its kernels changed since they were measured")
            print(f"{name}: {n} attempts retired, starts again from the MILP's design", flush=True)


def recompile(args, small: bool) -> None:
    from formloop.optimize.store import OptimizeStore

    campaign = f"{args.dtype}/{'small' if small else 'full'}"
    with OptimizeStore(args.store or args.out / "population.db", campaign) as store:
        for name in args.recompile:
            rec = store.problem(name)
            if rec is None:
                raise SystemExit(f"--recompile: {name} has no record in campaign {campaign}")
            previous = {"compile_s": rec.get("compile_s"), **(rec.get("compile") or {})}
            store.set_compile(name, None, {"previous": previous, "cleared": "--recompile"})
            print(f"{name}: torch.compile baseline cleared (was {previous['compile_s']} s); --compile-only times it "
                  "again", flush=True)


def report_only(args, files) -> int:
    """The report of the store's campaign over `files`, built as a measuring call builds it."""
    from formloop.optimize.engine import Settings
    from formloop.optimize.report import build_report
    from formloop.optimize.store import OptimizeStore

    path = args.store or args.out / "population.db"
    if not Path(path).is_file():
        raise SystemExit(f"--report-only: no store at {path}")
    campaign = f"{args.dtype}/{'small' if args.small else 'full'}"
    with OptimizeStore(path, campaign, mode="read") as store:
        tiers = {(store.problem(f.stem) or {}).get("tier") for f in files} - {None}
        tier = "gpu" if "gpu" in tiers else "interpreter"
        settings = Settings(out=args.out, budget=args.attempts, chip=args.chip, tolerance="kernelbench",
                            workers=args.workers, dtype=args.dtype, fp32_operands=args.fp32_operands)
        args.out.mkdir(parents=True, exist_ok=True)
        report = build_report(store, [f.stem for f in files], tier=tier, settings=settings, out=args.out,
                              engine={"engine": "none (--report-only: nothing measured)"})
    print((args.out / "report.md").read_text())
    if args.bundle:
        bundle(args.out, report, args.bundle)
    return 0


def bundle(out: Path, report: dict, target: Path) -> None:
    """One archive of what a call leaves worth keeping: report (md, json), plot, the store (a consistent
    copy through SQLite's backup, so a write-ahead log is folded in)."""
    import sqlite3
    import tarfile

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "population.db"
        src = sqlite3.connect(report.get("store") or str(out / "population.db"))
        dst = sqlite3.connect(store)
        with dst:
            src.backup(dst)
        src.close()
        dst.close()
        target.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(target, "w:gz") as tar:
            for name in ("report.md", "report.json", "fast_p.svg", "fast_p.png"):
                if (out / name).is_file():
                    tar.add(out / name, arcname=name)
            tar.add(store, arcname="population.db")
    print(f"bundle: {target}")


if __name__ == "__main__":
    sys.exit(main())
