"""Immutable, deduplicated expression nodes over decisions (finite menus) and parameters.

One node type serves every back end: `evaluate` (numpy), `linearize` (HiGHS MILP) and `to_z3`
walk the same trees. Structurally equal nodes are the same object (hash-consing), so a DAG walk
can memoize by identity and `a is b` is structural equality. `==` is deliberately not overloaded
(it would make nodes unusable as dict keys); use `a.eq(b)` to build an equality constraint.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Literal

from formloop.errors import InvalidInput, StructureError

Side = Literal["software", "chip"]
ParamKind = Literal["workload", "chip"]

ARITH = frozenset({"add", "sub", "mul", "div", "floordiv", "ceildiv", "min", "max", "neg"})
COMPARE = frozenset({"le", "lt", "ge", "gt", "eq", "ne"})
LOGIC = frozenset({"and", "or", "not", "implies"})
BOOLEAN = COMPARE | LOGIC


@dataclass(frozen=True)
class Decision:
    """A decision variable: one value chosen from a finite, ordered menu."""

    name: str
    menu: tuple[Real, ...]
    side: Side = "software"
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise StructureError(f"decision name {self.name!r} is not an identifier")
        if not self.menu:
            raise StructureError(f"decision {self.name} has an empty menu", fix="give at least one value")
        if len(set(self.menu)) != len(self.menu):
            raise StructureError(f"decision {self.name} has repeated menu values {self.menu}")
        if self.side not in ("software", "chip"):
            raise InvalidInput(f"side of decision {self.name}", self.side, ("software", "chip"))


@dataclass(frozen=True)
class Param:
    """A parameter: a workload or chip value, folded to a constant at instantiation and left
    symbolic for the verifier. `integer` and `lower` state its domain (the template's scope)."""

    name: str
    kind: ParamKind = "workload"
    integer: bool = True
    lower: Real | None = 1
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise StructureError(f"parameter name {self.name!r} is not an identifier")
        if self.kind not in ("workload", "chip"):
            raise InvalidInput(f"kind of parameter {self.name}", self.kind, ("workload", "chip"))


class Expr:
    """An expression node. Build with `decision`, `param`, `const` and operators."""

    __slots__ = ("op", "args", "payload", "__weakref__")
    _interned: dict[tuple, "Expr"] = {}

    op: str
    args: tuple["Expr", ...]
    payload: object

    def __new__(cls, op: str, args: tuple["Expr", ...] = (), payload: object = None) -> "Expr":
        key = (op, tuple(id(a) for a in args), _payload_key(payload))
        node = cls._interned.get(key)
        if node is None:
            node = object.__new__(cls)
            object.__setattr__(node, "op", op)
            object.__setattr__(node, "args", args)
            object.__setattr__(node, "payload", payload)
            cls._interned[key] = node
        return node

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("expression nodes are immutable")

    # arithmetic -------------------------------------------------------------------------------
    def __add__(self, o): return _node("add", self, o)
    def __radd__(self, o): return _node("add", o, self)
    def __sub__(self, o): return _node("sub", self, o)
    def __rsub__(self, o): return _node("sub", o, self)
    def __mul__(self, o): return _node("mul", self, o)
    def __rmul__(self, o): return _node("mul", o, self)
    def __truediv__(self, o): return _node("div", self, o)
    def __rtruediv__(self, o): return _node("div", o, self)
    def __floordiv__(self, o): return _node("floordiv", self, o)
    def __rfloordiv__(self, o): return _node("floordiv", o, self)
    def __neg__(self): return Expr("neg", (self,))

    # comparisons and logic ---------------------------------------------------------------------
    def __le__(self, o): return _node("le", self, o)
    def __lt__(self, o): return _node("lt", self, o)
    def __ge__(self, o): return _node("ge", self, o)
    def __gt__(self, o): return _node("gt", self, o)
    def eq(self, o) -> "Expr": return _node("eq", self, o)
    def ne(self, o) -> "Expr": return _node("ne", self, o)
    def __and__(self, o): return _node("and", self, o)
    def __or__(self, o): return _node("or", self, o)
    def __invert__(self): return Expr("not", (self,))

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value; evaluate it, or combine with & | ~")

    @property
    def is_boolean(self) -> bool:
        return self.op in BOOLEAN or (self.op == "const" and isinstance(self.payload, bool))

    @property
    def decision(self) -> Decision:
        if self.op != "var":
            raise TypeError(f"{self} is not a decision variable")
        return self.payload  # type: ignore[return-value]

    @property
    def name(self) -> str:
        if self.op not in ("var", "param"):
            raise TypeError(f"{self} has no name")
        return self.payload.name  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return render(self)

    __str__ = __repr__


def _payload_key(payload: object) -> object:
    # True == 1 in Python; keep booleans, ints and floats apart so const(True) is not const(1).
    if isinstance(payload, (bool, int, float)):
        return (type(payload).__name__, payload)
    return payload


def const(value: Real | bool) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return Expr("const", (), value)
    if not isinstance(value, Real) or (isinstance(value, float) and not math.isfinite(value)):
        raise InvalidInput("constant", value, "a finite int, float or bool")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return Expr("const", (), value if isinstance(value, (int, float)) else float(value))


def decision(name: str, menu, *, side: Side = "software", doc: str = "") -> Expr:
    """A decision variable leaf over `menu`."""
    return Expr("var", (), Decision(name, tuple(menu), side, doc))


def param(name: str, *, kind: ParamKind = "workload", integer: bool = True, lower: Real | None = 1,
          doc: str = "") -> Expr:
    """A parameter leaf (a workload or chip value)."""
    return Expr("param", (), Param(name, kind, integer, lower, doc))


def _node(op: str, a, b) -> Expr:
    return Expr(op, (const(a), const(b)))


def ceildiv(a, b) -> Expr:
    """⌈a / b⌉ for integers a and positive b."""
    return _node("ceildiv", a, b)


def floordiv(a, b) -> Expr:
    """⌊a / b⌋ for integers a and positive b."""
    return _node("floordiv", a, b)


def maximum(*xs) -> Expr:
    return _fold_variadic("max", xs)


def minimum(*xs) -> Expr:
    return _fold_variadic("min", xs)


def _fold_variadic(op: str, xs) -> Expr:
    if len(xs) < 1:
        raise StructureError(f"{op} needs at least one argument")
    return Expr(op, tuple(const(x) for x in xs)) if len(xs) > 1 else const(xs[0])


def where(cond, a, b) -> Expr:
    """`a` where `cond` holds, else `b`."""
    cond = const(cond)
    if not cond.is_boolean:
        raise StructureError(f"where() needs a boolean condition, got {cond}")
    return Expr("where", (cond, const(a), const(b)))


def implies(a, b) -> Expr:
    return _node("implies", a, b)


def all_of(*cs) -> Expr:
    out = const(True)
    for c in cs:
        out = c if out is const(True) else out & c
    return out


# walking ----------------------------------------------------------------------------------------

def postorder(root: Expr):
    """Yield each distinct node once, children before parents."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded or not node.args:
            seen.add(id(node))
            yield node
        else:
            stack.append((node, True))
            stack.extend((a, False) for a in reversed(node.args))


def leaves(root: Expr, op: str) -> dict[str, Expr]:
    """Leaves of one kind ('var' or 'param') by name; two different leaves with one name is an error."""
    found: dict[str, Expr] = {}
    for node in postorder(root):
        if node.op == op:
            prior = found.setdefault(node.name, node)
            if prior is not node:
                raise StructureError(f"two different {op} leaves are both named {node.name}: {prior.payload} and {node.payload}")
    return found


def decisions_of(root: Expr) -> dict[str, Expr]:
    return leaves(root, "var")


def params_of(root: Expr) -> dict[str, Expr]:
    return leaves(root, "param")


def substitute(root: Expr, values: dict[str, Real]) -> Expr:
    """Replace parameters and decisions named in `values` by constants and fold constant subtrees."""
    from formloop.expr.evaluate import apply_op  # local: evaluate imports this module

    out: dict[int, Expr] = {}
    for node in postorder(root):
        if node.op in ("var", "param"):
            new = const(values[node.name]) if node.name in values else node
        elif node.op == "const":
            new = node
        else:
            args = tuple(out[id(a)] for a in node.args)
            if all(a.op == "const" for a in args):
                new = const(_to_python(apply_op(node.op, [a.payload for a in args])))
            else:
                new = Expr(node.op, args, node.payload)
        out[id(node)] = new
    return out[id(root)]


def _to_python(v):
    import numpy as np

    if isinstance(v, (np.generic, np.ndarray)):  # numpy may return a 0-d array (e.g. np.where)
        v = np.asarray(v).item()
    return v


# rendering --------------------------------------------------------------------------------------

_INFIX = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "div": ("/", 2), "floordiv": ("//", 2),
          "le": ("<=", 0), "lt": ("<", 0), "ge": (">=", 0), "gt": (">", 0), "eq": ("==", 0), "ne": ("!=", 0),
          "and": ("&", -1), "or": ("|", -2), "implies": ("=>", -3)}


def render(node: Expr) -> str:
    """Canonical infix text; content hashes are taken over it."""
    return _render(node, -10)


def _render(node: Expr, outer: int) -> str:
    if node.op == "const":
        return repr(node.payload)
    if node.op in ("var", "param"):
        return node.payload.name  # type: ignore[union-attr]
    if node.op == "neg":
        return f"-{_render(node.args[0], 3)}"
    if node.op == "not":
        return f"~{_render(node.args[0], 3)}"
    if node.op in _INFIX:
        sym, prec = _INFIX[node.op]
        left = _render(node.args[0], prec)
        right = _render(node.args[1], prec + (0 if node.op in ("add", "mul", "and", "or") else 1))
        text = f"{left} {sym} {right}"
        top_level = outer == -10
        return text if top_level or prec > outer else f"({text})"
    return f"{node.op}({', '.join(_render(a, -10) for a in node.args)})"
