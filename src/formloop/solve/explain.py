"""Infeasibility explained in the template's own constraint names (a deletion filter)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from formloop.template import Constraint


def irreducible_conflict(constraints: Sequence[Constraint],
                         feasible: Callable[[Sequence[Constraint]], bool]) -> list[str]:
    """Names of a minimal subset of `constraints` that admits no design.

    Drops each constraint in turn and keeps it out whenever the rest stay infeasible; what is left
    is irreducible: removing any one of its members makes the problem feasible."""
    kept = list(constraints)
    for c in list(constraints):
        trial = [k for k in kept if k is not c]
        if not feasible(trial):
            kept = trial
    return [f"{c.group}.{c.name}" for c in kept] or ["the decision menus alone"]
