"""Template reuse as a user action (issue 18 part 2; seed 000 Tables 20-21): a family solved on some
workloads, then copy (the nearest solved assignment) vs re-solve for held-out workloads.

Times are the family's cost model on the study's chip (source: model); solve seconds are wall time
of the solver on this machine; the GPU figures come from benchmarks/template_reuse.py."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from formloop.api.values import plain
from formloop.codesign.reuse import load_reuse_study, run_reuse


def template_reuse(study: str, *, solver: str | None = None, only: Sequence[str] | None = None,
                   calibration: Mapping[str, float] | None = None) -> dict:
    """Solve the study's solved workloads; for every held-out one (or those named in `only`), the
    model time of the nearest solved assignment copied unchanged vs the family re-solved for it."""
    s = load_reuse_study(study)
    solved, rows = run_reuse(s, solver=solver, calibration=calibration, only=list(only) if only else None)
    unit = rows[0].unit if rows else "us"
    return plain({
        "study": s.name, "template": s.template, "chip": s.chip, "solver": solver or s.solver,
        "calibration": {**s.calibration, **(calibration or {})} or "priors",
        "units": {"copied": f"{unit} (model)", "resolved": f"{unit} (model)",
                  "ratio": "copied / re-solved model time (> 1: re-solving wins; null: the copy breaks a wall)",
                  "solve_s": "seconds of wall time of the solver on this machine"},
        "solved": [{"workload": n, **v} for n, v in solved.items()],
        "rows": [{"workload": r.workload, "params": r.params, "nearest": r.nearest, "distance": r.distance,
                  "copied": r.copied, "copied_us": r.copied_us, "copied_violations": r.copied_violations,
                  "resolved": r.resolved, "resolved_us": r.resolved_us, "ratio": r.ratio, "same": r.same,
                  "solve_s": r.solve_s, "terms": r.terms} for r in rows],
    })
