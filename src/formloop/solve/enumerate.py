"""Exhaustive enumeration of a formulation, vectorized over the joint menu with numpy.

The third back end: it counts feasible designs, finds the optimum and lists every tied optimum,
and cross-checks the MILP. Ties are ordered by the template's tie-break terms, then by menu
position of each decision in declaration order (the C-order flat index of the joint grid)."""
from __future__ import annotations

import time

import numpy as np

from formloop.errors import Infeasible, InvalidInput
from formloop.expr import evaluate, grid_env
from formloop.solve.explain import irreducible_conflict
from formloop.solve.result import ModelSize, Solution, SolveStatus, tie_slack
from formloop.template import Formulation

MAX_POINTS = 5_000_000


def grid_shape(f: Formulation) -> tuple[int, ...]:
    return tuple(len(d.decision.menu) for d in f.decisions)


def feasible_mask(f: Formulation, constraints=None) -> np.ndarray:
    shape = grid_shape(f)
    env = grid_env(f.decisions)
    mask = np.ones(shape, dtype=bool)
    for c in f.constraints if constraints is None else constraints:
        mask &= np.broadcast_to(np.asarray(evaluate(c.expr, env), dtype=bool), shape)
    return mask


def term_grid(f: Formulation, expr) -> np.ndarray:
    return np.broadcast_to(np.asarray(evaluate(expr, grid_env(f.decisions)), dtype=np.float64), grid_shape(f))


def assignment_at(f: Formulation, flat_index: int) -> dict:
    pos = np.unravel_index(flat_index, grid_shape(f))
    return {d.name: d.decision.menu[int(i)] for d, i in zip(f.decisions, pos)}


def _near_min(values: np.ndarray) -> np.ndarray:
    best = values.min()
    return values - best <= tie_slack(np.maximum(np.abs(values), abs(best)))


def enumerate_designs(f: Formulation, *, max_points: int = MAX_POINTS) -> Solution:
    """Every design of `f`: feasible count, optimum, and all tied optima."""
    start = time.perf_counter()
    size = int(np.prod(grid_shape(f)))
    if size > max_points:
        raise InvalidInput("joint menu size for enumeration", size, f"at most {max_points} points",
                           fix="use the MILP solver")
    feasible = feasible_mask(f)
    flat = np.flatnonzero(feasible)
    if flat.size == 0:
        reasons = irreducible_conflict(f.constraints, lambda cs: bool(feasible_mask(f, cs).any()))
        raise Infeasible(f.template.name, reasons)
    cost = term_grid(f, f.cost).ravel()[flat]
    tied_idx = flat[_near_min(cost)]
    chosen = tied_idx
    for _, expr in f.tie_break_terms():
        chosen = chosen[_near_min(term_grid(f, expr).ravel()[chosen])]
    best = int(chosen.min())
    assignment = assignment_at(f, best)
    objective = float(term_grid(f, f.cost).ravel()[best])
    return Solution(
        solver="enumerate",
        status=SolveStatus.OPTIMAL,
        assignment=assignment,
        objective=objective,
        unit=f.unit,
        bound=float(cost.min()),
        gap=0.0,
        seconds=time.perf_counter() - start,
        model=ModelSize(variables=size, binaries=0, rows=len(f.constraints)),
        terms=f.template.evaluate_terms(assignment, f.params),
        ties=tuple(assignment_at(f, int(i)) for i in tied_idx),
        feasible_count=int(flat.size),
    )


def ranked_designs(f: Formulation, k: int, *, group: str | None = None, distinct: tuple[str, ...] = (),
                   max_points: int = MAX_POINTS) -> list[tuple[dict, float]]:
    """The `k` feasible designs of lowest model cost, as (assignment, cost) ordered by cost; with `group`
    (a decision name), the `k` best of each value of that decision (a measurement menu that spans the
    layouts the model ranks apart); with `distinct` (decision names), one design (the cheapest) per value
    of those decisions, so near-duplicates (e.g. pipeline stages at the same tile) do not fill the menu."""
    if k < 1:
        raise InvalidInput("ranked designs k", k, "an integer >= 1")
    size = int(np.prod(grid_shape(f)))
    if size > max_points:
        raise InvalidInput("joint menu size for enumeration", size, f"at most {max_points} points")
    flat = np.flatnonzero(feasible_mask(f))
    cost = term_grid(f, f.cost).ravel()[flat]
    order = flat[np.argsort(cost, kind="stable")]
    picked, per, seen = [], {}, set()
    for i in order:
        a = assignment_at(f, int(i))
        key, same = a.get(group) if group else None, tuple(a[n] for n in distinct)
        if per.get(key, 0) >= k or (distinct and same in seen):
            continue
        per[key] = per.get(key, 0) + 1
        seen.add(same)
        picked.append((a, float(term_grid(f, f.cost).ravel()[int(i)])))
    return sorted(picked, key=lambda p: p[1])


def spread_designs(f: Formulation, n: int, *, axis: str, band: float, first: dict | None = None) -> list[dict]:
    """`n` designs for measurement where the model cannot choose: among the best design per value of `axis`
    whose cost is within `band` (a fraction) of the optimum, each next one the farthest in log2(axis) from
    those already taken, starting from `first` (the solver's pick) or the cheapest. A tie band of a
    memory-bound model spans layouts that measure apart by more than the model's spread."""
    if n < 1 or band < 0:
        raise InvalidInput("spread designs n, band", (n, band), "n >= 1 and band >= 0")
    ranked = ranked_designs(f, 1, group=axis)
    best = ranked[0][1]
    pool = [d for d, c in ranked if c <= best * (1 + band)]
    taken = [first if first is not None else pool[0]]
    pool = [d for d in pool if d[axis] != taken[0][axis]]
    while pool and len(taken) < n:
        far = max(pool, key=lambda d: min(abs(np.log2(d[axis]) - np.log2(t[axis])) for t in taken))
        taken.append(far)
        pool.remove(far)
    return taken


def spread_pick(f: Formulation, first: dict, attempt: int, *, axis: str, band: float) -> dict:
    """Attempt `attempt`'s design: 0 is `first` (the solver's pick), k the k-th of `spread_designs`, or
    `first` again when the tie band holds fewer (the engine then records a repeat, unmeasured)."""
    if attempt < 1:
        return first
    menu = spread_designs(f, attempt + 1, axis=axis, band=band, first=first)
    return {k: int(v) for k, v in menu[attempt].items()} if len(menu) > attempt else first
