"""Flash attention over fp32 storage ("attention-fp32"): causal or full, grouped-query, any lengths,
any head dim up to 256; the dots in a compute precision chosen by an error bound
(formloop.library.attention_fp32.precision_for): "ieee", "tf32" or "tf32x3" (3×TF32, ~fp32 accurate).
Also 16-bit storage (bf16, fp16; q, K and V of one type): the tiles are loaded in their type, both dots
run on the 16-bit tiles with fp32 accumulation (the probabilities rounded to V's type before P·V, as
in the proved prefill family), and the output is stored in q's type. Triton's interpreter computes
16-bit dots wrongly, so there (TRITON_INTERPRET=1) the 16-bit tiles are widened to fp32 before each
dot, P still rounded to V's type first: the same values, the dot done in fp32.

Layout: q [B, Hq, Lq, D], K and V [B, Hkv, Lk, D] with any strides (views of a fused qkv
projection are read in place), out [B, Hq, Lq, D] contiguous. G = Hq / Hkv query heads share one
key/value head (head h reads head h // G, PyTorch's enable_gqa / repeat_interleave order).

Program (b, a, blk) owns Br packed rows of key/value head a: row r in [0, G·Lq) is query position
r % Lq of query head a·G + r // Lq. Decode (Lq = 1) packs the G heads of a group into one tile, so
the K/V tiles are read once per group; prefill rows stay within one head. Keys are walked in tiles
of Bc: phase 1 over [0, lo) unmasked, phase 2 over [lo, hi) masked (k ≤ position when causal, k < Lk),
where lo is the last whole tile below every row's first masked key and hi = min(Lk, max position + 1)
for causal rows (top-left aligned, torch's is_causal). Each step is the online-softmax update
with exp2 and scale·log2(e) folded into the scores. Blocks are launched longest first.

Not the proved bf16 program of attention-prefill (formloop.library.attention_prefill_kernel): its
decisions Br, Bc, S, W are chosen by that template's MILP rebound to fp32 storage
(attention_fp32.choose_config), but the walk here is checked by tests against an fp64 reference,
not by the template's proofs. Imports triton and torch."""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from formloop.errors import InvalidInput
from formloop.library.gemm_dot import store_cast

LOG2E = 1.4426950408889634
PRECISIONS = ("ieee", "tf32", "tf32x3")
STORAGE = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _tile(src, off, keys, d, sl, sd, Lk, DH, KEY_MASK: tl.constexpr, DMASK: tl.constexpr):
    ptrs = src + off + keys[:, None].to(tl.int64) * sl + d[None, :] * sd
    if KEY_MASK:
        mask = (keys < Lk)[:, None] & (d < DH)[None, :]
        return tl.load(ptrs, mask=mask, other=0.0)
    elif DMASK:
        return tl.load(ptrs, mask=(d < DH)[None, :], other=0.0)
    else:
        return tl.load(ptrs)


@triton.jit
def _steps(q, k_ptr, v_ptr, k_off, v_off, skl, skd, svl, svd, m_i, l_i, acc, lo, hi, pos, Lk, DH, qk_scale,
           MASKED: tl.constexpr, CAUSAL: tl.constexpr, DMASK: tl.constexpr,
           BC: tl.constexpr, DP: tl.constexpr, PREC: tl.constexpr, LOWP: tl.constexpr, WIDEN: tl.constexpr):
    cols = tl.arange(0, BC)
    d = tl.arange(0, DP)
    for start in range(lo, hi, BC):
        keys = start + cols
        k = _tile(k_ptr, k_off, keys, d, skl, skd, Lk, DH, MASKED, DMASK)
        v = _tile(v_ptr, v_off, keys, d, svl, svd, Lk, DH, MASKED, DMASK)
        if WIDEN:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        if MASKED:
            ok = (keys < Lk)[None, :]
            if CAUSAL:
                ok = ok & (keys[None, :] <= pos[:, None])
            s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if LOWP:   # P rounded to V's type, the 16-bit dot (widened in the interpreter, same values)
            if WIDEN:
                acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc * alpha[:, None],
                             input_precision=PREC)
            else:
                acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PREC)
        else:
            acc = tl.dot(p, v, acc * alpha[:, None], input_precision=PREC)
        m_i = m_new
    return m_i, l_i, acc


@triton.jit(do_not_specialize=["Lq", "Lk", "Hq", "Hkv", "DH"])
def _fp32_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr,
                           sqb, sqh, sql, sqd, skb, skh, skl, skd, svb, svh, svl, svd,
                           Lq, Lk, Hq, Hkv, DH, qk_scale,
                           G: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, DP: tl.constexpr,
                           CAUSAL: tl.constexpr, DMASK: tl.constexpr, PREC: tl.constexpr,
                           LOWP: tl.constexpr, WIDEN: tl.constexpr):
    ba = tl.program_id(0)
    nblk = tl.cdiv(G * Lq, BR)
    blk = nblk - 1 - tl.program_id(1)          # longest (latest positions) first
    b = ba // Hkv
    a = ba % Hkv
    r = blk * BR + tl.arange(0, BR)
    valid = r < G * Lq
    head = a * G + r // Lq
    pos = r % Lq
    d = tl.arange(0, DP)
    q_rows = b.to(tl.int64) * sqb + head.to(tl.int64) * sqh + pos.to(tl.int64) * sql
    q = tl.load(q_ptr + q_rows[:, None] + d[None, :] * sqd, mask=valid[:, None] & (d < DH)[None, :], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)
    k_off = b.to(tl.int64) * skb + a.to(tl.int64) * skh
    v_off = b.to(tl.int64) * svb + a.to(tl.int64) * svh
    m_i = tl.full((BR,), float("-inf"), tl.float32)
    l_i = tl.zeros((BR,), tl.float32)
    acc = tl.zeros((BR, DP), tl.float32)
    if CAUSAL:
        first = tl.min(tl.where(valid, pos, Lq), 0)
        hi = tl.minimum(Lk, tl.max(tl.where(valid, pos, 0), 0) + 1)
        lo = tl.minimum(first // BC * BC, hi // BC * BC)
    else:
        hi = Lk
        lo = Lk // BC * BC
    m_i, l_i, acc = _steps(q, k_ptr, v_ptr, k_off, v_off, skl, skd, svl, svd, m_i, l_i, acc, 0, lo, pos, Lk, DH,
                           qk_scale, False, CAUSAL, DMASK, BC, DP, PREC, LOWP, WIDEN)
    m_i, l_i, acc = _steps(q, k_ptr, v_ptr, k_off, v_off, skl, skd, svl, svd, m_i, l_i, acc, lo, hi, pos, Lk, DH,
                           qk_scale, True, CAUSAL, DMASK, BC, DP, PREC, LOWP, WIDEN)
    out = acc / l_i[:, None]
    o_rows = ((b * Hq + head).to(tl.int64) * Lq + pos) * DH
    tl.store(o_ptr + o_rows[:, None] + d[None, :], store_cast(out, o_ptr),
             mask=valid[:, None] & (d < DH)[None, :])


def fp32_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                   scale: float | None = None, config: dict | None = None, precision: str = "tf32x3",
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q·Kᵀ·scale [causal]) · V for q [B, Hq, Lq, D], K, V [B, Hkv, Lk, D] of one storage type
    (fp32, bf16 or fp16; out in that type); scale defaults to 1/√D. `config`: Br, Bc (powers of two
    >= 16), W warps, S stages. `precision` is the fp32 dots' input precision; 16-bit dots take the
    tensor cores' own (Triton's default, as the prefill family), or ieee when widened in the interpreter."""
    cfg = {"Br": 64, "Bc": 64, "W": 4, "S": 2, **(config or {})}
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise InvalidInput("attention operands", [tuple(q.shape), tuple(k.shape), tuple(v.shape)],
                           "4-d [B, H, L, D] tensors")
    B, Hq, Lq, D = q.shape
    Bk, Hkv, Lk, Dk = k.shape
    if tuple(v.shape) != (Bk, Hkv, Lk, Dk) or Bk != B or Dk != D:
        raise InvalidInput("K/V shape", [tuple(k.shape), tuple(v.shape)], f"[{B}, Hkv, Lk, {D}] for both")
    if Hkv == 0 or Hq % Hkv:
        raise InvalidInput("heads", (Hq, Hkv), "Hq a multiple of Hkv")
    if Lk == 0 or D == 0 or D > 256:
        raise InvalidInput("Lk, D", (Lk, D), "Lk >= 1, 1 <= D <= 256")
    if q.dtype not in STORAGE or k.dtype != q.dtype or v.dtype != q.dtype:
        raise InvalidInput("dtype", [str(t.dtype) for t in (q, k, v)],
                           "one of torch.float32, torch.bfloat16, torch.float16 for q, K and V alike")
    if precision not in PRECISIONS:
        raise InvalidInput("precision", precision, PRECISIONS)
    lowp = q.dtype != torch.float32
    if lowp:
        precision = "ieee" if INTERPRETED else "tf32"
    for name in ("Br", "Bc"):
        if cfg[name] < 16 or cfg[name] & (cfg[name] - 1):
            raise InvalidInput(name, cfg[name], "a power of two >= 16")
    if out is None:
        out = torch.empty((B, Hq, Lq, D), device=q.device, dtype=q.dtype)
    if out.numel() == 0:
        return out
    dp = max(16, triton.next_power_of_2(D))
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    g = Hq // Hkv
    grid = (B * Hkv, triton.cdiv(g * Lq, cfg["Br"]))
    _fp32_attention_kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), Lq, Lk, Hq, Hkv, D,
                                 scale * LOG2E, G=g, BR=cfg["Br"], BC=cfg["Bc"], DP=dp, CAUSAL=bool(causal),
                                 DMASK=dp != D, PREC=precision, LOWP=lowp,
                                 WIDEN=lowp and INTERPRETED, num_warps=cfg["W"], num_stages=cfg["S"])
    return out
