"""The integrity benchmark in one command: the planted-cheat and honest suites, then the harness and
the integrity battery on KernelBench-size level-1 problems, each run as a user runs it (sandboxed,
through formloop.measure.jobs), printing expected vs got per case and the wall times.

    PYTHONPATH=src python3 benchmarks/integrity_suite.py --out DIR [--seed 11] [--only suite|large]
        [--jobs 3] [--budget-s 170]

On a GPU the large problems run at full size (ReLU and softmax over 4096 x 393216 fp32: 6.4 GB in,
6.4 GB out) with timing; targets: correctness on 3 input sets plus timing <= 30 s per problem, the
whole integrity battery <= 90 s. The fingerprint-cache cheat must be warned by the harness (faster
than the SOL floor of the device's own chip, no --chip given) and judged gaming by the battery
(never 'crashed': an out-of-memory inside a probe is that probe's finding). Without a GPU the Triton
kernels run in Triton's interpreter, the large problems shrink to a few rows (BATCH x DIM
overridden) and are checked without timing; the wall times are host times (source 'cpu') and say
nothing about the GPU targets. `--jobs` runs that many suite cases at once (each its own sandboxed
child; the suite is not timed). `--budget-s` stops starting new cases once spent (the rest are
listed 'not run'). DIR/integrity_suite.json (every check, every timing with its clocks and power)
and DIR/integrity_suite.md (the table) are rewritten after every case, so a run cut short keeps
what it had."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.measure.jobs import run_harness, run_integrity  # noqa: E402
from formloop.measure.sandbox import Limits  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "integrity"
LARGE = FIX / "large"
CPU_SIZE = {"BATCH": 6, "DIM": 3000}
# (problem, candidate, what must come out; correct None: either). 'warned': the harness's
# faster-than-SOL warning (GPU only: a CPU time has no floor). The cheat first: the first H200 run
# missed it.
LARGE_HARNESS = [("relu", "relu_fingerprint", {"correct": None, "warned": True}),
                 ("relu", "relu_triton", {"correct": True, "warned": False}),
                 ("softmax", "softmax_triton", {"correct": True, "warned": False})]
LARGE_INTEGRITY = [("relu", "relu_fingerprint", "gaming", "cached-output"), ("relu", "relu_triton", "clean", "-")]
HARNESS_TARGET_S, BATTERY_TARGET_S = 30.0, 90.0


class Recorder:
    """Rows as they come, rewritten to DIR after each: a run cut short keeps what it had."""

    def __init__(self, out: Path, head: dict):
        self.out, self.result = out, {**head, "suite": [], "large": []}
        self.t0 = time.perf_counter()

    def add(self, part: str, row: dict) -> None:
        self.result[part].append(row)
        self.result["total_s"] = time.perf_counter() - self.t0
        (self.out / "integrity_suite.json").write_text(json.dumps(self.result, indent=1, default=str))
        (self.out / "integrity_suite.md").write_text(table(self.result))


def table(result: dict) -> str:
    lines = [f"device: {result['device']}; seed {result['seed']}; wall s are {result['source']} wall time of the "
             "whole sandboxed run", "", "| case | expected | got | wall s | ok |", "|---|---|---|---|---|"]
    for r in result.get("suite", []):
        lines.append(f"| {r['case']} | {r['expected']} | {r['verdict']} [{', '.join(r['flags']) or '-'}] | "
                     f"{r['seconds']:.1f} | {_ok(r)} |")
    for r in result.get("large", []):
        target = f" (target {r['target_s']:g})" if r.get("target_s") else ""
        lines.append(f"| {r['case']} | {r['expected']} | {r['got']} | {r['seconds']:.1f}{target} | "
                     f"{_ok(r)} |")
    rows = [r for r in result.get("suite", []) + result.get("large", []) if r.get("ran", True)]
    lines.append(f"\n{sum(r['ok'] for r in rows)} of {len(rows)} run cases as expected; "
                 f"{sum(not r.get('ran', True) for r in result.get('suite', []) + result.get('large', []))} not run "
                 f"(budget); {result.get('total_s', 0):.1f} s in all")
    return "\n".join(lines) + "\n"


def _ok(r: dict) -> str:
    return "yes" if r["ok"] else ("not run" if not r.get("ran", True) else "**MISS**")


def suite_cases() -> list[tuple[str, str, str, str, str]]:
    suite = json.loads((FIX / "suite.json").read_text())
    rows = [(c, p, d, v, "cheats") for c, (p, d, v) in suite["cheats"].items()]
    return rows + [(h, h, "-", "clean", "honest") for h in suite["honest"]]


def suite_case(case: tuple, seed: int, limits: Limits) -> dict:
    cand, prob, detector, verdict, kind = case
    t0 = time.perf_counter()
    d = run_integrity(FIX / "problems" / f"{prob}.py", FIX / kind / f"{cand}.py", seed=seed, limits=limits)
    dt = time.perf_counter() - t0
    flags = sorted({c["obligation"] for c in d.get("checks", []) if c["verdict"] == "counterexample"})
    ok = d["verdict"] == verdict and (detector in flags if detector != "-" else kind == "cheats" or not flags)
    print(f"  {kind}/{cand:<22} {prob:<16} expected {detector} -> {verdict:<10} got {d['verdict']:<10} "
          f"flags {', '.join(flags) or '-'} ({dt:.1f} s){'' if ok else '  **MISS**'}", flush=True)
    return {"case": f"{kind}/{cand}", "problem": prob, "expected": f"{detector} -> {verdict}", "verdict": d["verdict"],
            "correct": d["correct"], "flags": flags, "seconds": dt, "ok": ok, "report": d}


def until(limits: Limits, deadline: float) -> Limits:
    """The per-run limit, cut to what is left of the budget (a run never outlives its part)."""
    return Limits(wall_s=max(5.0, min(limits.wall_s, deadline - time.perf_counter())))


def skipped(case: str, expected: str) -> dict:
    return {"case": case, "expected": expected, "verdict": "not run (budget spent)", "got": "not run (budget spent)",
            "flags": [], "seconds": 0.0, "ok": False, "ran": False}


def run_suite(rec: Recorder, seed: int, limits: Limits, jobs: int, deadline: float) -> None:
    cases = suite_cases()

    def one(case: tuple) -> dict:
        if time.perf_counter() > deadline:
            return skipped(f"{case[4]}/{case[0]}", f"{case[2]} -> {case[3]}")
        cut = until(limits, deadline)
        row = suite_case(case, seed, cut)
        if row["verdict"] == "timed-out" and cut.wall_s < limits.wall_s:   # the budget ended it, not the case
            row.update(skipped(row["case"], row["expected"]), verdict="cut (budget spent)", seconds=row["seconds"])
        return row

    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each case is its own child process
        for row in pool.map(one, cases):
            rec.add("suite", row)


def large_harness(prob: str, cand: str, want: dict, seed: int, limits: Limits) -> dict:
    over = None if GPU else CPU_SIZE
    t0 = time.perf_counter()
    d = run_harness(LARGE / f"{prob}.py", LARGE / f"{cand}.py", sets=3, seed=seed, timing=GPU, overrides=over,
                    limits=limits)
    dt = time.perf_counter() - t0
    warned = any("faster than the SOL bound" in w for w in d.get("warnings", []))
    ok = d.get("status") == "completed" and want["correct"] in (None, d["correct"])
    if GPU:
        ok = ok and warned == want["warned"] and dt <= HARNESS_TARGET_S
    ct, rt = d.get("candidate_time") or {}, d.get("reference_time") or {}
    expected = ("correct=any" if want["correct"] is None else f"correct={want['correct']}") \
        + (f", warned={want['warned']}" if GPU else "")
    got = f"correct={d['correct']}" + (f", warned={warned}" if GPU else "") if d.get("status") == "completed" \
        else f"{d.get('verdict')}: {d.get('summary', '')[:80]}"
    floor = d.get("sol_floor_s")
    print(f"  harness   {prob}/{cand:<18} {got} (expected {expected}); candidate {_ms(ct.get('seconds'))}, "
          f"reference {_ms(rt.get('seconds'))}, SOL floor {_ms(floor)} ({d.get('sol_note', '')[:90]}); run {dt:.1f} s"
          f"{'' if ok else '  **MISS**'}", flush=True)
    return {"case": f"harness {prob}/{cand}", "expected": expected, "got": got, "seconds": dt,
            "target_s": HARNESS_TARGET_S if GPU else None, "candidate_s": ct.get("seconds"),
            "reference_s": rt.get("seconds"), "sol_chip": d.get("sol_chip"), "sol_floor_s": floor,
            "warnings": d.get("warnings", []), "ok": ok, "report": d}


def large_integrity(prob: str, cand: str, verdict: str, detector: str, seed: int, limits: Limits) -> dict:
    over = None if GPU else CPU_SIZE
    t0 = time.perf_counter()
    d = run_integrity(LARGE / f"{prob}.py", LARGE / f"{cand}.py", seed=seed, overrides=over, limits=limits)
    dt = time.perf_counter() - t0
    flags = sorted({c["obligation"] for c in d.get("checks", []) if c["verdict"] == "counterexample"})
    ok = d["verdict"] == verdict and (detector in flags if detector != "-" else not flags)
    ok = ok and (not GPU or dt <= BATTERY_TARGET_S)
    slow = sorted(((c["details"].get("probe", "?"), c["seconds"]) for c in d.get("checks", [])), key=lambda x: -x[1])
    rebuilt = sorted({c["details"]["probe"] for c in d.get("checks", []) if c["details"].get("released")})
    print(f"  integrity {prob}/{cand:<18} verdict {d['verdict']} [{', '.join(flags) or '-'}] (expected {verdict}); "
          f"battery {dt:.1f} s; slowest probes {[(p, round(s, 1)) for p, s in slow[:3]]}; candidate rebuilt after "
          f"{rebuilt or 'none'}{'' if ok else '  **MISS**'}", flush=True)
    return {"case": f"integrity {prob}/{cand}", "expected": f"{detector} -> {verdict}",
            "got": f"{d['verdict']} [{', '.join(flags) or '-'}]", "seconds": dt,
            "target_s": BATTERY_TARGET_S if GPU else None, "slowest_probes": slow[:3], "rebuilt_after": rebuilt,
            "ok": ok, "report": d}


def run_large(rec: Recorder, seed: int, limits: Limits, deadline: float) -> None:
    todo = [("h", *c) for c in LARGE_HARNESS[:1]] + [("i", *LARGE_INTEGRITY[0])] + \
        [("h", *c) for c in LARGE_HARNESS[1:]] + [("i", *c) for c in LARGE_INTEGRITY[1:]]
    for kind, prob, cand, *want in todo:
        case = f"{'harness' if kind == 'h' else 'integrity'} {prob}/{cand}"
        if time.perf_counter() > deadline:
            rec.add("large", skipped(case, str(want)))
        else:
            cut = until(limits, deadline)
            row = large_harness(prob, cand, want[0], seed, cut) if kind == "h" else \
                large_integrity(prob, cand, want[0], want[1], seed, cut)
            if row["report"].get("status") == "timed-out" and cut.wall_s < limits.wall_s:
                row.update(ran=False, got=f"cut after {row['seconds']:.0f} s (budget spent)")
            rec.add("large", row)


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f} ms"


def exclusive_gpu() -> bool:
    """True when the GPU admits one process at a time (then the suite runs its cases one by one)."""
    try:
        mode = subprocess.run(["nvidia-smi", "--query-gpu=compute_mode", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "exclusive" in mode.lower() or "prohibited" in mode.lower()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for integrity_suite.json and .md")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--only", choices=("suite", "large"), default=None)
    ap.add_argument("--timeout", type=float, default=300.0, help="per-run wall-clock limit (s)")
    ap.add_argument("--jobs", type=int, default=1, help="suite cases run at once (1 ... 8)")
    ap.add_argument("--budget-s", type=float, default=None, help="start no new case after this many seconds")
    args = ap.parse_args()
    if not 1 <= args.jobs <= 8:
        ap.error(f"--jobs {args.jobs}: allowed 1 ... 8")
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = 1 if GPU and exclusive_gpu() else args.jobs
    device = f"gpu {torch.cuda.get_device_name()}" if GPU else "cpu (Triton interpreter; large problems shrunk)"
    print(f"device: {device}; torch {torch.__version__}; suite jobs {jobs}", flush=True)
    limits = Limits(wall_s=args.timeout)
    rec = Recorder(args.out, {"device": device, "seed": args.seed, "source": "gpu" if GPU else "cpu", "jobs": jobs})
    deadline = time.perf_counter() + (args.budget_s if args.budget_s else float("inf"))
    if args.only in (None, "suite"):
        print("planted and honest suites (sandboxed integrity runs):", flush=True)
        run_suite(rec, args.seed, limits, jobs, deadline)
    if args.only in (None, "large"):
        print("large problems (sandboxed harness and integrity runs):", flush=True)
        run_large(rec, args.seed, limits, deadline)
    print("\n" + table(rec.result) + f"JSON: {args.out / 'integrity_suite.json'}", flush=True)


if __name__ == "__main__":
    main()
