"""Lowering of expressions to Z3 terms, parameters left symbolic.

Decisions become Int (or Real) constants restricted to their menu, parameters become constants
restricted to their declared domain; `domain_constraints` states both. Integer division and
remainder follow Z3's semantics, which equal floor division and Python's % for the positive
divisors templates use (a divisor's positivity is part of the template's scope)."""
from __future__ import annotations

from collections.abc import Mapping

import z3

from formloop.errors import UnsupportedOp
from formloop.expr.nodes import Expr, Op, decisions_of, params_of, postorder


def _is_int_leaf(node: Expr) -> bool:
    if node.op is Op.VAR:
        return all(isinstance(v, int) for v in node.decision.menu)
    return bool(node.payload.integer)  # type: ignore[union-attr]


def symbols(*roots: Expr) -> dict[str, z3.ExprRef]:
    """One Z3 constant per decision and parameter name read by `roots`."""
    out: dict[str, z3.ExprRef] = {}
    for root in roots:
        for name, leaf in {**decisions_of(root), **params_of(root)}.items():
            out.setdefault(name, z3.Int(name) if _is_int_leaf(leaf) else z3.Real(name))
    return out


def domain_constraints(roots: tuple[Expr, ...], env: Mapping[str, z3.ExprRef]) -> list[z3.BoolRef]:
    """Menu membership of each decision and the declared lower bound of each parameter."""
    facts: list[z3.BoolRef] = []
    for root in roots:
        for name, leaf in decisions_of(root).items():
            facts.append(z3.Or([env[name] == v for v in leaf.decision.menu]))
        for name, leaf in params_of(root).items():
            if leaf.payload.lower is not None:  # type: ignore[union-attr]
                facts.append(env[name] >= leaf.payload.lower)  # type: ignore[union-attr]
    return _dedupe(facts)


def _dedupe(facts: list[z3.BoolRef]) -> list[z3.BoolRef]:
    seen, out = set(), []
    for f in facts:
        key = f.sexpr()
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _ceil(a, b):
    return -((-a) / b)


_BINARY = {
    Op.ADD: lambda a, b: a + b,
    Op.SUB: lambda a, b: a - b,
    Op.MUL: lambda a, b: a * b,
    Op.FLOORDIV: lambda a, b: a / b,
    Op.CEILDIV: _ceil,
    Op.MOD: lambda a, b: a % b,
    Op.LE: lambda a, b: a <= b, Op.LT: lambda a, b: a < b, Op.GE: lambda a, b: a >= b,
    Op.GT: lambda a, b: a > b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b,
    Op.IMPLIES: z3.Implies,
}
_INTEGER_ONLY = (Op.FLOORDIV, Op.CEILDIV, Op.MOD)


def to_z3(root: Expr, env: Mapping[str, z3.ExprRef]) -> z3.ExprRef:
    """The Z3 term of `root`; every leaf name must be bound in `env` (symbols or Python numbers)."""
    memo: dict[int, object] = {}
    for node in postorder(root):
        op = node.op
        if op is Op.CONST:
            v = node.payload
            value = z3.BoolVal(v) if isinstance(v, bool) else (z3.IntVal(v) if isinstance(v, int) else z3.RealVal(v))
        elif op in (Op.VAR, Op.PARAM):
            value = env[node.name]
        else:
            args = [memo[id(a)] for a in node.args]
            if op in _BINARY:
                if op in _INTEGER_ONLY and not all(z3.is_int(a) for a in args):
                    raise UnsupportedOp(op, "z3", node, fix="integer division needs integer operands")
                value = _BINARY[op](*args)
            elif op is Op.DIV:
                ints = all(z3.is_int(a) for a in args)
                value = z3.ToReal(args[0]) / z3.ToReal(args[1]) if ints else args[0] / args[1]
            elif op is Op.NEG:
                value = -args[0]
            elif op is Op.NOT:
                value = z3.Not(args[0])
            elif op is Op.AND:
                value = z3.And(*args)
            elif op is Op.OR:
                value = z3.Or(*args)
            elif op is Op.WHERE:
                value = z3.If(*args)
            elif op in (Op.MAX, Op.MIN):
                value = args[0]
                for a in args[1:]:
                    value = z3.If(a > value, a, value) if op is Op.MAX else z3.If(a < value, a, value)
            else:
                raise UnsupportedOp(op, "z3", node)
        memo[id(node)] = value
    return memo[id(root)]  # type: ignore[return-value]
