"""Exact evaluation of expressions with numpy, vectorized by broadcasting.

Each decision can be bound to an array laid along its own axis, so one call evaluates a term over
the whole joint menu of the decisions it reads (the enumerator and the MILP's factor tables both
rely on this)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from formloop.errors import StructureError, UnsupportedOp
from formloop.expr.nodes import Expr, postorder


def _ceildiv(a, b):
    return -((-np.asarray(a)) // b)


_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: np.true_divide(a, b),
    "floordiv": lambda a, b: np.floor_divide(a, b),
    "ceildiv": _ceildiv,
    "neg": lambda a: -a,
    "le": np.less_equal, "lt": np.less, "ge": np.greater_equal, "gt": np.greater,
    "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or, "not": np.logical_not,
    "implies": lambda a, b: np.logical_or(np.logical_not(a), b),
    "where": np.where,
}


def apply_op(op: str, values: Sequence):
    if op == "max":
        return _reduce(np.maximum, values)
    if op == "min":
        return _reduce(np.minimum, values)
    fn = _OPS.get(op)
    if fn is None:
        raise UnsupportedOp(op, "numpy", op)
    return fn(*values)


def _reduce(fn, values):
    out = values[0]
    for v in values[1:]:
        out = fn(out, v)
    return out


def evaluate(root: Expr, env: Mapping[str, object]):
    """Value of `root` with every leaf name bound in `env` (scalars or broadcastable arrays)."""
    memo: dict[int, object] = {}
    for node in postorder(root):
        if node.op == "const":
            value = node.payload
        elif node.op in ("var", "param"):
            try:
                value = env[node.name]
            except KeyError:
                kind = "decision" if node.op == "var" else "parameter"
                raise StructureError(f"{kind} {node.name} has no value; bound: {', '.join(sorted(env)) or 'none'}") from None
        else:
            value = apply_op(node.op, [memo[id(a)] for a in node.args])
        memo[id(node)] = value
    return memo[id(root)]


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
