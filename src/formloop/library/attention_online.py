"""The online-softmax step both attention families run per key tile (the update the proofs name
SoftmaxArithmetic's tile step): scores already masked with −inf, scaled here by log2(e)/√D so that exp2 is
the exponential. This module imports triton."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def online_step(s, v, m_i, l_i, acc, qk_scale, WIDEN: tl.constexpr):
    """(m, l, acc) after one tile of scores s [rows, keys] and values v [keys, D]: the running max, sum and
    accumulator rescaled by exp2(m_old − m_new) and the tile's weights exp2(s·c − m_new) added."""
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)  # scale and shift in one fused multiply-add per score
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s * qk_scale - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if WIDEN:
        acc = tl.dot(p, v.to(tl.float32), acc * alpha[:, None])
    else:
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return m_new, l_i, acc
