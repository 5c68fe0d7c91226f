"""Random small expressions and templates for fuzz tests (seeded)."""
from __future__ import annotations

import random

from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, where
from formloop.template import Constraint, Template


def decisions(rng: random.Random, n: int):
    out = []
    for i in range(n):
        size = rng.randint(2, 4)
        menu = sorted(rng.sample(range(1, 9), size))
        out.append(decision(f"d{i}", menu))
    return out


def expression(rng: random.Random, leaves, depth: int = 3):
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(leaves) if rng.random() < 0.8 else rng.randint(1, 5)
    kind = rng.choice(["add", "sub", "mul", "ceildiv", "floordiv", "max", "min", "where", "scale"])
    a = expression(rng, leaves, depth - 1)
    b = expression(rng, leaves, depth - 1)
    if kind == "add":
        return a + b
    if kind == "sub":
        return a - b
    if kind == "mul":
        return a * b
    if kind == "scale":
        return rng.randint(1, 4) * a if not isinstance(a, int) else a * rng.choice(leaves)
    if kind == "ceildiv":
        return ceildiv(a, rng.randint(1, 4))
    if kind == "floordiv":
        return floordiv(a, rng.randint(1, 4))
    if kind == "max":
        return maximum(a, b)
    if kind == "min":
        return minimum(a, b)
    c = expression(rng, leaves, 1)
    return where(c <= rng.randint(1, 8), a, b)


def numeric(e):
    """Wrap plain ints so the result is an expression that reads at least one decision."""
    from formloop.expr import Expr, const

    return e if isinstance(e, Expr) else const(e)


def template(rng: random.Random, index: int) -> Template:
    ds = decisions(rng, rng.randint(2, 3))
    cost = numeric(expression(rng, ds)) + ds[0]
    constraints = []
    for j in range(rng.randint(0, 2)):
        lhs = numeric(expression(rng, ds, 2))
        constraints.append(Constraint(f"c{j}", lhs <= rng.randint(4, 40)))
    objective_max = maximum(cost, numeric(expression(rng, ds, 2)))
    return Template(f"random-{index}", "", tuple(ds), (), (), tuple(constraints), (),
                    cost=objective_max if rng.random() < 0.5 else cost)
