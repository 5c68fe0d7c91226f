"""Automatic SOL of every shipped problem at its full (KernelBench) size on this CPU: host seconds
and peak memory per problem, against the targets of issue 13 (<= 10 s, <= 1 GiB each).

    PYTHONPATH=src python3 benchmarks/sol_auto_cpu.py [--out DIR] [--small]

One process imports torch and warms automatic SOL up once (the one-time cost, reported apart: torch
and the Python meta kernels it loads on first use); then each problem is counted in a forked child,
whose own peak resident memory (ru_maxrss: torch's pages it touches included) and CPU seconds come
from wait4, and whose wall seconds are measured around the call. On the shared development machine
wall time depends on the other jobs; CPU seconds do not."""
from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import sys
import time
from pathlib import Path

COLD_START = time.perf_counter()
import torch  # noqa: E402  (timed: the import is part of the one-time cost)

from formloop.sol.auto import sol_for_problem  # noqa: E402
from formloop.sol.problemset import find_problem_files, problem_id  # noqa: E402
from formloop.sol.problem import load_problem  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "problems"
GIB = 1 << 30


def _child(path: Path, small: bool, w: int) -> None:
    start = time.perf_counter()
    try:
        r = sol_for_problem(load_problem(path, small=small), "h200")
        out = {"flops": r.flops, "bytes": r.bytes, "floor_s": r.time_floor_s, "bound": r.bound,
               "lower_bound": r.lower_bound, "masked": any("causal" in n for n in r.notes)}
    except Exception as exc:  # noqa: BLE001 - reported in the row
        out = {"error": f"{type(exc).__name__}: {exc}"}
    out["wall_s"] = time.perf_counter() - start
    os.write(w, pickle.dumps(out))
    os._exit(0)


def measure(path: Path, small: bool) -> dict:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(path, small, w)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    row = pickle.loads(data) if data else {"error": f"child exited with status {status}"}
    row.update(cpu_s=usage.ru_utime + usage.ru_stime, peak_rss_bytes=usage.ru_maxrss * 1024)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    warm = time.perf_counter()
    sol_for_problem(load_problem(ROOT / "level1" / "relu.py", small=True), "h200")   # first-use cost
    one_time = {"import_s": warm - COLD_START, "warmup_s": time.perf_counter() - warm,
                "cpu_s": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
                "rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    rows = []
    for path in find_problem_files(ROOT):
        row = {"id": problem_id(load_problem(path), ROOT), **measure(path, args.small)}
        rows.append(row)
        print(f"{row['id']:36s} {row['wall_s']:7.2f} s wall {row['cpu_s']:6.2f} s cpu "
              f"{row['peak_rss_bytes'] / 2**20:7.0f} MiB peak {row.get('error', '')}", file=sys.stderr, flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sol_auto_cpu.json").write_text(json.dumps({"one_time": one_time, "rows": rows}, indent=1))
    print(f"{'problem':36s} {'FLOP':>10s} {'min bytes':>10s} {'bound':>7s} {'masked':>6s} {'wall s':>7s} "
          f"{'cpu s':>6s} {'peak MiB':>8s}  (sol on h200; host seconds; ru_maxrss)")
    for r in rows:
        if "error" in r:
            print(f"{r['id']:36s} ERROR {r['error']}")
            continue
        masked = "yes" if r["masked"] else ""
        print(f"{r['id']:36s} {r['flops']:10.3e} {r['bytes']:10.3e} {r['bound']:>7s} {masked:>6s} "
              f"{r['wall_s']:7.2f} {r['cpu_s']:6.2f} {r['peak_rss_bytes'] / 2**20:8.0f}")
    ok = [r for r in rows if "error" not in r]
    worst_wall = max(r["wall_s"] for r in ok)
    worst_rss = max(r["peak_rss_bytes"] for r in ok)
    print(f"one-time: import torch+formloop {one_time['import_s']:.2f} s, "
          f"first-use warm-up {one_time['warmup_s']:.2f} s "
          f"(wall; {one_time['cpu_s']:.2f} s cpu), {one_time['rss_bytes'] / 2**20:.0f} MiB resident")
    print(f"{len(ok)}/{len(rows)} problems counted; worst wall {worst_wall:.2f} s (target <= 10 s), "
          f"worst peak {worst_rss / 2**20:.0f} MiB (target <= {GIB // 2**20} MiB); "
          f"uncounted operators in {sum(r['lower_bound'] for r in ok)} problems")
    return 0 if len(ok) == len(rows) and worst_wall <= 10 and worst_rss <= GIB else 1


if __name__ == "__main__":
    sys.exit(main())
