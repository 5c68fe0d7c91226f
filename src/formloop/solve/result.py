"""Solver results as data: typed statuses, model sizes, solutions with bound, gap and ties."""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real


class SolveStatus(enum.Enum):
    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    TIME_LIMIT = "time_limit"      # a feasible incumbent may exist; gap says how far
    ERROR = "error"


@dataclass(frozen=True)
class ModelSize:
    variables: int
    binaries: int
    rows: int

    def as_dict(self) -> dict[str, int]:
        return {"variables": self.variables, "binaries": self.binaries, "rows": self.rows}


@dataclass(frozen=True)
class Solution:
    """A solved formulation. `objective` is the exact cost of `assignment` (re-evaluated, not the
    solver's float); `bound` is the solver's proven lower bound; `ties` are the assignments whose
    cost equals the optimum within `tie_tolerance` (relative), when the solver can list them."""

    solver: str
    status: SolveStatus
    assignment: Mapping[str, Real]
    objective: float
    unit: str
    bound: float
    gap: float
    seconds: float
    model: ModelSize
    terms: Mapping[str, float] = field(default_factory=dict)
    ties: tuple[Mapping[str, Real], ...] | None = None
    feasible_count: int | None = None
    reason: str = ""

    @property
    def tie_count(self) -> int | None:
        return None if self.ties is None else len(self.ties)


TIE_TOLERANCE = 1e-7
"""Relative tolerance under which two objective values are one optimum (both solvers use it)."""
TIE_FLOOR = 1e-12
"""Absolute floor of that tolerance, so that values at zero tie only with (near) zero."""


def tie_slack(value: float) -> float:
    """How far above `value` a cost may lie and still tie with it."""
    return TIE_TOLERANCE * abs(value) + TIE_FLOOR


def tied(a: float, b: float) -> bool:
    return abs(a - b) <= tie_slack(max(abs(a), abs(b)))
