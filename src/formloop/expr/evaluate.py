"""Exact evaluation of expressions with numpy, vectorized by broadcasting, and constant folding.

Each decision can be bound to an array laid along its own axis, so one call evaluates a term over
the whole joint menu of the decisions it reads (the enumerator and the MILP's factor tables both
rely on this). `substitute` folds named leaves to constants with the same operator table."""
from __future__ import annotations

import weakref
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


# root -> its evaluation plan: per node in postorder (children first, the root last) a constant, a leaf's name,
# or an operator's function with its arguments' positions. Weak keys: a plan goes with its expression.
_PLANS: "weakref.WeakKeyDictionary[Expr, tuple]" = weakref.WeakKeyDictionary()
_CONST, _LEAF, _APPLY = 0, 1, 2


def _plan(root: Expr) -> tuple:
    plan = _PLANS.get(root)
    if plan is None:
        nodes = list(postorder(root))
        at = {id(n): i for i, n in enumerate(nodes)}
        steps = []
        for node in nodes:
            if node.op is Op.CONST:
                steps.append((_CONST, node.payload, None))
            elif node.op in (Op.VAR, Op.PARAM):
                steps.append((_LEAF, node.name, node.op))
            else:
                fn = _OPS.get(node.op)
                if fn is None:
                    raise UnsupportedOp(node.op, "numpy", node.op)
                steps.append((_APPLY, fn, tuple(at[id(a)] for a in node.args)))
        plan = _PLANS[root] = tuple(steps)
    return plan


def evaluate(root: Expr, env: Mapping[str, object]):
    """Value of `root` with every leaf name bound in `env` (scalars or broadcastable arrays)."""
    values: list = []
    push = values.append
    for kind, what, how in _plan(root):
        if kind == _APPLY:
            push(what(*[values[i] for i in how]))
        elif kind == _LEAF:
            try:
                push(env[what])
            except KeyError:
                kind = "decision" if how is Op.VAR else "parameter"
                bound = ", ".join(sorted(env)) or "none"
                raise StructureError(f"{kind} {what} has no value; bound: {bound}") from None
        else:
            push(what)
    return values[-1]


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
