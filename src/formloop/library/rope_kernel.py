"""The Triton kernel of the rope family (formloop.library.rope), its launcher and its fp64 reference.

x is [R, D] with a contiguous head dim (any row stride); cos and sin are [Q, D] tables (contiguous head dim,
one row stride for both); row r reads table row (r // P) mod Q. out = x·cos + rotate_half(x)·sin in fp32,
stored in x's dtype."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from formloop.errors import InvalidInput
from formloop.library.gemm_dot import store_cast
from formloop.library.rope import pairs_block
from formloop.library.rowwise_kernel import DTYPE_OF, TORCH_DTYPES


@dataclass(frozen=True)
class RopeConfig:
    RP: int = 4
    W: int = 4

    @classmethod
    def from_assignment(cls, a: Mapping[str, int]) -> "RopeConfig":
        return cls(int(a["RP"]), int(a["W"]))

    def __post_init__(self) -> None:
        for name in ("RP", "W"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise InvalidInput(f"rope {name}", v, "a power of two >= 1")


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, R, P, Q, s_x, s_o, s_cs, s_sn,
                 HALF: tl.constexpr, HB: tl.constexpr, RP: tl.constexpr):
    r = tl.program_id(0).to(tl.int64) * RP + tl.arange(0, RP)
    d = tl.arange(0, HB)
    m = (r < R)[:, None] & (d < HALF)[None, :]
    p = (r // P) % Q
    xo = x_ptr + r[:, None] * s_x + d[None, :]
    lo = tl.load(xo, mask=m, other=0.0).to(tl.float32)
    hi = tl.load(xo + HALF, mask=m, other=0.0).to(tl.float32)
    co = cos_ptr + p[:, None] * s_cs + d[None, :]
    so = sin_ptr + p[:, None] * s_sn + d[None, :]
    c_lo = tl.load(co, mask=m, other=0.0).to(tl.float32)
    c_hi = tl.load(co + HALF, mask=m, other=0.0).to(tl.float32)
    s_lo = tl.load(so, mask=m, other=0.0).to(tl.float32)
    s_hi = tl.load(so + HALF, mask=m, other=0.0).to(tl.float32)
    oo = out_ptr + r[:, None] * s_o + d[None, :]
    tl.store(oo, store_cast(lo * c_lo - hi * s_lo, out_ptr), mask=m)
    tl.store(oo + HALF, store_cast(hi * c_hi + lo * s_hi, out_ptr), mask=m)


class RopeProgram:
    """One instance: a config and the dtype of x, cos, sin and out."""

    def __init__(self, config: RopeConfig, dtype: str = "fp32"):
        if dtype not in TORCH_DTYPES:
            raise InvalidInput("dtype", dtype, sorted(TORCH_DTYPES))
        self.config, self.dtype = config, dtype

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, period: int = 1,
                 out: torch.Tensor | None = None) -> torch.Tensor:
        """x [R, D], cos and sin [Q, D]; row r uses table row (r // period) mod Q. Returns out [R, D]."""
        for name, t in (("x", x), ("cos", cos), ("sin", sin)):
            if t.dtype not in DTYPE_OF or DTYPE_OF[t.dtype] != self.dtype:
                raise InvalidInput(f"rope {name} dtype", str(t.dtype), [self.dtype])
            if t.dim() != 2 or t.stride(-1) != 1:
                raise InvalidInput(f"rope {name} layout", (tuple(t.shape), tuple(t.stride())),
                                   "a 2D view with a contiguous last dim")
        R, D = x.shape
        if D < 2 or D % 2:
            raise InvalidInput("rope head dim", D, "an even number >= 2")
        if cos.shape != sin.shape or cos.shape[1] != D or cos.shape[0] < 1:
            raise InvalidInput("rope cos/sin shape", (tuple(cos.shape), tuple(sin.shape)), f"both [Q, {D}]")
        if period < 1:
            raise InvalidInput("rope period", period, "an integer >= 1")
        out = torch.empty((R, D), dtype=x.dtype, device=x.device) if out is None else out
        if R == 0:
            return out
        cfg = self.config
        _rope_kernel[(triton.cdiv(R, cfg.RP),)](x, cos, sin, out, R, int(period), cos.shape[0], x.stride(0),
                                                out.stride(0), cos.stride(0), sin.stride(0), HALF=D // 2,
                                                HB=pairs_block(D), RP=cfg.RP, num_warps=cfg.W)
        return out


def table_view(t: torch.Tensor, shape: tuple[int, ...]) -> tuple[torch.Tensor, int]:
    """A table broadcast to x's `shape` ([..., D]) as a 2D [Q, D] view and the period P with which x's rows walk
    it: row r reads row (r // P) mod Q. The dims the table varies along (size > 1, non-zero stride once expanded)
    must be every dim of size > 1 between the first and the last of them and flatten to one row stride;
    otherwise the table is materialized over x's rows (P = 1)."""
    d = shape[-1]
    full = t.expand(shape)
    lead, strides = shape[:-1], full.stride()[:-1]
    big = [i for i, n in enumerate(lead) if n != 1]
    live = [i for i in big if strides[i] != 0]
    if full.stride(-1) == 1:
        if not live:
            return full.as_strided((1, d), (d, 1)), 1
        lo, hi = live[0], live[-1]
        if [i for i in big if lo <= i <= hi] == live and \
                all(strides[a] == strides[b] * lead[b] for a, b in zip(live, live[1:])):
            return full.as_strided((math.prod(lead[i] for i in live), d), (strides[hi], 1)), math.prod(lead[hi + 1:])
    return full.reshape(-1, d).contiguous(), 1


def rope_apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, config: Mapping[str, int]) -> torch.Tensor:
    """x · cos + rotate_half(x) · sin over x's last dim, cos and sin broadcast to x's shape (what an assembled
    ModelNew calls for a rope region)."""
    shape = tuple(x.shape)
    xc = x if x.is_contiguous() else x.contiguous()
    c, p = table_view(cos, shape)
    s, ps = table_view(sin, shape)
    if ps != p or c.shape != s.shape:   # the two tables broadcast differently: walk both over x's rows
        c, s, p = cos.expand(shape).reshape(-1, shape[-1]).contiguous(), \
            sin.expand(shape).reshape(-1, shape[-1]).contiguous(), 1
    prog = RopeProgram(RopeConfig.from_assignment(config), DTYPE_OF[x.dtype])
    return prog(xc.view(-1, shape[-1]), c, s, p).view(shape)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """The rotate-half RoPE in `dtype` (torch ops)."""
    x, cos, sin = x.to(dtype), cos.to(dtype), sin.to(dtype)
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin
