"""The typed IR of a spec: the main kernel's configuration (each decision fixed or open), its
epilogue chain, the pipeline's transform stages, and where each was written.

Field names, their meanings and the values each accepts live here once (FIELDS); the menus of
the tile decisions are the GEMM family's own (formloop.library.gemm_tiling_gpu), so a spec can
name exactly the designs the template covers."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from formloop.library import gemm_tiling_gpu as family
from formloop.library.gemm_epilogue_emit import LAYOUTS, OPERAND_DTYPES, OUT_DTYPES, Conv2d, KernelSpec, Shape
from formloop.library.gemm_epilogue_ops import EpilogueOp

Pos = tuple[int, int]
ARCHS = ("sm80", "sm90", "sm100")
ARCH_CHIPS = {"sm80": ("a100",), "sm90": ("h200", "h100"), "sm100": ("b200",)}
TMA_ARCHS = ("sm90", "sm100")            # tensor-memory copies (TMA) exist from Hopper on
LOAD_PATHS = {"tma": 1, "ptr": 0}
ALIGNS = (1, 2, 4, 8)                    # elements; the kernel's hint caps at 8 (gemm_tiling_kernel.alignment)
DECISION_OF = {"stages": "S", "warps": "W", "split_k": "KS", "swizzle": "G", "load": "L"}
TILE_DECISIONS = ("Tm", "Tn", "Tk")
MENUS = {d.name: tuple(d.decision.menu) for d in (family.Tm, family.Tn, family.Tk, family.S, family.W, family.KS,
                                                   family.G, family.L)}
CONV_LAYOUTS = {"a": "nhwc", "b": "krsc", "c": "nhwc"}


@dataclass(frozen=True)
class FieldSpec:
    name: str
    doc: str
    allowed: str
    required: bool = False
    ops: tuple[str, ...] = ("gemm", "batched_gemm", "conv2d")


FIELDS = {f.name: f for f in (
    FieldSpec("a", "operand A (M×K): dtype and layout", f"{'|'.join(OPERAND_DTYPES)} [row|col]", True),
    FieldSpec("b", "operand B (K×N): dtype and layout (col = stored as N×K, like nn.Linear's weight)",
              f"{'|'.join(OPERAND_DTYPES)} [row|col]", True),
    FieldSpec("c", "output C (M×N): dtype and layout", f"{'|'.join(OUT_DTYPES)} [row|col]", True),
    FieldSpec("acc", "accumulator dtype", "fp32"),
    FieldSpec("arch", "target architecture", ", ".join(ARCHS), True),
    FieldSpec("chip", "target chip (formloop.hw.chips), default the first of the arch's",
              "; ".join(f"{a}: {', '.join(c)}" for a, c in ARCH_CHIPS.items())),
    FieldSpec("tile", "output tile Tm x Tn and k-tile Tk, each a number or ?",
              f"Tm in {MENUS['Tm']}, Tn in {MENUS['Tn']}, Tk in {MENUS['Tk']}, or ?"),
    FieldSpec("stages", "pipeline stages (shared-memory slots)", f"{', '.join(map(str, MENUS['S']))}, ?"),
    FieldSpec("warps", "warps per block", f"{', '.join(map(str, MENUS['W']))}, ?"),
    FieldSpec("split_k", "k-range splits reduced in the same launch", f"{', '.join(map(str, MENUS['KS']))}, ?"),
    FieldSpec("swizzle", "tile rows per swizzle group (grouped launch order)", f"{', '.join(map(str, MENUS['G']))}, ?"),
    FieldSpec("load", "load path: tma (tensor-memory copies) or ptr (pointer loads)", "tma, ptr, ?"),
    FieldSpec("align", "elements every contiguous extent and leading stride is a multiple of",
              f"{', '.join(map(str, ALIGNS))}, ?"),
    FieldSpec("shape", "problem size: gemm M x N x K; batched_gemm B x M x N x K; conv2d N x H x W x C x K",
              "positive integers"),
    FieldSpec("filter", "conv2d filter R x S", "positive integers", ops=("conv2d",)),
    FieldSpec("stride", "conv2d stride (one number or SH x SW)", "positive integers", ops=("conv2d",)),
    FieldSpec("padding", "conv2d zero padding (one number or PH x PW)", "integers >= 0", ops=("conv2d",)),
    FieldSpec("dilation", "conv2d dilation (one number or DH x DW)", "positive integers", ops=("conv2d",)),
)}
OPERATIONS = ("gemm", "batched_gemm", "conv2d")
SHAPE_DIMS = {"gemm": ("M", "N", "K"), "batched_gemm": ("B", "M", "N", "K"), "conv2d": ("N", "H", "W", "C", "K")}


@dataclass(frozen=True)
class Operand:
    dtype: str
    layout: str = "row"


@dataclass(frozen=True)
class Stage:
    """A transform around the main kernel: `transpose` flips the layout, `cast` only converts;
    `dtype` is the dtype on the caller's side (None: the kernel's)."""

    kind: str
    tensor: str
    dtype: str | None
    pos: Pos


@dataclass(frozen=True)
class KernelIR:
    """The main kernel as declared: operands as the kernel reads and writes them."""

    name: str
    op: str
    a: Operand
    b: Operand
    c: Operand
    acc: str
    arch: str
    chip: str
    pins: Mapping[str, int]              # template decisions the spec fixes (the rest are open: '?')
    align: int | None
    shape: Shape | None
    chain: tuple[EpilogueOp, ...]
    geometry: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # conv2d filter, stride, padding, dilation
    where: Mapping[str, Pos] = field(default_factory=dict)   # field -> position of its value
    chain_where: tuple[Pos, ...] = ()

    @property
    def open_decisions(self) -> tuple[str, ...]:
        return tuple(d for d in MENUS if d not in self.pins)

    def kernel_spec(self) -> KernelSpec:
        return KernelSpec(op=self.op, ab=self.a.dtype, c=self.c.dtype, la=self.a.layout, lb=self.b.layout,
                          lc=self.c.layout, chain=self.chain, name=self.name)

    def pos(self, name: str) -> Pos:
        return self.where.get(name, self.where.get("kernel", (1, 1)))


@dataclass(frozen=True)
class SpecIR:
    """A whole spec: the main kernel and the stages before (on a, b) and after (on c) it."""

    source: str
    kernel: KernelIR
    pre: tuple[Stage, ...] = ()
    post: tuple[Stage, ...] = ()

    def caller_operand(self, tensor: str) -> Operand:
        """The operand as the caller holds it (the kernel's, through its stage if any)."""
        own = getattr(self.kernel, tensor)
        for st in (*self.pre, *self.post):
            if st.tensor == tensor:
                layout = own.layout if st.kind == "cast" else ("col" if own.layout == "row" else "row")
                return Operand(st.dtype or own.dtype, layout)
        return own

    def with_dims(self, dims: tuple[int, ...]) -> "SpecIR":
        """The spec at other problem dimensions (SHAPE_DIMS order of its operation)."""
        return replace(self, kernel=replace(self.kernel, shape=shape_of(self.kernel.op, dims, self.kernel.geometry)))


def shape_of(op: str, dims: tuple[int, ...], conv: Mapping[str, tuple[int, int]] | None = None) -> Shape:
    """A library Shape from the written dimensions (SHAPE_DIMS order) and conv geometry."""
    if op == "gemm":
        return Shape(*dims)
    if op == "batched_gemm":
        b, m, n, k = dims
        return Shape(m, n, k, batch=b)
    n, h, w, c, k = dims
    conv = conv or {}
    r, s = conv.get("filter", (1, 1))
    return Shape.of_conv(Conv2d(n, h, w, c, k, r, s, conv.get("stride", (1, 1)), conv.get("padding", (0, 0)),
                                conv.get("dilation", (1, 1))))


__all__ = ["ARCHS", "ARCH_CHIPS", "FIELDS", "KernelIR", "LAYOUTS", "MENUS", "Operand", "SpecIR", "Stage"]
