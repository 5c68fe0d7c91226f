"""Seed 000 Table 14: verification cost along the five-step GEMM refinement chain.

At depth d, *full* checks steps 1..d from an empty proof store; *progressive* checks the chain at
depth d with steps 1..d-1 already proved and stored (node reuse; query reuse off, as in the seed).
Both include graph construction, hashing, store lookups and persistent writes. Each depth is run
in `--reps` paired repetitions (order alternating); times are medians, the speedup is the median
of the paired full/progressive ratios. A second table injects every fault at depth 5 and checks
that both modes reject it at the step it was injected into.

    .venv/bin/python studies/chain_verification_cost.py [--reps 7] [--shapes 3,4] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from formloop.library.chain.compose import STEPS, ChainConfig, prove_chain, with_fault
from formloop.verify.proofstore import ProofStore

PAPER = {1: (25.5, 26.3, 8, 8, 0.97), 2: (73.8, 48.7, 23, 15, 1.51), 3: (289.0, 200.6, 43, 20, 1.50),
         4: (528.1, 218.9, 65, 22, 2.41), 5: (958.4, 380.6, 92, 27, 2.51)}


def _store(tmp: Path, tag: str) -> ProofStore:
    path = tmp / f"{tag}-{time.perf_counter_ns()}.sqlite"
    return ProofStore(path)


def run_full(depth: int, shapes: tuple[int, ...], tmp: Path, fault: str | None = None):
    with _store(tmp, "full") as st:
        start = time.perf_counter()
        report = prove_chain(with_fault(ChainConfig(depth=depth, shapes=shapes), fault), mode="full", store=st)
        return report, time.perf_counter() - start


def run_progressive(depth: int, shapes: tuple[int, ...], tmp: Path, fault: str | None = None):
    with _store(tmp, "prog") as st:
        if depth > 1:  # the steps above were proved when they were added (untimed)
            prove_chain(ChainConfig(depth=depth - 1, shapes=shapes), mode="node", store=st)
        start = time.perf_counter()
        report = prove_chain(with_fault(ChainConfig(depth=depth, shapes=shapes), fault), mode="node", store=st)
        return report, time.perf_counter() - start


def measure(reps: int, shapes: tuple[int, ...]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        run_full(5, shapes, tmp)  # warm-up: imports, Z3 context, template caches
        for depth in range(1, 6):
            full_s, prog_s, ratios, fq, pq = [], [], [], set(), set()
            for rep in range(reps):
                order = (run_full, run_progressive) if rep % 2 == 0 else (run_progressive, run_full)
                res = {fn: fn(depth, shapes, tmp) for fn in order}
                (fr, ft), (pr, pt) = res[run_full], res[run_progressive]
                if fr.verdict.value != "proved" or pr.verdict.value != "proved":
                    raise SystemExit(f"depth {depth}: full {fr.verdict.value}, progressive {pr.verdict.value}")
                full_s.append(ft)
                prog_s.append(pt)
                ratios.append(ft / pt)
                fq.add(fr.run.queries)
                pq.add(pr.run.queries)
            if len(fq) != 1 or len(pq) != 1:
                raise SystemExit(f"depth {depth}: query counts vary across repetitions: {fq} {pq}")
            paper = PAPER[depth]
            rows.append({
                "depth": depth, "step": STEPS[depth].name,
                "full_queries": fq.pop(), "progressive_queries": pq.pop(),
                "full_ms": statistics.median(full_s) * 1e3, "progressive_ms": statistics.median(prog_s) * 1e3,
                "speedup": statistics.median(ratios), "reps": reps, "shapes": list(shapes),
                "paper_full_ms": paper[0], "paper_progressive_ms": paper[1], "paper_full_queries": paper[2],
                "paper_progressive_queries": paper[3], "paper_speedup": paper[4],
            })
    return rows


def fault_rows(shapes: tuple[int, ...]) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for k, step in STEPS.items():
            for name in step.faults:
                fault = f"{k}:{name}"
                row = {"fault": fault}
                for label, fn in (("full", run_full), ("progressive", run_progressive)):
                    report, _ = fn(5, shapes, tmp, fault)
                    bad = [s for s in STEPS if report.step_verdict(s).value == "counterexample"]
                    row[label] = {"verdict": report.verdict.value, "steps_refuted": bad}
                row["caught_at_injected_step"] = all(row[m]["steps_refuted"] == [k] for m in ("full", "progressive"))
                out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--shapes", default="3,4", help="bounded model sizes, comma-separated")
    ap.add_argument("--no-faults", action="store_true", help="skip the fault table")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    shapes = tuple(int(x) for x in args.shapes.split(","))
    rows = measure(args.reps, shapes)
    faults = [] if args.no_faults else fault_rows(shapes)
    if args.json:
        json.dump(rows if args.no_faults else {"rows": rows, "faults": faults}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"Table 14 (seed 000) beside ours: medians of {args.reps} paired repetitions, shapes {list(shapes)}; "
          "times are wall ms on this machine (ours) / the seed's machine (paper)")
    print(f"{'depth':<6}{'added step':<24}{'full ms':>10}{'prog ms':>10}{'queries':>12}{'speedup':>9}   "
          f"{'paper full':>10}{'paper prog':>11}{'paper q':>9}{'paper x':>8}")
    for r in rows:
        print(f"{r['depth']:<6}{r['step']:<24}{r['full_ms']:>10.1f}{r['progressive_ms']:>10.1f}"
              f"{str(r['full_queries']) + '/' + str(r['progressive_queries']):>12}{r['speedup']:>8.2f}x   "
              f"{r['paper_full_ms']:>10.1f}{r['paper_progressive_ms']:>11.1f}"
              f"{str(r['paper_full_queries']) + '/' + str(r['paper_progressive_queries']):>9}{r['paper_speedup']:>7.2f}x")
    last = rows[-1]
    print(f"depth 5: {last['full_queries'] / last['progressive_queries']:.2f}x fewer queries, "
          f"{last['speedup']:.2f}x faster (paired median)")
    if faults:
        print("\nfaults injected at depth 5 (verdict; steps refuted) — full | progressive")
        for f in faults:
            print(f"{f['fault']:<26}{f['full']['verdict']:<15}{str(f['full']['steps_refuted']):<8}| "
                  f"{f['progressive']['verdict']:<15}{str(f['progressive']['steps_refuted']):<8}"
                  f"{'caught at its step' if f['caught_at_injected_step'] else 'NOT LOCALIZED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
