"""Seed 000 Appendix D (Table 23): verification across a controlled sequence of revisions.

The GEMM chain at depth 5 is revised 16 times — cost-expression edits, instance parameters (the
bounded shapes), program structure and verification premises, with three injected faults and their
repairs — and the whole history is replayed under three strategies, each starting from an empty
proof store: full (recheck everything), node reuse (keep proofs whose content key is unchanged),
and query reuse (node reuse plus stored UNSAT answers keyed by normalized SMT-LIB text, solver
context and checker version). Times are sequence totals including graph construction, hashing,
lookups and persistent writes; speedups are medians of paired ratios. Every strategy must give the
same classification (chain verdict and every node's verdict) on every revision.

    .venv/bin/python studies/revision_replay.py [--reps 3] [--shape-counts 1,2,4,8] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from formloop.library.chain.compose import ASSUMPTIONS, ChainConfig, prove_chain
from formloop.verify.proofstore import ProofStore

MODES = ("full", "node", "query")
PAPER = {1: (4.06, 2.34, 1.72), 2: (6.48, 3.94, 1.66), 4: (11.74, 7.24, 1.62), 8: (25.19, 15.87, 1.59)}


def _rev(step: int, **changes) -> Callable[[ChainConfig], ChainConfig]:
    def apply(c: ChainConfig) -> ChainConfig:
        revs = dict(c.revisions)
        revs[step] = replace(c.revision(step), **changes)
        return replace(c, revisions=revs)
    return apply


def _text(name: str, text: str) -> Callable[[ChainConfig], ChainConfig]:
    return lambda c: replace(c, assumption_text={**c.assumption_text, name: text})


def _add_shape(c: ChainConfig) -> ChainConfig:
    return replace(c, shapes=(*c.shapes, max(c.shapes) + 1))


def _drop_shape(c: ChainConfig) -> ChainConfig:
    return replace(c, shapes=c.shapes[:-1])


# (label, kind, revision): applied cumulatively to the base chain.
REVISIONS: list[tuple[str, str, Callable[[ChainConfig], ChainConfig]]] = [
    ("step 1 cost drops the combine term", "cost", _rev(1, cost="no_combine")),
    ("step 3 cost drops the controller area", "cost", _rev(3, cost="no_area")),
    ("step 1 partition becomes blocked", "program", _rev(1, program="blocked")),
    ("FAULT step 4 reads the wrong generation", "fault", _rev(4, fault="wrong_generation")),
    ("step 4 repaired", "program", _rev(4, fault=None)),
    ("one more bounded shape", "instance", _add_shape),
    ("step 3 waits for all completions", "program", _rev(3, program="wait_all")),
    ("arbitration assumption restated", "premise",
     _text("arbitration", "the arbiter grants every non-empty bank queue at least once in any window of A cycles")),
    ("FAULT step 2 separation with tau = 0", "fault", _rev(2, fault="early_overwrite")),
    ("step 2 repaired", "premise", _rev(2, fault=None)),
    ("step 5 arbiter becomes round-robin", "program", _rev(5, program="round_robin")),
    ("step 4 strong contract (beta = 1 added)", "premise", _rev(4, premise="strong")),
    ("the added shape is dropped", "instance", _drop_shape),
    ("FAULT step 5 drains lazily (deadlock)", "fault", _rev(5, fault="deadlock_queue")),
    ("step 5 repaired", "program", _rev(5, fault=None)),
    ("step 1 combine term restored", "cost", _rev(1, cost="default")),
]


def history(shapes: tuple[int, ...]) -> list[tuple[str, str, ChainConfig]]:
    config = ChainConfig(depth=5, shapes=shapes, assumption_text=dict(ASSUMPTIONS))
    out = [("base chain", "initial", config)]
    for label, kind, fn in REVISIONS:
        config = fn(config)
        out.append((label, kind, config))
    return out


def replay(mode: str, versions, tmp: Path) -> dict:
    with ProofStore(tmp / f"{mode}-{time.perf_counter_ns()}.sqlite") as store:
        start = time.perf_counter()
        rows = []
        for label, kind, config in versions:
            r = prove_chain(config, mode=mode, store=store)
            rows.append({"label": label, "kind": kind, "verdict": r.verdict.value, "queries": r.run.queries,
                         "reused_queries": r.run.reused_queries, "reused_nodes": len(r.run.reused_nodes),
                         "steps": {k: r.step_verdict(k).value for k in r.build.step_proofs},
                         "classification": r.classification()})
        return {"seconds": time.perf_counter() - start, "rows": rows}


def study(shape_counts: list[int], reps: int) -> dict:
    results = []
    comparisons = disagreements = 0
    per_revision = None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        replay("full", history((3,))[:2], tmp)  # warm-up
        for count in shape_counts:
            versions = history(tuple(range(3, 3 + count)))
            times = {m: [] for m in MODES}
            ratios = {m: [] for m in MODES[1:]}
            queries = {}
            for rep in range(reps):
                order = MODES[rep % 3:] + MODES[:rep % 3]
                runs = {m: replay(m, versions, tmp) for m in order}
                for m in MODES:
                    times[m].append(runs[m]["seconds"])
                    queries[m] = sum(row["queries"] for row in runs[m]["rows"])
                for m in MODES[1:]:
                    ratios[m].append(runs["full"]["seconds"] / runs[m]["seconds"])
                    for a, b in zip(runs["full"]["rows"], runs[m]["rows"]):
                        comparisons += 1
                        if a["classification"] != b["classification"] or a["verdict"] != b["verdict"]:
                            disagreements += 1
                if per_revision is None:
                    per_revision = [{k: v for k, v in row.items() if k != "classification"} for row in runs["full"]["rows"]]
            paper = PAPER.get(count)
            results.append({
                "shapes": count, "versions": len(versions),
                "full_s": statistics.median(times["full"]), "node_s": statistics.median(times["node"]),
                "query_s": statistics.median(times["query"]),
                "full_over_node": statistics.median(ratios["node"]), "full_over_query": statistics.median(ratios["query"]),
                "queries_full": queries["full"], "queries_node": queries["node"], "queries_query": queries["query"],
                "reps": reps, "paper_full_s": paper and paper[0], "paper_node_s": paper and paper[1],
                "paper_full_over_node": paper and paper[2],
            })
    return {"rows": results, "comparisons": comparisons, "disagreements": disagreements, "revisions": per_revision}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shape-counts", default="1,2,4,8")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = study([int(x) for x in args.shape_counts.split(",")], args.reps)
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if out["disagreements"] == 0 else 1
    print("revision sequence (classification under full checking at the first shape count):")
    for i, row in enumerate(out["revisions"]):
        refuted = [k for k, v in row["steps"].items() if v != "proved"]
        print(f"  v{i:<2} {row['kind']:<8} {row['label']:<42} {row['verdict']:<15}"
              f"{'steps ' + str(refuted) if refuted else ''}")
    print(f"\nTable 23 (seed 000) beside ours: sequence totals, wall s on this machine; medians of {args.reps} paired "
          "replays; speedups are medians of paired ratios")
    print(f"{'shapes':<7}{'versions':>9}{'full s':>9}{'node s':>9}{'query s':>9}{'full/node':>10}{'full/query':>11}"
          f"{'queries f/n/q':>18}   {'paper full':>10}{'paper node':>11}{'paper f/n':>10}")
    for r in out["rows"]:
        q = f"{r['queries_full']}/{r['queries_node']}/{r['queries_query']}"
        paper = (f"{r['paper_full_s']:>10.2f}{r['paper_node_s']:>11.2f}{r['paper_full_over_node']:>9.2f}x"
                 if r["paper_full_s"] else "")
        print(f"{r['shapes']:<7}{r['versions']:>9}{r['full_s']:>9.2f}{r['node_s']:>9.2f}{r['query_s']:>9.2f}"
              f"{r['full_over_node']:>9.2f}x{r['full_over_query']:>10.2f}x{q:>18}   {paper}")
    print(f"\nclassifications compared (node and query vs full, per version): {out['comparisons']}, "
          f"disagreements: {out['disagreements']}")
    return 0 if out["disagreements"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
