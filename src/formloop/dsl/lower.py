"""From syntax tree to IR: every field value read into its type, one diagnostic per bad value
(line, column, field, value, allowed). Rules between fields are formloop.dsl.validate's."""
from __future__ import annotations

from dataclasses import dataclass

from lark import Token, Tree

from formloop.dsl.diagnostics import Collector
from formloop.dsl.grammar import parse_tree
from formloop.dsl.ir import (
    ALIGNS, ARCH_CHIPS, ARCHS, CONV_LAYOUTS, DECISION_OF, FIELDS, LOAD_PATHS, MENUS, OPERATIONS, SHAPE_DIMS,
    TILE_DECISIONS, KernelIR, Operand, SpecIR, Stage, shape_of,
)
from formloop.errors import InvalidInput
from formloop.library.gemm_epilogue_emit import LAYOUTS, OPERAND_DTYPES, OUT_DTYPES
from formloop.library.gemm_epilogue_ops import make_op


@dataclass(frozen=True)
class Value:
    kind: str            # open | dims | number | words
    payload: object      # None | tuple[int | None, ...] | int | float | tuple[str, ...]
    raw: str
    pos: tuple[int, int]


def _pos(node) -> tuple[int, int]:
    if isinstance(node, Token):
        return node.line, node.column
    return (node.meta.line, node.meta.column) if not node.meta.empty else (1, 1)


def _value(tree: Tree) -> Value:
    tok = tree.children[0]
    pos, raw = _pos(tok), " ".join(str(t) for t in tree.children)
    if tree.data == "open":
        return Value("open", None, "?", pos)
    if tree.data == "dims":
        parts = [p.strip() for p in str(tok).replace("\u00d7", "x").split("x")]
        return Value("dims", tuple(None if p == "?" else int(p) for p in parts), raw, pos)
    if tree.data == "number":
        text = str(tok)
        is_int = text.lstrip("+-").isdigit()
        return Value("number", int(text) if is_int else float(text), raw, pos)
    return Value("words", tuple(str(t) for t in tree.children), raw, pos)


def _scalar(v: Value):
    """A value as an epilogue or stage argument: a number, a single word, or the raw text."""
    if v.kind == "number":
        return v.payload
    if v.kind == "words" and len(v.payload) == 1:
        return v.payload[0]
    return v.raw


def read_spec(text: str, source: str = "<spec>") -> SpecIR:
    """Parse and type a spec; raise SpecError with every diagnostic found."""
    tree = parse_tree(text, source)
    diag = Collector(source)
    kernels, pipelines = {}, []
    for st in tree.children:
        node = st.children[0]
        if node.data == "kernel":
            name = str(node.children[0])
            if name in kernels:
                diag.add(_pos(node.children[0]), "kernel name", name, "a name not used by another kernel")
            kernels[name] = node
        else:
            pipelines.append(node)
    if not kernels:
        diag.add((1, 1), "kernel", "none", "one `kernel NAME = OP { ... }` statement")
        diag.raise_if_any()
    main, pre, post = _entry(kernels, pipelines, diag)
    kernel = _kernel(main, diag)
    diag.raise_if_any()
    return SpecIR(source, kernel, pre, post)


def _entry(kernels: dict, pipelines: list, diag: Collector):
    if len(pipelines) > 1:
        diag.add(_pos(pipelines[1]), "pipeline", str(pipelines[1].children[0]), "one pipeline per spec")
    if not pipelines:
        if len(kernels) > 1:
            extra = list(kernels)[1]
            diag.add(_pos(kernels[extra]), "kernel", extra, "one kernel, or a pipeline naming the main one")
        return next(iter(kernels.values())), (), ()
    calls = pipelines[0].children[1:]
    main_at = [i for i, c in enumerate(calls) if str(c.children[0]) in kernels and len(c.children) == 1]
    if len(main_at) != 1:
        diag.add(_pos(pipelines[0]), "pipeline", f"{len(main_at)} kernel stages", f"exactly one of {sorted(kernels)}")
        return next(iter(kernels.values())), (), ()
    i = main_at[0]
    pre = tuple(s for s in (_stage(c, "pre", diag) for c in calls[:i]) if s)
    post = tuple(s for s in (_stage(c, "post", diag) for c in calls[i + 1:]) if s)
    return kernels[str(calls[i].children[0])], pre, post


def _stage(call: Tree, side: str, diag: Collector) -> Stage | None:
    kind, pos = str(call.children[0]), _pos(call.children[0])
    if kind not in ("transpose", "cast"):
        diag.add(pos, "pipeline stage", kind, "transpose, cast, or the main kernel's name")
        return None
    args = [_scalar(_value(a.children[-1])) for a in call.children[1:]]
    targets = ("a", "b") if side == "pre" else ("c",)
    if not args or args[0] not in targets:
        diag.add(pos, f"{kind} tensor", args[0] if args else None, targets,
                 "stages before the kernel convert a or b; stages after it convert c")
        return None
    need = 2 if kind == "cast" else 1
    if len(args) not in (need, 2):
        diag.add(pos, f"{kind} arguments", len(args), f"{need}{' or 2' if need == 1 else ''} (tensor[, dtype])")
        return None
    dtype = args[1] if len(args) == 2 else None
    allowed = OPERAND_DTYPES if side == "pre" else OUT_DTYPES
    if dtype is not None and dtype not in allowed:
        diag.add(pos, f"{kind} dtype", dtype, allowed)
        return None
    return Stage(kind, args[0], dtype, pos)


def _kernel(node: Tree, diag: Collector) -> KernelIR:
    name_tok, op_tok, block = node.children[0], node.children[1], node.children[2]
    op = str(op_tok)
    if op not in OPERATIONS:
        diag.add(_pos(op_tok), "operation", op, OPERATIONS)
        op = "gemm"
    values: dict[str, Value] = {}
    for item in block.children:
        key, val = str(item.children[0]), _value(item.children[1])
        if key not in FIELDS or op not in FIELDS[key].ops:
            diag.add(_pos(item.children[0]), "field", key, [f for f, s in FIELDS.items() if op in s.ops])
        elif key in values:
            diag.add(_pos(item.children[0]), key, val.raw, "one value per field (it was given twice)")
        else:
            values[key] = val
    for f in FIELDS.values():
        if f.required and f.name not in values:
            diag.add(_pos(name_tok), f.name, "missing", f.allowed, "a required field")
    reader = _Reader(op, values, diag)
    where = {k: v.pos for k, v in values.items()} | {"kernel": _pos(name_tok), "operation": _pos(op_tok)}
    chain, chain_where = _chain(node.children[3] if len(node.children) > 3 else None, diag)
    geometry = reader.geometry()
    return KernelIR(name=str(name_tok), op=op, a=reader.operand("a", OPERAND_DTYPES),
                    b=reader.operand("b", OPERAND_DTYPES), c=reader.operand("c", OUT_DTYPES),
                    acc=reader.word("acc", ("fp32",), "fp32"), arch=reader.word("arch", ARCHS, "sm90"),
                    chip=reader.chip(), pins=reader.pins(), align=reader.number("align", ALIGNS),
                    shape=reader.shape(geometry), chain=chain, geometry=geometry, where=where,
                    chain_where=chain_where)


def _chain(node: Tree | None, diag: Collector):
    if node is None:
        return (), ()
    ops, where = [], []
    for call in (c for c in node.children if isinstance(c, Tree)):
        kind, pos = str(call.children[0]), _pos(call.children[0])
        positional = [_scalar(_value(a.children[0])) for a in call.children[1:] if a.data == "positional"]
        keyword = {str(a.children[0]): _scalar(_value(a.children[1])) for a in call.children[1:] if a.data == "keyword"}
        try:
            ops.append(make_op(kind, positional, keyword))
            where.append(pos)
        except InvalidInput as exc:
            diag.add(pos, f"epilogue[{len(where) + 1}] {exc.field}", exc.value, exc.allowed, exc.fix or "")
    return tuple(ops), tuple(where)


class _Reader:
    """Typed reads of the block's values; a bad value adds a diagnostic and reads as its default."""

    def __init__(self, op: str, values: dict[str, Value], diag: Collector):
        self.op, self.values, self.diag = op, values, diag

    def _bad(self, name: str, v: Value, allowed, message: str = "", field: str | None = None) -> None:
        self.diag.add(v.pos, field or name, v.raw, allowed, message)

    def word(self, name: str, allowed, default):
        v = self.values.get(name)
        if v is None:
            return default
        if v.kind != "words" or len(v.payload) != 1 or v.payload[0] not in allowed:
            self._bad(name, v, allowed)
            return default
        return v.payload[0]

    def operand(self, name: str, dtypes) -> Operand:
        v = self.values.get(name)
        if v is None:
            return Operand(dtypes[0])
        words = v.payload if v.kind == "words" else ()
        if not 1 <= len(words) <= 2 or words[0] not in dtypes:
            self._bad(name, v, f"{'|'.join(dtypes)} [layout]", field=f"{name} dtype")
            return Operand(dtypes[0])
        layout = words[1] if len(words) == 2 else "row"
        if self.op == "conv2d":
            if layout not in ("row", CONV_LAYOUTS[name]):
                self._bad(name, v, CONV_LAYOUTS[name], "conv2d fixes its layouts", field=f"{name} layout")
            layout = {"a": "row", "b": "col", "c": "row"}[name]
        elif layout not in LAYOUTS:
            self._bad(name, v, LAYOUTS, field=f"{name} layout")
            layout = "row"
        return Operand(words[0], layout)

    def chip(self) -> str:
        arch = self.word("arch", ARCHS, "sm90")
        return self.word("chip", tuple(c for cs in ARCH_CHIPS.values() for c in cs), ARCH_CHIPS[arch][0])

    def number(self, name: str, menu, decision: str | None = None):
        v = self.values.get(name)
        if v is None or v.kind == "open":
            return None
        if v.kind != "number" or v.payload not in menu:
            self._bad(name, v, [*menu, "?"], field=f"{name}" + (f" ({decision})" if decision else ""))
            return None
        return int(v.payload)

    def pins(self) -> dict[str, int]:
        out = {}
        for name, dec in DECISION_OF.items():
            if name == "load":
                v = self.values.get("load")
                if v is not None and v.kind != "open":
                    word = v.payload[0] if v.kind == "words" and len(v.payload) == 1 else None
                    if word in LOAD_PATHS:
                        out["L"] = LOAD_PATHS[word]
                    else:
                        self._bad("load", v, [*LOAD_PATHS, "?"])
                continue
            value = self.number(name, MENUS[dec], dec)
            if value is not None:
                out[dec] = value
        v = self.values.get("tile")
        if v is not None and v.kind != "open":
            parts = v.payload if v.kind == "dims" else ()
            if len(parts) != 3:
                self._bad("tile", v, "Tm x Tn x Tk (each a number or ?), or ?")
            else:
                for dec, part in zip(TILE_DECISIONS, parts):
                    if part is not None and part not in MENUS[dec]:
                        self.diag.add(v.pos, f"tile {dec}", part, [*MENUS[dec], "?"])
                    elif part is not None:
                        out[dec] = part
        return out

    def _dims(self, name: str, count: int, lowest: int = 1, one_ok: bool = False):
        v = self.values.get(name)
        if v is None:
            return None
        parts = (v.payload, v.payload) if one_ok and v.kind == "number" else (v.payload if v.kind == "dims" else ())
        if len(parts) != count or any(not isinstance(p, int) or p < lowest for p in parts):
            self._bad(name, v, f"{' x '.join(['n'] * count)} with integers >= {lowest}" + (" (or one number)" * one_ok))
            return None
        return tuple(parts)

    def geometry(self) -> dict[str, tuple[int, int]]:
        if self.op != "conv2d":
            return {}
        conv = {"filter": self._dims("filter", 2), "stride": self._dims("stride", 2, one_ok=True),
                "padding": self._dims("padding", 2, 0, one_ok=True), "dilation": self._dims("dilation", 2, one_ok=True)}
        return {k: v for k, v in conv.items() if v is not None}

    def shape(self, geometry):
        dims = self._dims("shape", len(SHAPE_DIMS[self.op]))
        if dims is None:
            return None
        try:
            return shape_of(self.op, dims, geometry)
        except InvalidInput as exc:
            self.diag.from_invalid(self.values["shape"].pos, exc, "shape")
            return None
