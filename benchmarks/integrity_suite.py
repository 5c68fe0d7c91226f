"""The integrity benchmark in one command: the planted-cheat and honest suites, then the harness and
the integrity battery on KernelBench-size level-1 problems, each run as a user runs it (sandboxed,
through formloop.measure.jobs), printing expected vs got per case and the wall times.

    PYTHONPATH=src python3 benchmarks/integrity_suite.py --out DIR [--seed 11] [--only suite|large]

On a GPU the large problems run at full size (ReLU and softmax over 4096 x 393216 fp32: 6.4 GB in,
6.4 GB out) with timing; targets: correctness on 3 input sets plus timing <= 30 s per problem, the
whole integrity battery <= 90 s. Without a GPU the Triton kernels run in Triton's interpreter, the
large problems shrink to a few rows (BATCH x DIM overridden) and are checked without timing; the
wall times are host times (source 'cpu') and say nothing about the GPU targets. Full JSON (every
check, every timing with its clocks and power) goes to DIR/integrity_suite.json."""
from __future__ import annotations

import argparse
import json
import os
import time
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
# (problem, candidate, what must come out, on GPU and on CPU)
LARGE_HARNESS = [("relu", "relu_triton", {"correct": True}), ("softmax", "softmax_triton", {"correct": True}),
                 ("relu", "relu_fingerprint", {"correct": False, "gpu_only": True})]
LARGE_INTEGRITY = [("relu", "relu_triton", "clean"), ("relu", "relu_fingerprint", "gaming")]
HARNESS_TARGET_S, BATTERY_TARGET_S = 30.0, 90.0


def suite_cases() -> list[tuple[str, str, str, str, str]]:
    suite = json.loads((FIX / "suite.json").read_text())
    rows = [(c, p, d, v, "cheats") for c, (p, d, v) in suite["cheats"].items()]
    return rows + [(h, h, "-", "clean", "honest") for h in suite["honest"]]


def run_suite(seed: int, limits: Limits) -> list[dict]:
    out = []
    for cand, prob, detector, verdict, kind in suite_cases():
        t0 = time.perf_counter()
        d = run_integrity(FIX / "problems" / f"{prob}.py", FIX / kind / f"{cand}.py", seed=seed, limits=limits)
        dt = time.perf_counter() - t0
        flags = sorted({c["obligation"] for c in d.get("checks", []) if c["verdict"] == "counterexample"})
        ok = d["verdict"] == verdict and (detector in flags if detector != "-" else kind == "cheats" or not flags)
        out.append({"case": f"{kind}/{cand}", "problem": prob, "expected": f"{detector} -> {verdict}",
                    "verdict": d["verdict"], "correct": d["correct"], "flags": flags, "seconds": dt, "ok": ok,
                    "report": d})
        print(f"  {kind}/{cand:<22} {prob:<16} expected {detector} -> {verdict:<10} got {d['verdict']:<10} "
              f"flags {', '.join(flags) or '-'} ({dt:.1f} s){'' if ok else '  **MISS**'}", flush=True)
    return out


def run_large(seed: int, limits: Limits) -> list[dict]:
    over = None if GPU else CPU_SIZE
    out = []
    for prob, cand, want in LARGE_HARNESS:
        if want.get("gpu_only") and not GPU:
            continue
        t0 = time.perf_counter()
        d = run_harness(LARGE / f"{prob}.py", LARGE / f"{cand}.py", sets=3, seed=seed, timing=GPU, overrides=over,
                        limits=limits)
        dt = time.perf_counter() - t0
        ok = d["correct"] == want["correct"] and (not GPU or dt <= HARNESS_TARGET_S)
        ct, rt = d.get("candidate_time") or {}, d.get("reference_time") or {}
        out.append({"case": f"harness {prob}/{cand}", "expected": f"correct={want['correct']}",
                    "got": f"correct={d['correct']}", "seconds": dt, "target_s": HARNESS_TARGET_S if GPU else None,
                    "candidate_s": ct.get("seconds"), "reference_s": rt.get("seconds"), "ok": ok, "report": d})
        print(f"  harness   {prob}/{cand:<18} correct {d['correct']} (expected {want['correct']}); candidate "
              f"{_ms(ct.get('seconds'))}, reference {_ms(rt.get('seconds'))}; run {dt:.1f} s"
              f"{'' if ok else '  **MISS**'}", flush=True)
    for prob, cand, verdict in LARGE_INTEGRITY:
        t0 = time.perf_counter()
        d = run_integrity(LARGE / f"{prob}.py", LARGE / f"{cand}.py", seed=seed, overrides=over, limits=limits)
        dt = time.perf_counter() - t0
        ok = d["verdict"] == verdict and (not GPU or dt <= BATTERY_TARGET_S)
        slow = sorted(((c["details"].get("probe", "?"), c["seconds"]) for c in d.get("checks", [])),
                      key=lambda x: -x[1])[:3]
        out.append({"case": f"integrity {prob}/{cand}", "expected": verdict, "got": d["verdict"], "seconds": dt,
                    "target_s": BATTERY_TARGET_S if GPU else None, "slowest_probes": slow, "ok": ok, "report": d})
        print(f"  integrity {prob}/{cand:<18} verdict {d['verdict']} (expected {verdict}); battery {dt:.1f} s; "
              f"slowest probes {[(p, round(s, 1)) for p, s in slow]}{'' if ok else '  **MISS**'}", flush=True)
    return out


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for integrity_suite.json")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--only", choices=("suite", "large"), default=None)
    ap.add_argument("--timeout", type=float, default=300.0, help="per-run wall-clock limit (s)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = f"gpu {torch.cuda.get_device_name()}" if GPU else "cpu (Triton interpreter; large problems shrunk)"
    print(f"device: {device}; torch {torch.__version__}", flush=True)
    limits = Limits(wall_s=args.timeout)
    result: dict = {"device": device, "seed": args.seed, "source": "gpu" if GPU else "cpu"}
    t0 = time.perf_counter()
    if args.only in (None, "suite"):
        print("planted and honest suites (sandboxed integrity runs):", flush=True)
        result["suite"] = run_suite(args.seed, limits)
    if args.only in (None, "large"):
        print("large problems (sandboxed harness and integrity runs):", flush=True)
        result["large"] = run_large(args.seed, limits)
    result["total_s"] = time.perf_counter() - t0
    (args.out / "integrity_suite.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"\n| case | expected | got | wall s ({result['source']}) | ok |\n|---|---|---|---|---|")
    for r in result.get("suite", []):
        print(f"| {r['case']} | {r['expected']} | {r['verdict']} [{', '.join(r['flags']) or '-'}] | "
              f"{r['seconds']:.1f} | {'yes' if r['ok'] else '**MISS**'} |")
    for r in result.get("large", []):
        target = f" (target {r['target_s']:g})" if r["target_s"] else ""
        print(f"| {r['case']} | {r['expected']} | {r['got']} | {r['seconds']:.1f}{target} | "
              f"{'yes' if r['ok'] else '**MISS**'} |")
    rows = result.get("suite", []) + result.get("large", [])
    print(f"{sum(r['ok'] for r in rows)} of {len(rows)} as expected; total {result['total_s']:.1f} s; "
          f"JSON: {args.out / 'integrity_suite.json'}")


if __name__ == "__main__":
    main()
