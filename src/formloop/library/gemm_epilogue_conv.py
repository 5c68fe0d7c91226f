"""The implicit-GEMM convolution's part of the emitted gemm-epilogue kernel (operation `conv2d`,
formloop.library.gemm_epilogue_emit): its runtime arguments, its constexpr and the Triton lines that
find A's rows in the NHWC input.

Row m of A is output pixel (n, p, q); column k is filter tap (r, s) = divmod(k // C, FS) and
channel k % C; the element is x[n, p·SH − PH + r·DH, q·SW − PW + s·DW, c], zero outside the image.
With TAP_BLOCKS (C a multiple of BLOCK_K, so every K block lies inside one tap) the tap and the
image-edge mask are found once per row and A's tile is BLOCK_M contiguous runs of BLOCK_K channels
(vector loads: ALIGN divides C); otherwise every element finds its own (r, s, c)."""
from __future__ import annotations

ARGS = ("H", "W", "C", "P", "Q", "FR", "FS", "SH", "SW", "PH", "PW", "DH", "DW")
CONSTEXPRS = ("TAP_BLOCKS",)

SETUP = ["rmw = rm % M", "q_i = rmw % Q", "p_i = (rmw // Q) % P", "n_i = rmw // (Q * P)",
         "h0 = p_i * SH - PH", "w0 = q_i * SW - PW", "x_row = n_i.to(tl.int64) * (H * W * C)"]

LOADS = ["if TAP_BLOCKS:",
         "    tap = k // C",
         "    h = h0 + (tap // FS) * DH",
         "    w = w0 + (tap % FS) * DW",
         "    row_ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)",
         "    a_row = tl.multiple_of(x_row + (h * W + w) * C + k % C, ALIGN)",
         "    a = tl.load(a_ptr + a_row[:, None] + rk[None, :], mask=row_ok[:, None], other=0.0)",
         "else:",
         "    kk = k + rk", "    c_i = kk % C", "    s_i = (kk // C) % FS", "    r_i = kk // (C * FS)",
         "    h = h0[:, None] + (r_i * DH)[None, :]", "    w = w0[:, None] + (s_i * DW)[None, :]",
         "    a_ok = k_ok[None, :] & (h >= 0) & (h < H) & (w >= 0) & (w < W)",
         "    a = tl.load(a_ptr + x_row[:, None] + ((h * W + w) * C + c_i[None, :]), mask=a_ok, other=0.0)"]


def tap_blocks(channels: int, block_k: int) -> bool:
    """Every K block of `block_k` lies inside one filter tap."""
    return channels % block_k == 0
