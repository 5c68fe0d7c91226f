"""Triton source of one gemm-epilogue instance: the main loop of the GEMM family (tile order,
k split and split-K reduction through the shared helpers of `gemm_tiling_kernel`) specialized to
the operand layouts, the load path and the operation, followed by the epilogue chain.

The source is text (no torch or triton needed to write it): `formloop dsl emit` prints it, and
`gemm_epilogue_kernel` writes it to a file and imports it. Tile sizes, stages, warps, split-K and
the swizzle are launch parameters, so one source serves every assignment of a load path.

Layouts: `row` stores the logical matrix row by row, `col` stores its transpose row by row (so a
`col` B of a linear layer is the weight as nn.Linear keeps it, [N, K]). The operation `conv2d`
reads A by implicit GEMM from an NHWC input (rows m = (n, p, q), columns k = (r, s, c)) and B
from a KRSC filter, i.e. a `col` B; it takes the pointer path only (its rows are gathered)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from formloop.errors import InvalidInput
from formloop.library import gemm_epilogue_conv as conv2d
from formloop.library.gemm_epilogue_helpers import HELPERS
from formloop.library.gemm_epilogue_ops import TL_DTYPES, EpilogueOp
from formloop.library.pdl_check import gemm_prologue

OPERATIONS = ("gemm", "batched_gemm", "conv2d")
LAYOUTS = ("row", "col")
OPERAND_DTYPES = ("bf16", "fp16", "tf32", "tf32x3", "fp32")
OUT_DTYPES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class KernelSpec:
    """What the emitted kernel computes: C = chain(A·B), operands of dtype `ab` in layouts la, lb,
    C of dtype `c` in layout lc. Independent of the tile decisions."""

    op: str = "gemm"
    ab: str = "bf16"
    c: str = "bf16"
    la: str = "row"
    lb: str = "row"
    lc: str = "row"
    chain: tuple[EpilogueOp, ...] = ()
    name: str = "kernel"
    a_norm: bool = False  # A's rows RMS-normalized (weight a_norm_weight, eps) in the GEMV loop (Tm = 1, KS = 1)

    def __post_init__(self) -> None:
        for field, value, allowed in (("op", self.op, OPERATIONS), ("ab", self.ab, OPERAND_DTYPES),
                                      ("c", self.c, OUT_DTYPES), ("la", self.la, LAYOUTS), ("lb", self.lb, LAYOUTS),
                                      ("lc", self.lc, LAYOUTS)):
            if value not in allowed:
                raise InvalidInput(f"kernel {field}", value, allowed)
        if self.op == "conv2d" and (self.la, self.lb, self.lc) != ("row", "col", "row"):
            raise InvalidInput("conv2d layouts (a, b, c)", (self.la, self.lb, self.lc),
                               "(row, col, row): NHWC input, KRSC filter, NHWC output")
        if not self.name.isidentifier():
            raise InvalidInput("kernel name", self.name, "an identifier")
        if self.a_norm and (self.op, self.la) != ("gemm", "row"):
            raise InvalidInput("a_norm (op, la)", (self.op, self.la), "('gemm', 'row'): one row of A per program")

    @property
    def batched(self) -> bool:
        return self.op == "batched_gemm"

    def tensors(self) -> list[tuple[str, str]]:
        """(name, shape kind) of each distinct tensor the chain reads, in order of first use."""
        seen: dict[str, str] = {}
        for op in self.chain:
            if op.tensor_name is not None:
                seen.setdefault(op.tensor_name, op.tensor)
        return list(seen.items())


@dataclass(frozen=True)
class Conv2d:
    """An NHWC convolution: input [n, h, w, c], filter [k, r, s, c] (KRSC), output [n, p, q, k]."""

    n: int
    h: int
    w: int
    c: int
    k: int
    r: int = 1
    s: int = 1
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)

    @property
    def p(self) -> int:
        return (self.h + 2 * self.pad[0] - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.pad[1] - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1

    def gemm(self) -> tuple[int, int, int]:
        """(M, N, K) of the implicit GEMM."""
        return self.n * self.p * self.q, self.k, self.r * self.s * self.c


@dataclass(frozen=True)
class Shape:
    """The problem: batch × (M×K)·(K×N), or a convolution (its implicit GEMM's M, N, K)."""

    M: int
    N: int
    K: int
    batch: int = 1
    conv: Conv2d | None = None

    @classmethod
    def of_conv(cls, conv: Conv2d) -> "Shape":
        return cls(*conv.gemm(), conv=conv)

    def __post_init__(self) -> None:
        for name in ("M", "N", "K", "batch"):
            if int(getattr(self, name)) < 1:
                raise InvalidInput(f"shape {name}", getattr(self, name), "a positive integer")


def aligned_extents(spec: KernelSpec, shape: Shape) -> dict[str, int]:
    """The extents the kernel's ALIGN hint must divide, beside the leading strides (which equal
    them for densely stored operands): K (the k-tail mask); M when A is stored by columns and N
    when B is stored by rows (their wrapped indices are hinted contiguous)."""
    out = {"K": shape.K}
    if spec.op == "conv2d":   # A's rows are runs of C channels (the tap-block loads' hint)
        out["C"] = shape.conv.c
    if spec.op != "conv2d" and spec.la == "col":
        out["M"] = shape.M
    if spec.op != "conv2d" and spec.lb == "row":
        out["N"] = shape.N
    return out


def _strides(name: str, kind: str) -> list[str]:
    return [f"{name}_sb", f"{name}_sm", f"{name}_sn"] if kind == "tile" else [f"{name}_s"]


def tensor_params(spec: KernelSpec) -> tuple[list[str], list[str]]:
    """The kernel's pointer and stride parameter names for the chain's tensors."""
    ptrs = [f"{n}_ptr" for n, _ in spec.tensors()]
    strides = [s for n, k in spec.tensors() for s in _strides(n, k)]
    return ptrs, strides


# --- the epilogue -----------------------------------------------------------------------------

def _op_lines(op: EpilogueOp, dims: int) -> list[str]:
    """Lines applying `op` to the value x (dims = 2 for a tile, 1 for one value per row)."""
    k, n = op.kind, op.tensor_name
    if op.tensor in ("row", "col"):
        idx, ok = ("rn", "col_ok") if op.tensor == "row" else ("rm", "row_ok")
        bcast = "" if dims == 1 else ("[None, :]" if op.tensor == "row" else "[:, None]")
        sym = "+" if k == "bias" else "*"
        return [f"t = tl.load({n}_ptr + {idx} * {n}_s, mask={ok}, other=0.0).to(tl.float32)", f"x = x {sym} t{bcast}"]
    if op.tensor == "tile":
        sym = "+" if k == "add" else "*"
        return [f"t = tl.load({n}_ptr + bid64 * {n}_sb + rm[:, None] * {n}_sm + rn[None, :] * {n}_sn, "
                f"mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)", f"x = x {sym} t"]
    a = dict(op.args)
    simple = {
        "scale": f"x * {a.get('by')!r}",
        "relu": "tl.maximum(x, 0.0)",
        "silu": "_silu(x)",
        "sigmoid": "_sigmoid(x)",
        "tanh": "_tanh(x)",
        "mish": "x * _tanh(_softplus(x, 1.0, 20.0))",
        "leaky_relu": f"tl.where(x >= 0, x, x * {a.get('slope')!r})",
        "hardtanh": f"tl.minimum(tl.maximum(x, {a.get('lo')!r}), {a.get('hi')!r})",
        "softplus": f"_softplus(x, {a.get('beta')!r}, {a.get('threshold')!r})",
    }
    if k in simple:
        return [f"x = {simple[k]}"]
    if k == "gelu":
        return [f"x = {_gelu('x', a['approx'])}"]
    if k == "clamp":
        out = []
        if a["lo"] is not None:
            out.append(f"x = tl.maximum(x, {a['lo']!r})")
        if a["hi"] is not None:
            out.append(f"x = tl.minimum(x, {a['hi']!r})")
        return out
    if k == "cast":
        if a["dtype"] == "bf16":
            return ["x = _round_bf16(x)"]
        return [f"x = x.to({TL_DTYPES[a['dtype']]}).to(tl.float32)"]
    if k in ("softmax", "logsumexp"):
        lines = ["xs = tl.where(col_ok[None, :], x, float('-inf'))", "mx = tl.max(xs, 1)",
                 "ex = tl.exp(xs - mx[:, None])"]
        return lines + (["x = ex * (1.0 / tl.sum(ex, 1))[:, None]"] if k == "softmax"
                        else ["x = mx + tl.log(tl.sum(ex, 1))"])
    if k == "glu":
        act = {"silu": "_silu(g)", "sigmoid": "_sigmoid(g)", "relu": "tl.maximum(g, 0.0)",
               "gelu": _gelu("g", "erf"), "gelu_tanh": _gelu("g", "tanh")}[a["act"]]
        return ["g, u = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_N // 2, 2)))", f"x = ({act}) * u",
                "rn = col0 // 2 + tl.arange(0, BLOCK_N // 2)", "col_ok = rn < N // 2"]
    raise InvalidInput("epilogue operation", k, "an operation of formloop.library.gemm_epilogue_ops.KINDS")


def _gelu(x: str, approx: str) -> str:
    if approx == "erf":
        return f"0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476))"
    # 0.5 x (1 + tanh(u)) = x sigmoid(2u) = x / (1 + e^(-2u)): one exp, one fast division
    return f"tl.fdiv({x}, 1.0 + tl.exp(-1.5957691216057308 * ({x} + 0.044715 * {x} * {x} * {x})))"


def stores_by_copy(spec: KernelSpec) -> bool:
    """Whether the kernel may store C through a tensor descriptor (decided per launch, C_DESC): a
    row-major tile of C (not a row reduction's one value per row)."""
    return spec.lc == "row" and not any(op.spec.reduces for op in spec.chain)


def epilogue_source(spec: KernelSpec) -> str:
    ptrs, strides = tensor_params(spec)
    params = ", ".join(["acc", "c_ptr", *ptrs, "row0", "col0", "bid", "M", "N", "stride_cb", "stride_cm", "stride_cn",
                        *strides, "BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr",
                        "INTERPRET: tl.constexpr", "C_DESC: tl.constexpr"])
    body = ["bid64 = bid.to(tl.int64)", "rm = row0 + tl.arange(0, BLOCK_M)", "rn = col0 + tl.arange(0, BLOCK_N)",
            "row_ok = rm < M", "col_ok = rn < N", "x = acc"]
    dims = 2
    for op in spec.chain:
        body.append(f"# {op.text()}")
        body += _op_lines(op, dims)
        if op.spec.reduces:
            dims = 1
    c_off = "c_ptr + bid64 * stride_cb + rm * stride_cm" if dims == 1 else \
        "c_ptr + bid64 * stride_cb + rm[:, None] * stride_cm + rn[None, :] * stride_cn"
    mask = "row_ok" if dims == 1 else "row_ok[:, None] & col_ok[None, :]"
    if spec.c == "bf16":  # Triton 3.6's interpreter truncates to bf16; the GPU rounds to nearest
        body += ["if INTERPRET:", "    x = _round_bf16(x)"]
    if stores_by_copy(spec):  # C_DESC: c_ptr is a tensor descriptor (edges clipped by the copy engine)
        pairs = any(op.spec.pairs for op in spec.chain)
        width, col = ("BLOCK_N // 2", "col0 // 2") if pairs else ("BLOCK_N", "col0")
        store = f"c_ptr.store([bid, row0, {col}], x.reshape(1, BLOCK_M, {width}).to(c_ptr.dtype))" if spec.batched \
            else f"c_ptr.store([row0, {col}], x.to(c_ptr.dtype))"
        body += ["if C_DESC:", f"    {store}", "else:",
                 f"    tl.store({c_off}, x.to(c_ptr.dtype.element_ty), mask={mask})"]
    else:
        body.append(f"tl.store({c_off}, x.to(c_ptr.dtype.element_ty), mask={mask})")
    return "\n".join(["@triton.jit", f"def _epilogue({params}):", *("    " + b for b in body)])


# --- the main loop ----------------------------------------------------------------------------

def _pointer_setup(spec: KernelSpec) -> list[str]:
    lines = ["rk = tl.arange(0, BLOCK_K)"]
    if spec.op == "conv2d":
        lines += conv2d.SETUP
    elif spec.la == "row":
        lines += ["ram = rm % M", "a_ptrs = a_ptr + bid64 * stride_ab + tl.multiple_of(ram * stride_a, ALIGN)[:, None]"
                  " + (k_lo + rk)[None, :]"]
    else:
        lines += ["ram = tl.max_contiguous(tl.multiple_of(rm % M, ALIGN), ALIGN)",
                  "a_ptrs = a_ptr + bid64 * stride_ab + ram[:, None] + tl.multiple_of((k_lo + rk) * stride_a, ALIGN)"
                  "[None, :]"]
    if spec.lb == "row":
        lines += ["rbn = tl.max_contiguous(tl.multiple_of(rn % N, ALIGN), ALIGN)",
                  "b_ptrs = b_ptr + bid64 * stride_bb + tl.multiple_of((k_lo + rk) * stride_b, ALIGN)[:, None]"
                  " + rbn[None, :]"]
    else:
        lines += ["rbn = rn % N", "b_ptrs = b_ptr + bid64 * stride_bb + tl.multiple_of(rbn * stride_b, ALIGN)[None, :]"
                  " + (k_lo + rk)[:, None]"]
    return lines


def _pointer_loads(spec: KernelSpec) -> list[str]:
    lines = ["k_ok = (k + rk) < k_hi"]
    if spec.op == "conv2d":
        lines += conv2d.LOADS
    else:
        lines += ["a = tl.load(a_ptrs, mask=k_ok[None, :], other=0.0)"]
    lines += ["b = tl.load(b_ptrs, mask=k_ok[:, None], other=0.0)"]
    return lines


def _pointer_steps(spec: KernelSpec) -> list[str]:
    out = [] if spec.op == "conv2d" else [f"a_ptrs += {'BLOCK_K' if spec.la == 'row' else 'BLOCK_K * stride_a'}"]
    return out + [f"b_ptrs += {'BLOCK_K * stride_b' if spec.lb == 'row' else 'BLOCK_K'}"]


def _simt_loop(spec: KernelSpec) -> list[str]:
    """The GEMV main loop (one row of A per program): fp32 products of B's [BLOCK_K, BLOCK_N] tile with A's
    k-slice, reduced over k after the loop. With `a_norm` (KS = 1: the loop sees the whole row) the slice is
    scaled by the norm weight and its squares summed, and the row's 1/rms scales the result."""
    norm = ["ssq += a32 * a32", "a32 = a32 * tl.load(g_ptrs, mask=k_ok, other=0.0).to(tl.float32)[None, :]",
            "g_ptrs += BLOCK_K"] if spec.a_norm else []
    loop = [*_pointer_loads(spec), "a32 = a.to(tl.float32)", *norm,
            "prods += b.to(tl.float32) * tl.reshape(a32, (BLOCK_K, 1))", *_pointer_steps(spec)]
    start = ["ssq = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)", "g_ptrs = anorm_ptr + k_lo + rk"]
    return [*(start if spec.a_norm else []), "prods = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)",
            "for k in range(k_lo, k_hi, BLOCK_K):", *("    " + x for x in loop),
            "acc = tl.reshape(tl.sum(prods, axis=0), (BLOCK_M, BLOCK_N))",
            *(["acc = acc * tl.rsqrt(tl.sum(ssq, axis=1) / K + anorm_eps)[:, None]"] if spec.a_norm else [])]


def kernel_params(spec: KernelSpec, load_path: int = 0, pdl: bool = False) -> list[str]:
    """The main kernel's parameters in order (the launcher passes them positionally); with PDL, B's
    storage as a plain pointer last (`b_raw`: the weight lines prefetched before the wait)."""
    ptrs, strides = tensor_params(spec)
    conv = list(conv2d.ARGS) if spec.op == "conv2d" else []
    operands = ["a_desc", "b_desc"] if load_path else ["a_ptr", "b_ptr"]
    return [*operands, "c_ptr", "ws_ptr", "cnt_ptr", *ptrs, "M", "N", "K", "stride_ab", "stride_a",
            "stride_bb", "stride_b", "stride_cb", "stride_cm", "stride_cn", *strides, *conv, "GROUP_M", "SPLIT_K",
            *(["anorm_ptr", "anorm_eps"] if spec.a_norm else []), *(["b_raw"] if pdl else [])]


CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "ALIGN", "PRECISION", "TO_WORKSPACE", "WIDEN", "INTERPRET", "C_DESC",
              "EPI_SPLIT")
PDL_CONSTEXPRS = ("PF_SPAN", "PF_LINE")  # columns of each B row prefetched before the wait, elements per line


def _epilogue_calls(spec: KernelSpec, value: str) -> list[str]:
    """The epilogue applied to the accumulator tile `value`: whole, or (EPI_SPLIT, elementwise
    chains only: gemm_epilogue_ops.splits_epilogue) in two column halves, each loading its slice
    of the chain's tensors and storing its own half of C, so half the temporaries are live."""
    ptrs, strides = tensor_params(spec)

    def call(x: str, col0: str, width: str) -> str:
        args = ["c_ptr", *ptrs, "pid_m * BLOCK_M", col0, "bid", "M", "N", "stride_cb", "stride_cm", "stride_cn",
                *strides, "BLOCK_M", width, "INTERPRET", "C_DESC"]
        return f"_epilogue({x}, {', '.join(args)})"

    whole = call(value, "pid_n * BLOCK_N", "BLOCK_N")
    if any(op.spec.row or op.spec.reduces for op in spec.chain):
        return [whole]
    return ["if EPI_SPLIT:",
            f"    lo, hi = tl.split(tl.permute(tl.reshape({value}, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))",
            "    " + call("lo", "pid_n * BLOCK_N", "BLOCK_N // 2"),
            "    " + call("hi", "pid_n * BLOCK_N + BLOCK_N // 2", "BLOCK_N // 2"),
            "else:", "    " + whole]


def kernel_source(spec: KernelSpec, load_path: int, pdl: bool = False, simt: bool = False) -> str:
    """The kernel's Triton source; `load_path` 1 = tensor-memory copies (TMA), 0 = pointer loads;
    `pdl` adds the programmatic-dependent prologue (without it the source is the same text as before);
    `simt`: the CUDA-core main loop of one-row tiles (BLOCK_M = 1, pointer loads), the GEMV of
    gemv-epilogue-gpu: each thread keeps fp32 products of its [BLOCK_K, BLOCK_N] share of B with A's
    k-slice and reduces them over k after the loop (no tensor cores, no 16-row padding of A)."""
    if load_path not in (0, 1):
        raise InvalidInput("load path L", load_path, (0, 1))
    if load_path == 1 and spec.op == "conv2d":
        raise InvalidInput("load path L for conv2d", load_path, "0 (implicit GEMM gathers its rows: pointer loads)")
    if simt and (load_path or spec.op == "conv2d"):
        raise InvalidInput("CUDA-core path (Tm = 1)", (spec.op, load_path), "a gemm or batched_gemm on pointer loads "
                                                                            "(L = 0)")
    ptrs, strides = tensor_params(spec)
    body = ["pid = tl.program_id(0)", "pid_k = tl.program_id(1)", "bid = tl.program_id(2)", "bid64 = bid.to(tl.int64)",
            "pid_m, pid_n, k_lo, per_split = _tile_of(pid, pid_k, M, N, K, GROUP_M, SPLIT_K, "
            "BLOCK_M, BLOCK_N, BLOCK_K)",
            "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)"]
    if pdl:
        body += gemm_prologue(spec.lb == "col" and spec.op != "conv2d")
    if load_path == 0:
        body += ["k_hi = tl.multiple_of(tl.minimum(K, k_lo + per_split * BLOCK_K), ALIGN)", *_pointer_setup(spec)]
        if simt:
            body += _simt_loop(spec)
        else:
            body += ["acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", "for k in range(k_lo, k_hi, BLOCK_K):"]
            loop = [*_pointer_loads(spec), "if WIDEN:", "    a = a.to(tl.float32)", "    b = b.to(tl.float32)",
                    "acc = _dot(a, b, acc, PRECISION)", *_pointer_steps(spec)]
            body += ["    " + x for x in loop]
    else:  # the GEMM family's copy-engine main loop (gemm_tiling_kernel._tma_mainloop), shared
        body += ["k_hi = tl.minimum(K, k_lo + per_split * BLOCK_K)",
                 f"acc = _tma_mainloop(a_desc, b_desc, bid, pid_m * BLOCK_M, pid_n * BLOCK_N, k_lo, k_hi, "
                 f"BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, WIDEN, {spec.la == 'col'}, {spec.lb == 'col'}, "
                 f"{spec.batched})"]
    body += ["if TO_WORKSPACE:",
             "    # batch bid owns its own partials and counters; the last split of a tile sums them",
             "    tile = bid * (tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)) + pid",
             "    ws = ws_ptr + bid64 * SPLIT_K * M * N",
             "    ok = (rm < M)[:, None] & (rn < N)[None, :]",
             "    if _split_arrive(acc, ws, cnt_ptr, tile, pid_k, rm, rn, ok, M, N) == SPLIT_K - 1:",
             "        total = _split_total(ws, cnt_ptr, tile, rm, rn, ok, M, N, SPLIT_K, BLOCK_M, BLOCK_N)",
             *("        " + x for x in _epilogue_calls(spec, "total")),
             "else:",
             *("    " + x for x in _epilogue_calls(spec, "acc"))]
    consts = CONSTEXPRS + (PDL_CONSTEXPRS if pdl else ()) + (conv2d.CONSTEXPRS if spec.op == "conv2d" else ())
    params = ", ".join([*kernel_params(spec, load_path, pdl), *(f"{c}: tl.constexpr" for c in consts)])
    dont = ["M", "N", "K", "GROUP_M", "SPLIT_K"] + (list(conv2d.ARGS) if spec.op == "conv2d" else [])
    return "\n".join([f"@triton.jit(do_not_specialize={dont!r})", f"def {spec.name}({params}):",
                      *("    " + b for b in body)])


def module_source(spec: KernelSpec, load_path: int, *, header: Sequence[str] = (), pdl: bool = False,
                  simt: bool = False) -> str:
    """The whole emitted module: imports, helpers, the epilogue and the main kernel (`pdl`: with the
    programmatic-dependent prologue; without it, the text is the same as before PDL existed; `simt`:
    the CUDA-core main loop of one-row tiles)."""
    lines = [f"# {h}" for h in header]
    lines += ["import triton", "import triton.language as tl", "",
              "from formloop.library.gemm_dot import _dot",
              "from formloop.library.gemm_tiling_kernel import _split_arrive, _split_total, _tile_of, _tma_mainloop"]
    if pdl:
        lines += ["from formloop.library.pdl import l2_prefetch, pdl_launch_dependents, pdl_wait"]
    lines += ["", "", HELPERS, "", "", epilogue_source(spec), "", "", kernel_source(spec, load_path, pdl, simt), ""]
    return "\n".join(lines)
