"""The Triton kernel of qk-norm-rope-kv (formloop.library.qk_rope) and its references.

Layouts: q [T, Hq, D], k and v [T, Hkv, D] with a contiguous head dim (strided tokens and heads: slices
of a fused QKV projection's output are fine). The caches are [B, L, Hkv, D] or [B, Hkv, L, D] (any
strides, head dim contiguous), or [L, Hkv, D] (B = 1); token t goes to the flat slot slots[t] = b·L + l.
cos/sin are fp32 tables [P, D/2] (HF's: cos(pos · inv_freq), inv_freq = theta^(−2i/D) in fp32), read at
positions[t]. The kernel computes in fp32 and rounds once on store (HF rounds after the norm and
computes RoPE in the model dtype: within the dtype's tolerance of the same math)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from formloop.errors import InvalidInput
from formloop.library.gemm_dot import store_cast
from formloop.library.pdl import launch_options, pdl_launch_dependents, pdl_wait
from formloop.library.qk_rope import HEAD_DIMS, check_rope_tables
from formloop.library.rowwise_kernel import DTYPE_OF, TORCH_DTYPES


@dataclass(frozen=True)
class QkRopeConfig:
    HP: int = 4
    W: int = 4

    @classmethod
    def from_assignment(cls, a: Mapping[str, int]) -> "QkRopeConfig":
        return cls(int(a["HP"]), int(a["W"]))

    def __post_init__(self) -> None:
        for name in ("HP", "W"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise InvalidInput(f"qk-norm-rope-kv {name}", v, "a power of two >= 1")


def rope_tables(max_pos: int, head_dim: int, theta: float = 1e6, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_pos, D/2] in fp32, built as HF's rotary embedding builds them (default rope type)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    freqs = torch.arange(max_pos, device=device).float()[:, None] * inv_freq[None, :]
    return freqs.cos().contiguous(), freqs.sin().contiguous()


@triton.jit
def _qk_rope_kernel(q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, pos_ptr, slot_ptr, qo_ptr, kc_ptr, vc_ptr,
                    Hq, Hkv, st_q, sh_q, st_k, sh_k, st_v, sh_v, st_o, sh_o, Lc, sb_k, sl_k, sh_kc, sb_v, sl_v, sh_vc,
                    s_cs, eps, D: tl.constexpr, HP: tl.constexpr, PDL: tl.constexpr = False):
    if PDL:  # launched as a programmatic dependent (formloop.library.pdl): everything after the wait
        pdl_launch_dependents()
        pdl_wait()
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * HP + tl.arange(0, HP)
    ok = h < Hq + Hkv
    is_k = (h >= Hq) & ok
    hk = tl.where(is_k, h - Hq, 0).to(tl.int64)
    hq = tl.where(h < Hq, h, 0).to(tl.int64)
    d = tl.arange(0, D // 2)
    m = ok[:, None] & (d < D // 2)[None, :]
    src = tl.where(is_k, k_ptr + t * st_k + hk * sh_k, q_ptr + t * st_q + hq * sh_q)
    lo = tl.load(src[:, None] + d[None, :], mask=m, other=0.0).to(tl.float32)
    hi = tl.load(src[:, None] + D // 2 + d[None, :], mask=m, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt((tl.sum(lo * lo, 1) + tl.sum(hi * hi, 1)) / D + eps)
    kk = is_k[:, None]
    w_lo = tl.where(kk, tl.load(kw_ptr + d).to(tl.float32)[None, :], tl.load(qw_ptr + d).to(tl.float32)[None, :])
    w_hi = tl.where(kk, tl.load(kw_ptr + D // 2 + d).to(tl.float32)[None, :],
                    tl.load(qw_ptr + D // 2 + d).to(tl.float32)[None, :])
    lo = lo * rstd[:, None] * w_lo
    hi = hi * rstd[:, None] * w_hi
    pos = tl.load(pos_ptr + t).to(tl.int64)
    c = tl.load(cos_ptr + pos * s_cs + d)[None, :]
    s = tl.load(sin_ptr + pos * s_cs + d)[None, :]
    out_lo = lo * c - hi * s
    out_hi = hi * c + lo * s
    slot = tl.load(slot_ptr + t).to(tl.int64)
    b, l = slot // Lc, slot % Lc
    dst = tl.where(is_k, kc_ptr + b * sb_k + l * sl_k + hk * sh_kc, qo_ptr + t * st_o + hq * sh_o)
    tl.store(dst[:, None] + d[None, :], store_cast(out_lo, qo_ptr), mask=m)
    tl.store(dst[:, None] + D // 2 + d[None, :], store_cast(out_hi, qo_ptr), mask=m)
    vm = kk & (d < D // 2)[None, :]
    vsrc = (v_ptr + t * st_v + hk * sh_v)[:, None] + d[None, :]
    vdst = (vc_ptr + b * sb_v + l * sl_v + hk * sh_vc)[:, None] + d[None, :]
    tl.store(vdst, tl.load(vsrc, mask=vm), mask=vm)
    tl.store(vdst + D // 2, tl.load(vsrc + D // 2, mask=vm), mask=vm)


def _cache_strides(name: str, cache: torch.Tensor, hkv: int, d: int, heads_first: bool) -> tuple[int, int, int, int]:
    """(L, stride of b, stride of l, stride of the head) of a cache [B, L, H, D], [B, H, L, D] or [L, H, D]."""
    if cache.dim() == 3:
        cache = cache.unsqueeze(0)
    if cache.dim() != 4 or cache.stride(-1) != 1:
        raise InvalidInput(f"{name} layout", tuple(cache.shape), "[B, L, Hkv, D], [B, Hkv, L, D] or [L, Hkv, D] "
                           "with a contiguous head dim")
    if heads_first:
        _, h, L, dd = cache.shape
        sb, sh, sl = cache.stride(0), cache.stride(1), cache.stride(2)
    else:
        _, L, h, dd = cache.shape
        sb, sl, sh = cache.stride(0), cache.stride(1), cache.stride(2)
    if (h, dd) != (hkv, d):
        raise InvalidInput(f"{name} shape", tuple(cache.shape), f"{hkv} heads of dim {d}")
    return L, sb, sl, sh


class QkRopeProgram:
    """One instance: a config and the dtype of q, k, v and the caches."""

    def __init__(self, config: QkRopeConfig, dtype: str = "bf16", pdl: bool = False):
        if dtype not in TORCH_DTYPES:
            raise InvalidInput("dtype", dtype, sorted(TORCH_DTYPES))
        self.config, self.dtype, self.pdl = config, dtype, pdl

    def __call__(self, q, k, v, q_weight, k_weight, cos, sin, positions, slots, k_cache, v_cache, *,
                 eps: float = 1e-6, heads_first: bool = False, q_out: torch.Tensor | None = None) -> torch.Tensor:
        """Returns q_out [T, Hq, D]; writes k (normed, rotated) and v into the caches at `slots`."""
        for name, t in (("q", q), ("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
            if t.dtype not in DTYPE_OF or DTYPE_OF[t.dtype] != self.dtype:
                raise InvalidInput(f"{name} dtype", str(t.dtype), [self.dtype])
            if t.stride(-1) != 1:
                raise InvalidInput(f"{name} layout", tuple(t.stride()), "a contiguous head dim")
        if q.dim() != 3 or k.dim() != 3 or v.shape != k.shape or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
            raise InvalidInput("q, k, v shapes", (tuple(q.shape), tuple(k.shape), tuple(v.shape)),
                               "q [T, Hq, D], k and v [T, Hkv, D]")
        T, Hq, D = q.shape
        Hkv = k.shape[1]
        if D not in HEAD_DIMS:
            raise InvalidInput("head dim", D, HEAD_DIMS)
        for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
            if tuple(w.shape) != (D,):
                raise InvalidInput(f"{name} shape", tuple(w.shape), f"[{D}]")
        check_rope_tables(cos, sin, D)
        for name, idx in (("positions", positions), ("slots", slots)):
            if tuple(idx.shape) != (T,) or idx.dtype not in (torch.int32, torch.int64):
                raise InvalidInput(name, (str(idx.dtype), tuple(idx.shape)), f"an int32/int64 vector [{T}]")
        Lc, sbk, slk, shk = _cache_strides("k_cache", k_cache, Hkv, D, heads_first)
        Lv, sbv, slv, shv = _cache_strides("v_cache", v_cache, Hkv, D, heads_first)
        if Lv != Lc:
            raise InvalidInput("v_cache length", Lv, [Lc])
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if q_out is None else q_out
        if tuple(out.shape) != tuple(q.shape) or out.stride(-1) != 1:
            raise InvalidInput("q_out", tuple(out.shape), f"{tuple(q.shape)} with a contiguous head dim")
        cfg = self.config
        grid = (T, triton.cdiv(Hq + Hkv, cfg.HP))
        _qk_rope_kernel[grid](q, k, v, q_weight.contiguous(), k_weight.contiguous(), cos, sin, positions.contiguous(),
                              slots.contiguous(), out, k_cache, v_cache, Hq, Hkv, q.stride(0), q.stride(1),
                              k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1), Lc,
                              sbk, slk, shk, sbv, slv, shv, cos.stride(0), float(eps), D=D, HP=cfg.HP,
                              num_warps=cfg.W, **launch_options(self.pdl))
        return out


def reference_hf(q, k, v, q_weight, k_weight, positions, theta: float = 1e6, eps: float = 1e-6,
                 dtype=torch.float64):
    """HF Qwen3's math in `dtype`: Qwen3RMSNorm per head (q_norm, k_norm), then apply_rotary_pos_emb with
    rotate_half and cos/sin of cat(freqs, freqs); returns (q, k, v) rotated [T, H, D] (v unchanged)."""
    def rms(x, w):
        x = x.to(dtype)
        return w.to(dtype) * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    D = q.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = positions.cpu().float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype)[:, None, :].to(q.device), emb.sin().to(dtype)[:, None, :].to(q.device)
    qn, kn = rms(q, q_weight), rms(k, k_weight)
    return qn * cos + rotate_half(qn) * sin, kn * cos + rotate_half(kn) * sin, v.to(dtype)
