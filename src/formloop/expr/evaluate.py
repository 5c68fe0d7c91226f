"""Exact evaluation of expressions with numpy, vectorized by broadcasting, and constant folding.

Each decision can be bound to an array laid along its own axis, so one call evaluates a term over
the whole joint menu of the decisions it reads (the enumerator and the MILP's factor tables both
rely on this). `substitute` folds named leaves to constants with the same operator table."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Real

import numpy as np

from formloop.errors import StructureError, UnsupportedOp
from formloop.expr.nodes import Expr, Op, const, postorder


def _ceildiv(a, b):
    return -((-np.asarray(a)) // b)


def _reduce(fn):
    def apply(*values):
        out = values[0]
        for v in values[1:]:
            out = fn(out, v)
        return out
    return apply


_OPS = {
    Op.ADD: lambda a, b: a + b,
    Op.SUB: lambda a, b: a - b,
    Op.MUL: lambda a, b: a * b,
    Op.DIV: lambda a, b: np.true_divide(a, b),
    Op.FLOORDIV: lambda a, b: np.floor_divide(a, b),
    Op.CEILDIV: _ceildiv,
    Op.MOD: lambda a, b: np.mod(a, b),
    Op.NEG: lambda a: -a,
    Op.LE: np.less_equal, Op.LT: np.less, Op.GE: np.greater_equal, Op.GT: np.greater,
    Op.EQ: np.equal, Op.NE: np.not_equal,
    Op.AND: np.logical_and, Op.OR: np.logical_or, Op.NOT: np.logical_not,
    Op.IMPLIES: lambda a, b: np.logical_or(np.logical_not(a), b),
    Op.WHERE: np.where,
    Op.MAX: _reduce(np.maximum),
    Op.MIN: _reduce(np.minimum),
}


def apply_op(op: Op, values: Sequence):
    fn = _OPS.get(op)
    if fn is None:
        raise UnsupportedOp(op, "numpy", op)
    return fn(*values)


def evaluate(root: Expr, env: Mapping[str, object]):
    """Value of `root` with every leaf name bound in `env` (scalars or broadcastable arrays)."""
    memo: dict[int, object] = {}
    for node in postorder(root):
        if node.op is Op.CONST:
            value = node.payload
        elif node.op in (Op.VAR, Op.PARAM):
            try:
                value = env[node.name]
            except KeyError:
                kind = "decision" if node.op is Op.VAR else "parameter"
                bound = ", ".join(sorted(env)) or "none"
                raise StructureError(f"{kind} {node.name} has no value; bound: {bound}") from None
        else:
            value = apply_op(node.op, [memo[id(a)] for a in node.args])
        memo[id(node)] = value
    return memo[id(root)]


def substitute(root: Expr, values: Mapping[str, Real]) -> Expr:
    """Replace parameters and decisions named in `values` by constants and fold constant subtrees."""
    out: dict[int, Expr] = {}
    for node in postorder(root):
        if node.op in (Op.VAR, Op.PARAM):
            new = const(values[node.name]) if node.name in values else node
        elif node.op is Op.CONST:
            new = node
        else:
            args = tuple(out[id(a)] for a in node.args)
            if all(a.op is Op.CONST for a in args):
                new = const(_to_python(apply_op(node.op, [a.payload for a in args])))
            else:
                new = Expr(node.op, args, node.payload)
        out[id(node)] = new
    return out[id(root)]


def _to_python(v):
    if isinstance(v, (np.generic, np.ndarray)):  # numpy may return a 0-d array (e.g. np.where)
        v = np.asarray(v).item()
    return v


def grid_env(decisions: Sequence[Expr], axes: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Bind each decision to its menu laid along its own axis of a joint grid.

    `axes` orders the grid (default: the given order). Integer menus stay int64 so that
    ceil/floor division is exact."""
    names = list(axes) if axes is not None else [d.name for d in decisions]
    by_name = {d.name: d for d in decisions}
    env: dict[str, np.ndarray] = {}
    for axis, name in enumerate(names):
        menu = by_name[name].decision.menu
        arr = np.asarray(menu, dtype=np.int64 if all(isinstance(v, (int, np.integer)) for v in menu) else np.float64)
        shape = [1] * len(names)
        shape[axis] = len(menu)
        env[name] = arr.reshape(shape)
    return env
