"""Co-design as user actions: wall relaxation from one start of a study, and a whole study table.

Ratios are worst-scenario cycle ratios to the reference program on the reference chip, from the
study's evaluator (an analytic model); areas are mm^2 from the hardware library's area model."""
from __future__ import annotations

from formloop.api.values import plain
from formloop.codesign import tables
from formloop.codesign.study import load_study
from formloop.codesign.walls import relax_walls
from formloop.errors import InvalidInput

UNIT = "worst-scenario cycle ratio to the reference program on the reference chip (evaluator: analytic model)"


def wall_relax(study: str, objective: str, *, start: str | None = None, coupled: bool = False,
               k: int | None = None, rounds: int | None = None) -> dict:
    """Wall relaxation on a co-design study file: screen and price the walls that bind the best
    software, buy the best latency drop per mm2 under the area ceiling, repeat."""
    s = load_study(study)
    if start is None:
        start = next(iter(s.starts))
    if start not in s.starts:
        raise InvalidInput("start", start, sorted(s.starts))
    if objective not in s.starts[start]:
        raise InvalidInput("objective", objective, sorted(s.starts[start]))
    lib = s.problem.library
    names = lib.open_components()
    r = relax_walls(s.problem, objective, s.starts[start][objective], k=k or s.k, rounds=rounds or s.rounds,
                    coupled=coupled, band=s.band)
    return plain({
        "study": s.name, "objective": objective, "start": r.start.label(names), "chip": r.chip.label(names),
        "chip_values": dict(r.chip.values), "area_mm2": r.chip.area, "ceiling_mm2": lib.ceiling_mm2,
        "L_model": r.L, "L_evaluated": r.evaluated,
        "units": {"L_model": "worst-scenario cycle ratio to the reference (model)",
                  "L_evaluated": "the same ratio on the study's evaluator (evaluated)", "area_mm2": "mm2 (area model)"},
        "software": r.software,
        "purchases": [{"move": p.move, "before": p.before.label(names), "after": p.after.label(names),
                       "predicted_drop": p.predicted_drop, "evaluated_drop": p.evaluated_drop,
                       "added_mm2": p.added_mm2, "mechanism": list(p.mechanism)} for p in r.purchases],
        "calls": r.calls, "bound": r.bound, "inner_problems": r.inner_problems, "events": r.events})


def codesign_study(study: str, *, plot: str | None = None) -> dict:
    """A whole study: wall relaxation against fixed, sequential, random and joint search (capacity
    studies, Table 12 layout) or software-only / hardware-only / sequential / joint (Table 11 layout).
    `plot` ('{study}' is replaced by the study's name) receives the Figure 6-style PNG of a capacity
    study. Each row is strict JSON on its own (a row's `non_finite` says which ratio was infinite)."""
    s = load_study(study)
    rows = tables.capacity_rows(s) if s.kind == "capacity" else tables.table11_rows(s)
    png = None
    if plot and s.kind == "capacity":
        png = str(tables.plot_capacity(s, rows, plot.replace("{study}", s.name)))
    out = {"study": s.name, "kind": s.kind, "unit": UNIT, "plot": png,
           "rows": [plain({k: v for k, v in r.items() if k not in ("trajectory", "trajectories")} | {"unit": UNIT})
                    for r in rows]}
    if s.kind == "capacity":
        cols, grid = tables.capacity_grid(s, rows)
        seed_cols, seed = tables.seed_grid(s)
        out["table"] = {"columns": cols, "methods": grid, "seed_columns": seed_cols, "seed_methods": seed}
    else:
        out["table"] = {"objectives": list(s.problem.objectives), "methods": list(tables.TABLE11_METHODS),
                        "seed_numbers": s.seed_numbers}
    return plain(out)
