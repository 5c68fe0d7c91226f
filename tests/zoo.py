"""Templates with known optima and known violations, shared by every back end's tests.

Each optimum below was worked out by hand (stated in the docstring), not produced by formloop."""
from __future__ import annotations

from dataclasses import dataclass, field

from formloop.expr import decision, maximum, param, where
from formloop.template import Constraint, Template


@dataclass(frozen=True)
class Known:
    template: Template
    workload: dict
    optimum: float | None          # None: infeasible
    designs: tuple[dict, ...] = ()  # every optimal design (all ties)
    conflict: tuple[str, ...] = field(default_factory=tuple)


def knapsack() -> Known:
    """max 3x+4y s.t. 2x+3y <= 7 over x,y in 0..3: (2,1) gives 10, unique (checked by hand)."""
    x, y = decision("x", range(4)), decision("y", range(4))
    cap = param("cap")
    t = Template("zoo-knapsack", "", (x, y), (cap,), (), (Constraint("weight", 2 * x + 3 * y <= cap),), (),
                 cost=-(3 * x + 4 * y), unit="value")
    return Known(t, {"cap": 7}, -10.0, ({"x": 2, "y": 1},))


def minimax() -> Known:
    """min max(x, 6 - x) over x in 0..6: x = 3 gives 3 (an epigraph in the MILP)."""
    x = decision("x", range(7))
    t = Template("zoo-minimax", "", (x,), (), (), (), (), cost=maximum(x, 6 - x))
    return Known(t, {}, 3.0, ({"x": 3},))


def ties() -> Known:
    """min (x-2)^2 + 0*y: x = 2 for each y in {1,2,3}; three tied optima."""
    x, y = decision("x", (1, 2, 3)), decision("y", (1, 2, 3))
    t = Template("zoo-ties", "", (x, y), (), (), (Constraint("y_positive", y >= 1),), (),
                 cost=(x - 2) * (x - 2) + 0 * y)
    return Known(t, {}, 0.0, tuple({"x": 2, "y": v} for v in (1, 2, 3)))


def conditional() -> Known:
    """min a + where(b == 0, 10, 0) with a*b >= 4, a in {1,2,4}, b in {0,1,2}:
    b=0 is infeasible (a*0 < 4); b=1 needs a=4 (cost 4); b=2 admits a=2 (cost 2). Optimum (2,2)."""
    a, b = decision("a", (1, 2, 4)), decision("b", (0, 1, 2))
    t = Template("zoo-conditional", "", (a, b), (), (), (Constraint("product", a * b >= 4),), (),
                 cost=a + where(b.eq(0), 10, 0))
    return Known(t, {}, 2.0, ({"a": 2, "b": 2},))


def infeasible() -> Known:
    """x in {1,2} with x >= n and x <= 1 for n = 3: no design; the conflict is the lower bound
    alone (x >= 3 fails on every menu value), so a minimal conflict names only it."""
    x = decision("x", (1, 2))
    n = param("n")
    t = Template("zoo-infeasible", "", (x,), (n,), (),
                 (Constraint("at_least_n", x >= n, "bounds"), Constraint("at_most_one", x <= 1, "bounds")), (),
                 cost=x)
    return Known(t, {"n": 3}, None, conflict=("bounds.at_least_n",))


ALL = (knapsack, minimax, ties, conditional, infeasible)
