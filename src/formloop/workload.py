"""Workloads: what must be computed (an operator, its named extents, an element type), the shape
grammar every face parses with, and the named suites.

The shape grammar, one parser for every `--shape` (and every list of sizes):

    SHAPE := ITEM ("," ITEM)*      ITEM := VALUE | NAME "=" VALUE

Leading positional values fill the operator's axes in order; NAME=VALUE pairs follow in any order.
An extent is a whole number from 1 to 2^31 - 1 (the kernels index with 32-bit integers) written in
ASCII digits: '４０９６' and '4_096', which Python's int() would take, are refused."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from formloop.dtypes import KERNEL_DTYPES, get_dtype
from formloop.errors import InvalidInput
from formloop.template import Template

MAX_EXTENT = 2**31 - 1
EXTENTS = f"a positive integer >= 1 and <= {MAX_EXTENT} (2^31-1), in ASCII digits"
"""What an extent may be, as the errors and the help say it."""
SIZES = f"positive integers separated by commas, e.g. 3,4; each {EXTENTS[2:]}"
GEMM_AXES = ("M", "N", "K")
OP_AXES: dict[str, tuple[str, ...]] = {"gemm": GEMM_AXES}
"""Operators whose extents formloop itself names (others take theirs from a template or sol op)."""

_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)


def as_integer(value: object) -> int | None:
    """`value` as an int when it is one (an int, an integral float, or signed ASCII digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value.strip())
    return None


def extent(value: object, field: str, *, lo: int = 1) -> int:
    """One extent, checked: a whole number from `lo` (1, or 0 for a padding) to 2^31 - 1."""
    n = as_integer(value)
    if n is None or not lo <= n <= MAX_EXTENT:
        allowed = EXTENTS if lo == 1 else f"an integer >= {lo} and <= {MAX_EXTENT} (2^31-1), in ASCII digits"
        raise InvalidInput(field, value if n is None else n, allowed)
    return n


def split_shape(text: str, axes: Sequence[str] | None, *, what: str = "shape") -> dict[str, str]:
    """The grammar: {axis: value text}. With `axes` None only NAME=VALUE items are taken (no order
    is known); with `axes` given, positional values fill them in order. A name given twice, or a
    positional value after a named one, is refused."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(what, text, _expected(axes))
    out: dict[str, str] = {}
    named = False
    for i, part in enumerate(p.strip() for p in text.split(",")):
        if "=" in part:
            named = True
            key, value = (s.strip() for s in part.split("=", 1))
            if not _NAME.fullmatch(key):
                raise InvalidInput(f"{what} name", key, "a letter or _ followed by letters, digits or _")
        elif named:
            raise InvalidInput(what, text, "positional values before name=value pairs")
        elif axes is None:
            raise InvalidInput(what, text, _expected(None))
        elif i >= len(axes):
            raise InvalidInput(what, text, f"at most {len(axes)} values ({','.join(axes)})")
        else:
            key, value = axes[i], part
        if key in out:
            raise InvalidInput(what, text, f"each of {', '.join(axes or out)} once")
        if not value:
            raise InvalidInput(f"{what} {key}", value, EXTENTS)
        out[key] = value
    return out


def _expected(axes: Sequence[str] | None) -> str:
    if axes is None:
        return "named extents such as R=4096,C=1024 (no template for this operator says its extents)"
    return (f"{len(axes)} positive integers separated by commas ({','.join(axes)}), or one value for each of "
            f"{', '.join(axes)} named ({','.join(a + '=..' for a in axes)}); each >= 1 and <= {MAX_EXTENT} "
            "(2^31-1), in ASCII digits")


def parse_shape(text: str, axes: Sequence[str] | None, *, what: str = "shape") -> dict[str, int]:
    """Every one of `axes` (all named when None), each an extent, in the axes' order."""
    raw = split_shape(text, axes, what=what)
    if axes is not None and set(raw) != set(axes):
        raise InvalidInput(what, text, _expected(axes))
    names = axes if axes is not None else list(raw)
    for k in names:  # a token that is no integer at all: say what a shape is
        if as_integer(raw[k]) is None:
            raise InvalidInput(f"shape {k}", raw[k], _expected(axes) if axes else EXTENTS)
    return {k: extent(raw[k], f"shape {k}") for k in names}


def parse_sizes(text: str, *, field: str) -> tuple[int, ...]:
    """A bare list of sizes ('3,4'): positional values only, each an extent."""
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else []
    if not parts or any("=" in p for p in parts):
        raise InvalidInput(field, text, SIZES)
    try:
        return tuple(extent(p, field) for p in parts)
    except InvalidInput:
        raise InvalidInput(field, text, SIZES) from None


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload: an operator, its named extents and an element type. Its parameters are the
    extents plus `e` (bytes per element), the names templates read. The dtype is stored under its
    table name (an alias such as 'float32' becomes 'fp32')."""

    op: str
    shape: Mapping[str, int]
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        if not isinstance(self.op, str) or not _NAME.fullmatch(self.op.replace("-", "_")):
            raise InvalidInput("operator", self.op, "a name such as gemm or rmsnorm")
        object.__setattr__(self, "dtype", get_dtype(self.dtype, KERNEL_DTYPES).name)
        if not isinstance(self.shape, Mapping) or not self.shape:
            raise InvalidInput("shape", self.shape, "named extents, e.g. {\"M\": 64, \"N\": 64, \"K\": 64}")
        object.__setattr__(self, "shape", {str(k): extent(v, f"shape {k}") for k, v in self.shape.items()})

    @property
    def params(self) -> dict[str, int]:
        return {**self.shape, "e": get_dtype(self.dtype).bytes}

    @property
    def key(self) -> str:
        """The workload as the population stores it: 'gemm fp32 M=64 N=4096 K=4096'."""
        return f"{self.op} {self.dtype} " + " ".join(f"{k}={v}" for k, v in self.shape.items())

    @property
    def label(self) -> str:
        return f"{self.op} {'x'.join(str(v) for v in self.shape.values())} {self.dtype}"


def gemm(m: int, n: int, k: int, dtype: str = "fp32") -> WorkloadSpec:
    return WorkloadSpec("gemm", dict(zip(GEMM_AXES, (m, n, k))), dtype)


TILING_STUDY = (gemm(4096, 4096, 4096), gemm(64, 4096, 4096), gemm(1000, 1000, 1000))
"""The GEMM workload of the tiling study (seed 000, Appendix A): three shapes, FP32."""

SUITES = {"tiling-study": TILING_STUDY}


def template_axes(t: Template) -> tuple[str, ...]:
    """The workload extents a template reads, in its declared order (`e` is the dtype's, not one)."""
    return tuple(p.name for p in t.params if p.payload.kind == "workload" and p.name != "e")


def workload_axes(op: str, templates: Sequence[Template] = ()) -> tuple[str, ...] | None:
    """Names of the extents of `op`, in order: operators formloop names first, else the first of
    `templates` that computes `op`; None when nobody says."""
    if op in OP_AXES:
        return OP_AXES[op]
    for t in templates:
        if t.descriptor.get("algorithm") == op:
            return template_axes(t)
    return None


def parse_workload(op: str, text: str, dtype: str = "fp32", templates: Sequence[Template] = ()) -> WorkloadSpec:
    """'4096,4096,4096' (extents in the operator's order) or 'R=4096,C=1024' (named)."""
    return WorkloadSpec(op, parse_shape(text, workload_axes(op, templates), what=f"shape of {op}"), dtype)


def as_workload(op: str, shape: str | Mapping[str, object] | Sequence[int], dtype: str = "fp32",
                templates: Sequence[Template] = ()) -> WorkloadSpec:
    """A workload from any face's shape: grammar text, a mapping of named extents, or a sequence in
    the operator's axis order."""
    if isinstance(shape, str):
        return parse_workload(op, shape, dtype, templates)
    if isinstance(shape, Mapping):
        axes = workload_axes(op, templates)
        if axes is not None and set(shape) != set(axes):
            raise InvalidInput(f"shape of {op}", dict(shape), _expected(axes))
        return WorkloadSpec(op, {k: shape[k] for k in axes} if axes else dict(shape), dtype)
    axes = workload_axes(op, templates)
    values = list(shape) if isinstance(shape, Sequence) else None
    if axes is None or values is None or len(values) != len(axes):
        raise InvalidInput(f"shape of {op}", shape, _expected(axes))
    return WorkloadSpec(op, dict(zip(axes, values)), dtype)


def workloads_from(name: str, shapes: Sequence[str] = (), dtype: str = "fp32",
                   templates: Sequence[Template] = ()) -> list[WorkloadSpec]:
    """A named suite (e.g. tiling-study), or operator `name` at each of `shapes`."""
    if name in SUITES:
        if shapes:
            raise InvalidInput("shape", list(shapes), f"none: suite {name} fixes its own shapes")
        return list(SUITES[name])
    if not shapes:
        raise InvalidInput("shape", None, f"at least one --shape for operator {name} "
                                          f"(or a suite: {', '.join(SUITES)})")
    return [parse_workload(name, s, dtype, templates) for s in shapes]
