"""Solve a formulation one value of a branching decision at a time (the MILP's schedule split).

A decision that switches whole cost branches (gemm-tiling-gpu's schedule SC: `where(SC == 1, T_pers − ...)`)
is read by nearly every table of the cost, so the MILP's factors (continuous columns over the joint menu of
the decisions a table reads) all grow by its menu and overlap in more ways; the LP relaxation of overlapping
factors is weak and branch-and-bound works harder (with SC: 7 factors, 11.9k columns, about 2-7x the solve
time of the family without it). Fixing the decision to each menu value folds the branches away, and the
constraints that then pin other decisions to one value (C6: SC ≠ 0 → KS = 1 and L = 1) fix those too: a
presolve by projection (every constraint over at most MAX_JOINT joint menu points is evaluated on its grid;
a decision whose feasible values there are one value is substituted; no feasible point: the branch is
dropped). Each branch is a smaller MILP over fewer decisions.

Same optimum: the branches partition the joint menu, so the least branch optimum is the optimum. Ties are
ordered as one solve orders them: cost, then each tie-break term, then the menu position of the whole
assignment (the C-order flat index of the joint grid, which a branch's own lexicographic stage agrees with,
its fixed decisions being constant). tests/test_milp_split.py checks it against exhaustive enumeration."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from formloop.errors import Infeasible
from formloop.expr import decisions_of, evaluate, grid_env, substitute
from formloop.solve.result import ModelSize, Solution, SolveStatus, tied
from formloop.template import Constraint, Formulation

MAX_JOINT = 4096  # joint menu points a presolve projection evaluates per constraint


class FixedTemplate:
    """The template seen by a branch: its decisions less the fixed ones; terms evaluated with them put back."""

    def __init__(self, template: Any, fixed: Mapping[str, Any]):
        self._template, self.fixed = template, dict(fixed)
        self.decisions = tuple(d for d in template.decisions if d.name not in self.fixed)
        self.descriptor = {k: v for k, v in template.descriptor.items() if k != "milp_split"}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._template, name)

    def evaluate_terms(self, assignment: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, float]:
        return self._template.evaluate_terms({**assignment, **self.fixed}, values)


def restrict(f: Formulation, fixed: Mapping[str, Any]) -> Formulation | None:
    """`f` with `fixed` decisions substituted, and every decision the constraints then pin to one value
    substituted too; None when a constraint leaves no feasible point."""
    values = dict(fixed)
    menus = {d.name: d for d in f.decisions}
    while True:
        cons = [Constraint(c.name, substitute(c.expr, values), c.group, c.doc) for c in f.constraints]
        pinned: dict[str, Any] = {}
        for c in cons:
            free = sorted(decisions_of(c.expr))
            if not free:
                if not bool(evaluate(c.expr, {})):
                    return None
                continue
            shape = tuple(len(menus[n].decision.menu) for n in free)
            if int(np.prod(shape)) > MAX_JOINT:
                continue
            ok = np.broadcast_to(np.asarray(evaluate(c.expr, grid_env([menus[n] for n in free], free)), bool), shape)
            if not ok.any():
                return None
            for axis, name in enumerate(free):
                allowed = np.flatnonzero(ok.any(axis=tuple(i for i in range(len(free)) if i != axis)))
                if allowed.size == 1:
                    pinned[name] = menus[name].decision.menu[int(allowed[0])]
        if not pinned:
            break
        values.update(pinned)
    cons = tuple(c for c in cons if decisions_of(c.expr))  # constant-true rows go (checked above)
    return Formulation(template=FixedTemplate(f.template, values), params=f.params, constraints=cons,
                       cost=substitute(f.cost, values), terms={k: substitute(v, values) for k, v in f.terms.items()})


def _position(f: Formulation, assignment: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(d.decision.menu.index(assignment[d.name]) for d in f.decisions)


def split_solve(f: Formulation, on: str, solve: Callable[[Formulation], Solution]) -> Solution:
    """The optimum of `f` as the best of `solve` on each branch `on` = v (v over its menu)."""
    menu = next(d.decision.menu for d in f.decisions if d.name == on)
    found: list[tuple[Solution, dict]] = []
    for v in menu:
        g = restrict(f, {on: v})
        if g is None:
            continue
        try:
            s = solve(g)
        except Infeasible:
            continue
        found.append((s, {**s.assignment, **g.template.fixed}))
    if not found:
        raise Infeasible(f.template.name, ["every branch of " + on + " is infeasible"])
    cost = {id(s): float(evaluate(f.cost, {**f.params, **a})) for s, a in found}
    best = min(cost.values())
    near = [(s, a) for s, a in found if tied(cost[id(s)], best)]
    for name, expr in f.tie_break_terms():
        vals = {id(s): float(evaluate(expr, {**f.params, **a})) for s, a in near}
        low = min(vals.values())
        near = [(s, a) for s, a in near if tied(vals[id(s)], low)]
    chosen, assignment = min(near, key=lambda sa: _position(f, sa[1]))
    statuses = {s.status for s, _ in found}
    return Solution(
        solver=chosen.solver,
        status=SolveStatus.OPTIMAL if statuses == {SolveStatus.OPTIMAL} else SolveStatus.TIME_LIMIT,
        assignment={d.name: assignment[d.name] for d in f.decisions}, objective=cost[id(chosen)], unit=f.unit,
        bound=min(s.bound for s, _ in found), gap=max(s.gap for s, _ in found),
        seconds=sum(s.seconds for s, _ in found),
        model=ModelSize(*(sum(getattr(s.model, k) for s, _ in found) for k in ("variables", "binaries", "rows"))),
        terms=f.template.evaluate_terms(assignment, f.params),
        reason="; ".join(s.reason for s, _ in found if s.reason),
    )
