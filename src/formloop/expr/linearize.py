"""Linearization of folded expressions into tables over decision menus.

A decision is one-hot over its menu, so any function of a few decisions is linear in the joint
indicator of their values: a *table* over their joint menu. `Linearizer.affine` writes an
expression as a constant plus a sum of such tables, splitting at + and − and at products with
constants, and tabulating every other (nonlinear) term over the decisions it reads. A `max` that
the objective minimizes becomes an epigraph variable. Boolean constraints become rows
(affine ≤ / = / ≥ 0) or, when not linear, a mask of allowed joint values.

Tables are keyed by their decision names in the formulation's order; their axes follow that key.
This module is solver-agnostic: `formloop.solve.highs` turns tables into columns and rows and maps
the solution back to decision names (its inverse map).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from formloop.errors import NotTabulable, StructureError
from formloop.expr.evaluate import evaluate, grid_env
from formloop.expr.nodes import Expr, Op, decisions_of

Key = tuple[str, ...]


@dataclass
class Affine:
    """const + Σ tables[key][joint index] + Σ aux[name]·(auxiliary continuous variable)."""

    const: float = 0.0
    tables: dict[Key, np.ndarray] = field(default_factory=dict)
    aux: dict[str, float] = field(default_factory=dict)

    @property
    def is_constant(self) -> bool:
        return not self.tables and not self.aux

    def scaled(self, c: float) -> "Affine":
        return Affine(self.const * c, {k: t * c for k, t in self.tables.items()},
                      {k: v * c for k, v in self.aux.items()})

    def plus(self, other: "Affine") -> "Affine":
        tables = dict(self.tables)
        for k, t in other.tables.items():
            tables[k] = tables[k] + t if k in tables else t
        aux = dict(self.aux)
        for k, v in other.aux.items():
            aux[k] = aux.get(k, 0.0) + v
        return Affine(self.const + other.const, tables, aux)


@dataclass(frozen=True)
class Row:
    """lower ≤ lhs ≤ upper, named after the template constraint it comes from."""

    name: str
    lhs: Affine
    lower: float
    upper: float


@dataclass(frozen=True)
class Mask:
    """Only the joint values of `key` where `allowed` is True are admitted."""

    name: str
    key: Key
    allowed: np.ndarray


@dataclass(frozen=True)
class Epigraph:
    """aux variable `name` ≥ every affine in `args` (the linear form of min over max)."""

    name: str
    args: tuple[Affine, ...]


class Linearizer:
    """Writes folded expressions (no parameters left) over `decisions` as tables."""

    def __init__(self, decisions: Sequence[Expr], max_table: int = 4096):
        self.decisions = {d.name: d for d in decisions}
        self.order = {d.name: i for i, d in enumerate(decisions)}
        self.max_table = max_table
        self.epigraphs: list[Epigraph] = []

    def key_of(self, node: Expr) -> Key:
        names = decisions_of(node)
        unknown = [n for n in names if n not in self.order]
        if unknown:
            raise StructureError(f"{node} reads undeclared decisions {unknown}")
        return tuple(sorted(names, key=self.order.__getitem__))

    def tabulate(self, node: Expr) -> Affine:
        key = self.key_of(node)
        size = int(np.prod([len(self.decisions[n].decision.menu) for n in key])) if key else 1
        if size > self.max_table:
            raise NotTabulable(node, key, size, self.max_table)
        env = grid_env([self.decisions[n] for n in key], key)
        shape = tuple(len(self.decisions[n].decision.menu) for n in key)
        values = np.broadcast_to(np.asarray(evaluate(node, env), dtype=np.float64), shape)
        if not key:
            return Affine(float(values))
        return Affine(0.0, {key: np.array(values)})

    def affine(self, node: Expr, *, sign: float = 1.0, objective: bool = False) -> Affine:
        """`node` as an Affine. With `objective`, a max under a non-negative sign becomes an epigraph."""
        op = node.op
        if op is Op.CONST:
            return Affine(float(node.payload))
        if op is Op.PARAM:
            raise StructureError(f"parameter {node.name} was not folded before linearization")
        if op is Op.ADD:
            return self.affine(node.args[0], sign=sign, objective=objective).plus(
                self.affine(node.args[1], sign=sign, objective=objective))
        if op is Op.SUB:
            return self.affine(node.args[0], sign=sign, objective=objective).plus(
                self.affine(node.args[1], sign=-sign, objective=objective).scaled(-1.0))
        if op is Op.NEG:
            return self.affine(node.args[0], sign=-sign, objective=objective).scaled(-1.0)
        if op in (Op.MUL, Op.DIV):
            a, b = node.args
            if op is Op.MUL and a.op is Op.CONST:
                c = float(a.payload)
                return self.affine(b, sign=sign * np.sign(c), objective=objective).scaled(c)
            if b.op is Op.CONST:
                c = float(b.payload) if op is Op.MUL else 1.0 / float(b.payload)
                return self.affine(a, sign=sign * np.sign(c), objective=objective).scaled(c)
        if op is Op.MAX and objective and sign >= 0 and self.key_of(node):
            args = tuple(self.affine(a, sign=1.0, objective=objective) for a in node.args)
            name = f"epi{len(self.epigraphs)}"
            self.epigraphs.append(Epigraph(name, args))
            return Affine(0.0, {}, {name: 1.0})
        return self.tabulate(node)

    def constraint(self, name: str, node: Expr) -> list[Row | Mask]:
        """Rows or masks equivalent to boolean `node` on the one-hot encoding."""
        if not node.is_boolean:
            raise StructureError(f"constraint {name} is not boolean: {node}")
        if node.op is Op.AND:
            return [part for arg in node.args for part in self.constraint(name, arg)]
        if node.op in (Op.LE, Op.GE, Op.EQ):
            diff = self.affine(node.args[0]).plus(self.affine(node.args[1]).scaled(-1.0))
            if not diff.is_constant:
                lo, hi = {Op.LE: (-np.inf, 0.0), Op.GE: (0.0, np.inf), Op.EQ: (0.0, 0.0)}[node.op]
                return [Row(name, Affine(0.0, diff.tables), lo - diff.const, hi - diff.const)]
        table = self.tabulate(node)
        if table.is_constant:
            return [Mask(name, (), np.array(bool(table.const)))]
        (key, values), = table.tables.items()
        return [Mask(name, key, values.astype(bool))]
