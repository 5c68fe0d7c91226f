"""Wall time of a Qwen3-8B layer plan (every part solved by HiGHS, one process) with HiGHS's presolve as formloop
sets it (`auto`: off for models of at least solve.highs.PRESOLVE_OFF_COLUMNS columns) or forced on or off; prints
the designs so that two runs can be compared (CPU; not a test).

    PYTHONPATH=src python3 benchmarks/plan_solve_time.py --presolve on > on.txt
    PYTHONPATH=src python3 benchmarks/plan_solve_time.py --presolve auto > auto.txt
    diff <(tail -n +2 on.txt) <(tail -n +2 auto.txt)
"""
from __future__ import annotations

import argparse
import time

from formloop.library.qwen3_layer import get_model, parse_scenario
from formloop.library.qwen3_layer_plan import plan_many
from formloop.solve import highs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presolve", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--scenario", action="append", help="default: decode:2048 and prefill:512")
    args = ap.parse_args()
    if args.presolve != "auto":
        build = highs.MilpBuilder.highs

        def forced(self, time_limit):
            h = build(self, time_limit)
            h.setOptionValue("presolve", args.presolve)
            return h
        highs.MilpBuilder.highs = forced
    scenarios = [parse_scenario(s) for s in (args.scenario or ("decode:2048", "prefill:512"))]
    start = time.perf_counter()
    plans = plan_many(get_model("qwen3-8b"), scenarios, workers=1, norm_fusion=True)
    print(f"presolve {args.presolve}: {time.perf_counter() - start:.1f} s (wall, cpu) for {len(scenarios)} scenarios")
    for p in plans:
        print(p.scenario.text, sorted((n, tuple(sorted(pp.design.items()))) for n, pp in p.parts.items()))


if __name__ == "__main__":
    main()
