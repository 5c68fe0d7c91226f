"""Run the planted-cheat and honest suites through every integrity probe and print one table.

    .venv/bin/python benchmarks/integrity_suite.py [--seed 11]

On a machine without a GPU the Triton kernels run in Triton's interpreter and the times are host
wall time (source 'cpu'); on a GPU the same fixtures run compiled."""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.measure.probes import check_integrity  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "integrity"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    suite = json.loads((FIX / "suite.json").read_text())
    rows = [(c, p, d, v, "cheats") for c, (p, d, v) in suite["cheats"].items()]
    rows += [(h, h, "-", "clean", "honest") for h in suite["honest"]]
    print(f"device: {'gpu ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu (Triton interpreter)'}")
    print(f"| candidate | problem | expected | verdict | correct | flags | probe time (s, {'gpu' if torch.cuda.is_available() else 'cpu'}) |")
    print("|---|---|---|---|---|---|---|")
    misses = 0
    for cand, prob, detector, verdict, kind in rows:
        t0 = time.perf_counter()
        r = check_integrity(FIX / "problems" / f"{prob}.py", FIX / kind / f"{cand}.py", seed=args.seed)
        dt = time.perf_counter() - t0
        flags = sorted({c.obligation for c in r.flags()})
        ok = r.verdict.value == verdict and (detector == "-" and not flags or detector in flags)
        misses += not ok
        print(f"| {kind}/{cand} | {prob} | {detector} -> {verdict} | {r.verdict.value} | {r.correct} | "
              f"{', '.join(flags) or '-'} | {dt:.2f} |" + ("" if ok else " **MISS**"))
    print(f"{len(rows) - misses} of {len(rows)} as expected")


if __name__ == "__main__":
    main()
