"""Transform stages around a gemm-epilogue kernel (a spec's `pipeline(...)`): one strided copy
that converts the dtype and, for a transpose, writes the other layout. Both sides are logical
[batch,] rows × cols views; only their strides differ."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from formloop.library.gemm_dot import store_cast

BLOCK = 64


@triton.jit
def _convert_kernel(src, dst, R, C, s_b, s_r, s_c, d_b, d_r, d_c, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (r < R)[:, None] & (c < C)[None, :]
    x = tl.load(src + b * s_b + r[:, None] * s_r + c[None, :] * s_c, mask=ok)
    tl.store(dst + b * d_b + r[:, None] * d_r + c[None, :] * d_c, store_cast(x, dst), mask=ok)


def _as_3d(t: torch.Tensor) -> tuple[int, int, int, tuple[int, int, int]]:
    """(batch, rows, cols, strides) of a matrix view; a 4-D NHWC tensor is [n·h·w, c]."""
    if t.dim() == 4:
        t = t.reshape(-1, t.shape[-1])
    if t.dim() == 2:
        return 1, t.shape[0], t.shape[1], (0, t.stride(0), t.stride(1))
    return t.shape[0], t.shape[1], t.shape[2], (t.stride(0), t.stride(1), t.stride(2))


def convert(src: torch.Tensor, dst: torch.Tensor) -> None:
    """dst[...] = src[...] converted to dst's dtype, whatever the two layouts are."""
    if tuple(src.shape) != tuple(dst.shape):
        raise ValueError(f"stage shapes differ: {tuple(src.shape)} vs {tuple(dst.shape)}")
    nb, rows, cols, s = _as_3d(src)
    _, _, _, d = _as_3d(dst)
    grid = (triton.cdiv(rows, BLOCK), triton.cdiv(cols, BLOCK), nb)
    _convert_kernel[grid](src, dst, rows, cols, *s, *d, BLOCK_R=BLOCK, BLOCK_C=BLOCK)
