"""Triton kernels of the rowwise family (formloop.library.rowwise): norms, softmax, row reductions.

x is a 2D view [R, C] whose last dim is contiguous (rows may be strided). Every op computes in fp32
and writes its outputs in x's dtype (argmax/argmin: int64). A tile is [RP, BC]; when BC >= C the row
is held in registers and read once, else the program loops over it (norms and softmax read it a
second time to write it). rmsnorm-residual rounds x + residual to x's dtype, stores it as the new
residual and normalizes the rounded value (HF Qwen3: the residual stream is kept in the model dtype).
Ties of argmax/argmin go to the first index; NaN inputs are outside the contract of the arg ops."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from formloop.dtypes import torch_dtype
from formloop.errors import InvalidInput
from formloop.library.gemm_dot import store_cast
from formloop.library.pdl import launch_options, pdl_launch_dependents, pdl_wait
from formloop.library.rowwise import DTYPES, NORMS, REDUCTIONS, ROW_OPS, solved_design

TORCH_DTYPES = {d: torch_dtype(d) for d in ("fp32", "bf16", "fp16")}
DTYPE_OF = {v: k for k, v in TORCH_DTYPES.items()}
NORM_CODE = {"rmsnorm": 0, "rmsnorm-residual": 1, "layernorm": 2, "groupnorm": 3}
RED_CODE = {"sum": 0, "mean": 1, "max": 2, "min": 3, "argmax": 4, "argmin": 5, "logsumexp": 6}


@dataclass(frozen=True)
class RowConfig:
    BC: int
    RP: int = 1
    W: int = 4
    S: int = 1

    @classmethod
    def from_assignment(cls, a: Mapping[str, int]) -> "RowConfig":
        return cls(int(a["BC"]), int(a["RP"]), int(a["W"]), int(a["S"]))

    def __post_init__(self) -> None:
        for name in ("BC", "RP", "W"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise InvalidInput(f"rowwise {name}", v, "a power of two >= 1")
        if self.S < 1:
            raise InvalidInput("rowwise S", self.S, "an integer >= 1")


def heuristic_config(C: int, op: str = "rmsnorm") -> RowConfig:
    """A usable config without the solver: the row in one tile up to 8192 columns, else loop."""
    bc = min(triton.next_power_of_2(max(C, 16)), 8192)
    rp = max(1, min(16, 1024 // bc))
    w = max(1, min(16, bc * rp // 256))
    return RowConfig(bc, rp, w, 1 if bc >= C else 2)


@triton.jit
def _affine(w_ptr, b_ptr, rows, cols, m, C, G, CG, HW, GATHER: tl.constexpr):
    """The affine tiles: per column (layernorm), or per channel of a group-norm row (row r is group r % G of
    a sample; column c of it is channel (r % G)·CG + c // HW)."""
    if GATHER:
        wi = (rows % G)[:, None] * CG + cols[None, :] // HW
        w = tl.load(w_ptr + wi, mask=m, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + wi, mask=m, other=0.0).to(tl.float32)
    else:
        w = tl.load(w_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)[None, :]
        b = tl.load(b_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)[None, :]
    return w, b


@triton.jit
def _load_rows(x_ptr, r_ptr, ro_ptr, r64, cols, m, sx, sr, sro, RESIDUAL: tl.constexpr):
    """The tile of x in fp32; with RESIDUAL, x + residual, stored back in the model's dtype and reread as stored
    (Qwen3's residual stream is rounded before the norm sees it)."""
    x = tl.load(x_ptr + r64[:, None] * sx + cols[None, :], mask=m, other=0.0).to(tl.float32)
    if RESIDUAL:
        x = x + tl.load(r_ptr + r64[:, None] * sr + cols[None, :], mask=m, other=0.0).to(tl.float32)
        xr = store_cast(x, ro_ptr)
        tl.store(ro_ptr + r64[:, None] * sro + cols[None, :], xr, mask=m)
        x = xr.to(tl.float32)
    return x


@triton.jit
def _norm_kernel(x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, ro_ptr, R, C, sx, sr, sy, sro, eps, G, CG, HW,
                 OP: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr, ONE: tl.constexpr, PDL: tl.constexpr = False):
    if PDL:  # launched as a programmatic dependent (formloop.library.pdl): everything after the wait
        pdl_launch_dependents()
        pdl_wait()
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    row_ok = rows < R
    r64 = rows.to(tl.int64)
    if ONE:
        cols = tl.arange(0, BC)
        m = row_ok[:, None] & (cols < C)[None, :]
        x = _load_rows(x_ptr, r_ptr, ro_ptr, r64, cols, m, sx, sr, sro, OP == 1)
        if OP >= 2:
            mean = tl.sum(x, 1) / C
            d = tl.where(m, x - mean[:, None], 0.0)
            rstd = 1.0 / tl.sqrt(tl.sum(d * d, 1) / C + eps)
            w, b = _affine(w_ptr, b_ptr, rows, cols, m, C, G, CG, HW, OP == 3)
            y = d * rstd[:, None] * w + b
        else:
            w = tl.load(w_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)
            rstd = 1.0 / tl.sqrt(tl.sum(x * x, 1) / C + eps)
            y = x * rstd[:, None] * w[None, :]
        tl.store(y_ptr + r64[:, None] * sy + cols[None, :], store_cast(y, y_ptr), mask=m)
    else:
        # pass 1: statistics (layernorm shifts by the row's first value against cancellation)
        shift = tl.zeros([RP], tl.float32)
        if OP >= 2:
            shift = tl.load(x_ptr + r64 * sx, mask=row_ok, other=0.0).to(tl.float32)
        acc = tl.zeros([RP, BC], tl.float32)
        acc2 = tl.zeros([RP, BC], tl.float32)
        for c0 in range(0, C, BC):
            cols = c0 + tl.arange(0, BC)
            m = row_ok[:, None] & (cols < C)[None, :]
            x = _load_rows(x_ptr, r_ptr, ro_ptr, r64, cols, m, sx, sr, sro, OP == 1)
            if OP >= 2:
                d = tl.where(m, x - shift[:, None], 0.0)
                acc += d
                acc2 += d * d
            else:
                acc2 += x * x
        if OP >= 2:
            dm = tl.sum(acc, 1) / C
            var = tl.maximum(tl.sum(acc2, 1) / C - dm * dm, 0.0)
            mean = shift + dm
        else:
            var = tl.sum(acc2, 1) / C
            mean = tl.zeros([RP], tl.float32)
        rstd = 1.0 / tl.sqrt(var + eps)
        if OP == 1:
            tl.debug_barrier()  # the stored residual row is visible to every thread of the program
        # pass 2: normalize (rmsnorm-residual reads back the residual it stored: residual_out may alias residual)
        for c0 in range(0, C, BC):
            cols = c0 + tl.arange(0, BC)
            m = row_ok[:, None] & (cols < C)[None, :]
            if OP == 1:
                x = tl.load(ro_ptr + r64[:, None] * sro + cols[None, :], mask=m, other=0.0).to(tl.float32)
            else:
                x = tl.load(x_ptr + r64[:, None] * sx + cols[None, :], mask=m, other=0.0).to(tl.float32)
            if OP >= 2:
                w, b = _affine(w_ptr, b_ptr, rows, cols, m, C, G, CG, HW, OP == 3)
                y = (x - mean[:, None]) * rstd[:, None] * w + b
            else:
                w = tl.load(w_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)
                y = x * rstd[:, None] * w[None, :]
            tl.store(y_ptr + r64[:, None] * sy + cols[None, :], store_cast(y, y_ptr), mask=m)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, R, C, sx, sy, LOG: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr,
                    ONE: tl.constexpr):
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    row_ok = rows < R
    r64 = rows.to(tl.int64)
    if ONE:
        cols = tl.arange(0, BC)
        m = row_ok[:, None] & (cols < C)[None, :]
        x = tl.load(x_ptr + r64[:, None] * sx + cols[None, :], mask=m, other=float("-inf")).to(tl.float32)
        mx = tl.max(x, 1)
        ex = tl.exp(x - mx[:, None])
        s = tl.sum(ex, 1)
        if LOG:
            y = x - mx[:, None] - tl.log(s)[:, None]
        else:
            y = ex / s[:, None]
        tl.store(y_ptr + r64[:, None] * sy + cols[None, :], store_cast(y, y_ptr), mask=m)
    else:
        # one pass of statistics: the running row max (one value per row, from each tile's max) and lane sums
        # relative to it, rescaled by one exp per row and step: one exp per element
        mx = tl.full([RP], float("-inf"), tl.float32)
        sv = tl.zeros([RP, BC], tl.float32)
        for c0 in range(0, C, BC):
            cols = c0 + tl.arange(0, BC)
            m = row_ok[:, None] & (cols < C)[None, :]
            x = tl.load(x_ptr + r64[:, None] * sx + cols[None, :], mask=m, other=float("-inf")).to(tl.float32)
            mn = tl.maximum(mx, tl.max(x, 1))
            safe = tl.where(mn == float("-inf"), 0.0, mn)
            sv = sv * tl.exp(mx - safe)[:, None] + tl.exp(x - safe[:, None])
            mx = mn
        s = tl.sum(sv, 1)
        for c0 in range(0, C, BC):
            cols = c0 + tl.arange(0, BC)
            m = row_ok[:, None] & (cols < C)[None, :]
            x = tl.load(x_ptr + r64[:, None] * sx + cols[None, :], mask=m, other=float("-inf")).to(tl.float32)
            if LOG:
                y = x - mx[:, None] - tl.log(s)[:, None]
            else:
                y = tl.exp(x - mx[:, None]) / s[:, None]
            tl.store(y_ptr + r64[:, None] * sy + cols[None, :], store_cast(y, y_ptr), mask=m)


@triton.jit
def _reduce_kernel(x_ptr, y_ptr, R, C, sx, OP: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr,
                   ACC64: tl.constexpr):
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    row_ok = rows < R
    r64 = rows.to(tl.int64)
    if OP == 0 or OP == 1:
        other = 0.0
    elif OP == 2 or OP == 4 or OP == 6:
        other = float("-inf")
    else:
        other = float("inf")
    if ACC64:   # fp64 partials (sum, mean): measured slower than fp32 ones under wall C8 (row_sum_error.py)
        acc = tl.zeros([RP, BC], tl.float64)
    else:
        acc = tl.full([RP, BC], other, tl.float32)
    idx = tl.zeros([RP, BC], tl.int32)
    sv = tl.zeros([RP, BC], tl.float32)
    for c0 in range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        m = row_ok[:, None] & (cols < C)[None, :]
        x = tl.load(x_ptr + r64[:, None] * sx + cols[None, :], mask=m, other=other).to(tl.float32)
        if ACC64:
            acc += x.to(tl.float64)
        elif OP == 0 or OP == 1:
            acc += x
        elif OP == 2:
            acc = tl.maximum(acc, x)
        elif OP == 3:
            acc = tl.minimum(acc, x)
        elif OP == 4:
            better = (x > acc) & m
            idx = tl.where(better, cols[None, :], idx)
            acc = tl.where(better, x, acc)
        elif OP == 5:
            better = (x < acc) & m
            idx = tl.where(better, cols[None, :], idx)
            acc = tl.where(better, x, acc)
        else:
            mn = tl.maximum(acc, x)
            safe = tl.where(mn == float("-inf"), 0.0, mn)
            sv = sv * tl.exp(acc - safe) + tl.exp(x - safe)
            acc = mn
    if OP == 0:
        out = tl.sum(acc, 1)
    elif OP == 1:
        out = tl.sum(acc, 1) / C
    elif OP == 2:
        out = tl.max(acc, 1)
    elif OP == 3:
        out = tl.min(acc, 1)
    elif OP == 6:
        mx = tl.max(acc, 1)
        safe = tl.where(mx == float("-inf"), 0.0, mx)
        out = safe + tl.log(tl.sum(sv * tl.exp(acc - safe[:, None]), 1))
    else:
        if OP == 4:
            best = tl.max(acc, 1)
        else:
            best = tl.min(acc, 1)
        # lanes that never saw a value hold index 0 and the neutral value: they lose unless the row is all neutral
        cand = tl.where(acc == best[:, None], idx, 2147483647)
        out = tl.min(cand, 1).to(tl.int64)
    tl.store(y_ptr + r64, out.to(y_ptr.dtype.element_ty), mask=row_ok)


def _check_2d(name: str, t: torch.Tensor, rows: int | None = None, cols: int | None = None) -> None:
    if t.dim() != 2 or t.stride(1) != 1:
        raise InvalidInput(f"{name} layout", tuple(t.shape), "a 2D tensor [R, C] with a contiguous last dim")
    if (rows is not None and t.shape[0] != rows) or (cols is not None and t.shape[1] != cols):
        raise InvalidInput(f"{name} shape", tuple(t.shape), f"[{rows}, {cols}]")


def _check_vec(name: str, t: torch.Tensor | None, cols: int) -> torch.Tensor:
    if t is None or t.dim() != 1 or t.shape[0] != cols:
        raise InvalidInput(f"{name} shape", None if t is None else tuple(t.shape), f"a vector [{cols}]")
    return t.contiguous()


class RowwiseProgram:
    """One instance: op, tile config, the workload's R and C (checked at call) and dtype."""

    def __init__(self, op: str, config: RowConfig, R: int | None = None, C: int | None = None,
                 dtype: str | None = None, pdl: bool = False):
        if op not in ROW_OPS:
            raise InvalidInput("rowwise op", op, ROW_OPS)
        if dtype is not None and dtype not in DTYPES:
            raise InvalidInput("dtype", dtype, DTYPES)
        self.op, self.config, self.R, self.C, self.dtype = op, config, R, C, dtype
        self.pdl = pdl and op in NORMS  # norms only: launched as a programmatic dependent (pdl.py)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 residual: torch.Tensor | None = None, eps: float = 1e-6, out: torch.Tensor | None = None,
                 residual_out: torch.Tensor | None = None, groups: int = 1, hw: int = 1):
        """The op on x [R, C]; rmsnorm-residual returns (y, new residual); residual_out may alias residual.
        groupnorm: x is [N·groups, C/groups·hw], weight and bias are per channel [C]."""
        if x.dtype not in DTYPE_OF:
            raise InvalidInput("x dtype", str(x.dtype), DTYPES)
        if self.dtype is not None and DTYPE_OF[x.dtype] != self.dtype:
            raise InvalidInput("x dtype", DTYPE_OF[x.dtype], [self.dtype])
        _check_2d("x", x, self.R, self.C)
        R, C = x.shape
        if R == 0 or C == 0:
            raise InvalidInput("x shape", tuple(x.shape), "R >= 1 and C >= 1")
        cfg = self.config
        grid = (triton.cdiv(R, cfg.RP),)
        one = cfg.BC >= C
        launch = dict(num_warps=cfg.W, num_stages=cfg.S)
        if self.op in NORMS:
            channels = C // hw * groups if self.op == "groupnorm" else C
            if self.op == "groupnorm" and (hw < 1 or groups < 1 or C % hw or R % groups):
                raise InvalidInput("groupnorm groups, hw", (groups, hw), f"hw dividing C={C}, groups dividing R={R}")
            w = _check_vec("weight", weight, channels)
            b = _check_vec("bias", bias, channels) if self.op in ("layernorm", "groupnorm") else w
            y = torch.empty_like(x) if out is None else out
            _check_2d("out", y, R, C)
            if self.op == "rmsnorm-residual":
                if residual is None:
                    raise InvalidInput("residual", None, f"a tensor [{R}, {C}] of x's dtype")
                _check_2d("residual", residual, R, C)
                ro = torch.empty_like(x) if residual_out is None else residual_out
                _check_2d("residual_out", ro, R, C)
            else:
                residual, ro = x, y
            _norm_kernel[grid](x, residual, w, b, y, ro, R, C, x.stride(0), residual.stride(0), y.stride(0),
                               ro.stride(0), float(eps), groups, C // hw, hw, OP=NORM_CODE[self.op], BC=cfg.BC,
                               RP=cfg.RP, ONE=one, **launch, **launch_options(self.pdl))
            return (y, ro) if self.op == "rmsnorm-residual" else y
        if self.op in ("softmax", "log-softmax"):
            y = torch.empty_like(x) if out is None else out
            _check_2d("out", y, R, C)
            _softmax_kernel[grid](x, y, R, C, x.stride(0), y.stride(0), LOG=self.op == "log-softmax", BC=cfg.BC,
                                  RP=cfg.RP, ONE=one, **launch)
            return y
        assert self.op in REDUCTIONS
        arg = self.op in ("argmax", "argmin")
        y = torch.empty(R, dtype=torch.int64 if arg else x.dtype, device=x.device) if out is None else out
        _reduce_kernel[grid](x, y, R, C, x.stride(0), OP=RED_CODE[self.op], BC=cfg.BC, RP=cfg.RP,
                             ACC64=False, **launch)
        return y


def rowwise(op: str, x: torch.Tensor, *, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
            residual: torch.Tensor | None = None, eps: float = 1e-6, config: RowConfig | None = None,
            chip: str = "h200", out: torch.Tensor | None = None, residual_out: torch.Tensor | None = None):
    """The op on x [R, C] (contiguous last dim) with the solved design for its shape (or `config`)."""
    if x.dtype not in DTYPE_OF:
        raise InvalidInput("x dtype", str(x.dtype), DTYPES)
    _check_2d("x", x)
    if config is None:
        config = RowConfig.from_assignment(solved_design(op, int(x.shape[0]), int(x.shape[1]), DTYPE_OF[x.dtype],
                                                         chip))
    return RowwiseProgram(op, config)(x, weight=weight, bias=bias, residual=residual, eps=eps, out=out,
                                      residual_out=residual_out)


def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, config: RowConfig | None = None, chip: str = "h200") -> torch.Tensor:
    """F.group_norm on x [N, C, *spatial] (contiguous) in one launch: rows of [N·G, C/G·HW]; instance norm is
    groups = C. No affine: weight ones, bias zeros."""
    if x.dim() < 2 or not x.is_contiguous() or x.shape[1] % groups:
        raise InvalidInput("group_norm x", tuple(x.shape), f"a contiguous [N, C, ...] with C divisible by {groups}")
    n, c = x.shape[:2]
    hw = x[0, 0].numel()
    xv = x.view(n * groups, c // groups * hw)
    w = torch.ones(c, device=x.device, dtype=x.dtype) if weight is None else weight
    b = torch.zeros(c, device=x.device, dtype=x.dtype) if bias is None else bias
    if config is None:
        config = RowConfig.from_assignment(solved_design("groupnorm", xv.shape[0], xv.shape[1], DTYPE_OF[x.dtype],
                                                         chip))
    return RowwiseProgram("groupnorm", config)(xv, weight=w, bias=b, eps=eps, groups=groups, hw=hw).view(x.shape)
