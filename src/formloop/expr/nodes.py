"""Immutable, deduplicated expression nodes over decisions (finite menus) and parameters.

One node type serves every back end: `evaluate` (numpy), `linearize` (HiGHS MILP) and `to_z3`
walk the same trees. Structurally equal nodes are the same object (hash-consing), so a DAG walk
can memoize by identity and `a is b` is structural equality. `==` is deliberately not overloaded
(it would make nodes unusable as dict keys); use `a.eq(b)` to build an equality constraint.

The intern table holds its nodes weakly: a node lives as long as someone (a template, a parent
node, a walk) refers to it, so building many short-lived claims does not grow memory. Operators
are `Op` members; `Op` is a string enum whose values are the canonical names, so rendered text
(and with it every content hash) is the same as when operators were plain strings.
"""
from __future__ import annotations

import enum
import math
import weakref
from dataclasses import dataclass
from numbers import Real
from typing import Literal

from formloop.errors import InvalidInput, StructureError

Side = Literal["software", "chip"]
ParamKind = Literal["workload", "chip"]


class Op(enum.StrEnum):
    """Every operator an expression node can carry (leaves: const, var, param)."""

    CONST = "const"
    VAR = "var"
    PARAM = "param"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    FLOORDIV = "floordiv"
    CEILDIV = "ceildiv"
    MOD = "mod"
    MIN = "min"
    MAX = "max"
    NEG = "neg"
    LE = "le"
    LT = "lt"
    GE = "ge"
    GT = "gt"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    NOT = "not"
    IMPLIES = "implies"
    WHERE = "where"


LEAVES = frozenset({Op.CONST, Op.VAR, Op.PARAM})
ARITH = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.CEILDIV, Op.MOD, Op.MIN, Op.MAX, Op.NEG})
COMPARE = frozenset({Op.LE, Op.LT, Op.GE, Op.GT, Op.EQ, Op.NE})
LOGIC = frozenset({Op.AND, Op.OR, Op.NOT, Op.IMPLIES})
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
    # Weak values: an entry disappears with its node. Keys name children by id, which is safe
    # because a live node holds its children, so an id in a live key is never reused.
    _interned: "weakref.WeakValueDictionary[tuple, Expr]" = weakref.WeakValueDictionary()

    op: Op
    args: tuple["Expr", ...]
    payload: object

    def __new__(cls, op: Op | str, args: tuple["Expr", ...] = (), payload: object = None) -> "Expr":
        try:
            op = Op(op)
        except ValueError:
            raise InvalidInput("expression operator", op, [o.value for o in Op]) from None
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
    def __add__(self, o): return _node(Op.ADD, self, o)
    def __radd__(self, o): return _node(Op.ADD, o, self)
    def __sub__(self, o): return _node(Op.SUB, self, o)
    def __rsub__(self, o): return _node(Op.SUB, o, self)
    def __mul__(self, o): return _node(Op.MUL, self, o)
    def __rmul__(self, o): return _node(Op.MUL, o, self)
    def __truediv__(self, o): return _node(Op.DIV, self, o)
    def __rtruediv__(self, o): return _node(Op.DIV, o, self)
    def __floordiv__(self, o): return _node(Op.FLOORDIV, self, o)
    def __rfloordiv__(self, o): return _node(Op.FLOORDIV, o, self)
    def __mod__(self, o): return _node(Op.MOD, self, o)
    def __rmod__(self, o): return _node(Op.MOD, o, self)
    def __neg__(self): return Expr(Op.NEG, (self,))

    # comparisons and logic ---------------------------------------------------------------------
    def __le__(self, o): return _node(Op.LE, self, o)
    def __lt__(self, o): return _node(Op.LT, self, o)
    def __ge__(self, o): return _node(Op.GE, self, o)
    def __gt__(self, o): return _node(Op.GT, self, o)
    def eq(self, o) -> "Expr": return _node(Op.EQ, self, o)
    def ne(self, o) -> "Expr": return _node(Op.NE, self, o)
    def __and__(self, o): return _node(Op.AND, self, o)
    def __or__(self, o): return _node(Op.OR, self, o)
    def __invert__(self): return Expr(Op.NOT, (self,))

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value; evaluate it, or combine with & | ~")

    @property
    def is_boolean(self) -> bool:
        if self.op is Op.WHERE:
            return self.args[1].is_boolean and self.args[2].is_boolean
        return self.op in BOOLEAN or (self.op is Op.CONST and isinstance(self.payload, bool))

    @property
    def decision(self) -> Decision:
        if self.op is not Op.VAR:
            raise TypeError(f"{self} is not a decision variable")
        return self.payload  # type: ignore[return-value]

    @property
    def name(self) -> str:
        if self.op not in (Op.VAR, Op.PARAM):
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
        return Expr(Op.CONST, (), value)
    if not isinstance(value, Real) or (isinstance(value, float) and not math.isfinite(value)):
        raise InvalidInput("constant", value, "a finite int, float or bool")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return Expr(Op.CONST, (), value if isinstance(value, (int, float)) else float(value))


def decision(name: str, menu, *, side: Side = "software", doc: str = "") -> Expr:
    """A decision variable leaf over `menu`."""
    return Expr(Op.VAR, (), Decision(name, tuple(menu), side, doc))


def param(name: str, *, kind: ParamKind = "workload", integer: bool = True, lower: Real | None = 1,
          doc: str = "") -> Expr:
    """A parameter leaf (a workload or chip value)."""
    return Expr(Op.PARAM, (), Param(name, kind, integer, lower, doc))


def _node(op: Op, a, b) -> Expr:
    return Expr(op, (const(a), const(b)))


def ceildiv(a, b) -> Expr:
    """⌈a / b⌉ for integers a and positive b."""
    return _node(Op.CEILDIV, a, b)


def floordiv(a, b) -> Expr:
    """⌊a / b⌋ for integers a and positive b."""
    return _node(Op.FLOORDIV, a, b)


def mod(a, b) -> Expr:
    """a − b·⌊a / b⌋ for integers a and positive b (Python's %, never negative)."""
    return _node(Op.MOD, a, b)


def maximum(*xs) -> Expr:
    return _fold_variadic(Op.MAX, xs)


def minimum(*xs) -> Expr:
    return _fold_variadic(Op.MIN, xs)


def _fold_variadic(op: Op, xs) -> Expr:
    if len(xs) < 1:
        raise StructureError(f"{op.value} needs at least one argument")
    return Expr(op, tuple(const(x) for x in xs)) if len(xs) > 1 else const(xs[0])


def where(cond, a, b) -> Expr:
    """`a` where `cond` holds, else `b`."""
    cond = const(cond)
    if not cond.is_boolean:
        raise StructureError(f"where() needs a boolean condition, got {cond}")
    return Expr(Op.WHERE, (cond, const(a), const(b)))


def implies(a, b) -> Expr:
    return _node(Op.IMPLIES, a, b)


def all_of(*cs) -> Expr:
    """The conjunction of `cs` (True when empty), folded left."""
    out = const(True)
    for c in cs:
        out = const(c) if out is const(True) else out & c
    return out


def any_of(*cs) -> Expr:
    """The disjunction of `cs` (False when empty), folded left."""
    out = const(False)
    for c in cs:
        out = const(c) if out is const(False) else out | c
    return out


def total(*xs) -> Expr:
    """The sum of `xs` (0 when empty), folded left."""
    out = const(0)
    for x in xs:
        out = const(x) if out is const(0) else out + x
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


def leaves(root: Expr, op: Op | str) -> dict[str, Expr]:
    """Leaves of one kind ('var' or 'param') by name; two different leaves with one name is an error."""
    op = Op(op)
    found: dict[str, Expr] = {}
    for node in postorder(root):
        if node.op is op:
            prior = found.setdefault(node.name, node)
            if prior is not node:
                raise StructureError(f"two different {op.value} leaves are both named {node.name}: "
                                     f"{prior.payload} and {node.payload}")
    return found


def decisions_of(root: Expr) -> dict[str, Expr]:
    return leaves(root, Op.VAR)


def params_of(root: Expr) -> dict[str, Expr]:
    return leaves(root, Op.PARAM)


# rendering --------------------------------------------------------------------------------------

_INFIX = {Op.ADD: ("+", 1), Op.SUB: ("-", 1), Op.MUL: ("*", 2), Op.DIV: ("/", 2), Op.FLOORDIV: ("//", 2),
          Op.MOD: ("%", 2), Op.LE: ("<=", 0), Op.LT: ("<", 0), Op.GE: (">=", 0), Op.GT: (">", 0),
          Op.EQ: ("==", 0), Op.NE: ("!=", 0), Op.AND: ("&", -1), Op.OR: ("|", -2), Op.IMPLIES: ("=>", -3)}
_ASSOCIATIVE = frozenset({Op.ADD, Op.MUL, Op.AND, Op.OR})


def render(node: Expr) -> str:
    """Canonical infix text; content hashes are taken over it."""
    return _render(node, -10)


def _render(node: Expr, outer: int) -> str:
    if node.op is Op.CONST:
        return repr(node.payload)
    if node.op in (Op.VAR, Op.PARAM):
        return node.payload.name  # type: ignore[union-attr]
    if node.op is Op.NEG:
        return f"-{_render(node.args[0], 3)}"
    if node.op is Op.NOT:
        return f"~{_render(node.args[0], 3)}"
    if node.op in _INFIX:
        sym, prec = _INFIX[node.op]
        left = _render(node.args[0], prec)
        right = _render(node.args[1], prec + (0 if node.op in _ASSOCIATIVE else 1))
        text = f"{left} {sym} {right}"
        top_level = outer == -10
        return text if top_level or prec > outer else f"({text})"
    return f"{node.op.value}({', '.join(_render(a, -10) for a in node.args)})"
