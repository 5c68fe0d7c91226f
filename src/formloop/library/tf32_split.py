"""3×TF32 as one TF32 GEMM over a tripled K: the operands split once, before the GEMM, into the parts
the tensor cores read exactly.

x = hi + lo + r with hi = tf32(x) and lo = tf32(x − hi) (each rounded to 10 mantissa bits, ties away
from zero: PTX cvt.rna), |r| ≤ 2^-22·|x|. Then

    a·b ≈ a_lo·b_hi + a_hi·b_lo + a_hi·b_hi = [a_lo | a_hi | a_hi] · [b_hi ; b_lo ; b_hi]

(the dropped a_lo·b_lo is ≤ 2^-22 of the product): one GEMM with K' = 3K on tf32-exact operands, whose
products are exact in fp32 and which the tensor cores run at the TF32 rate with both operands streamed
from shared memory; the small products come first, summed while the accumulator is still small. The
pre-pass reads each operand once and writes it three times (16 bytes per element in all). Triton's own
tf32x3 (the F32DotTC pass) splits inside the main loop instead: every k-tile, in registers, its three
dots started from zero and the tile's sum added to the accumulator in fp32.

Measured on the H200 (benchmarks/fp32_gemm.py, RESULTS.md) and not chosen by the GEMM region: the
pre-split GEMM runs 7-11 % faster than the in-loop split at 8192-16384 rows and columns, but its error
is 40x larger (9.6e-6 relative at K = 4096 with the small products first, 4.2e-5 with hi·hi first,
against 2.4e-7 in the loop and 1.2e-6 for cuBLAS fp32): the tensor cores add each MMA's products into
the accumulator they are given with fewer bits than an fp32 add, and here one accumulator runs through
all 3K/8 MMAs.

`split3(x, axis, parts)` returns the tripled operand: `axis` is the K axis of the tensor as given
(-1: [.., R, K] with K tripled along the last dim; -2: [.., K, C]), `parts` the order of the three
blocks along K (A_PARTS = (lo, hi, hi), B_PARTS = (hi, lo, hi)). NaN and ±inf keep their hi and give
lo = 0 (Triton's split drops the NaNs of its small part the same way). The result is contiguous."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from formloop.errors import InvalidInput
from formloop.library.gemm_dot import _tf32_round

A_PARTS = (1, 0, 0)   # [a_lo | a_hi | a_hi]
B_PARTS = (0, 1, 0)   # [b_hi ; b_lo ; b_hi]
BLOCK_R, BLOCK_C = 32, 128


@triton.jit
def _split3_kernel(x_ptr, out_ptr, R, C, K3_STRIDE, sxb, sxr, sxc, sob, sor, soc,
                   P0: tl.constexpr, P1: tl.constexpr, P2: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # x [batch, R, C]; out [batch, R, C] three times over, block j at j·K3_STRIDE elements (the K axis)
    pid_r, pid_c, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    mask = (r < R) & (c < C)
    x = tl.load(x_ptr + b.to(tl.int64) * sxb + r * sxr + c * sxc, mask=mask, other=0.0)
    hi = _tf32_round(x)
    lo = x - hi
    lo = tl.where(lo != lo, 0.0, _tf32_round(lo))    # NaN/inf: the small part dropped
    base = out_ptr + b.to(tl.int64) * sob + r * sor + c * soc
    tl.store(base, hi if P0 == 0 else lo, mask=mask)
    tl.store(base + K3_STRIDE, hi if P1 == 0 else lo, mask=mask)
    tl.store(base + 2 * K3_STRIDE, hi if P2 == 0 else lo, mask=mask)


def split3(x: torch.Tensor, axis: int, parts: tuple[int, int, int]) -> torch.Tensor:
    """x (fp32, 2 or 3 dims) with its K axis (`axis`: -1 or -2) tripled as `parts` (0 hi, 1 lo)."""
    if x.dtype != torch.float32:
        raise InvalidInput("tf32 split operand dtype", str(x.dtype), "torch.float32")
    if x.dim() not in (2, 3):
        raise InvalidInput("tf32 split operand dims", x.dim(), "2 or 3")
    if axis not in (-1, -2):
        raise InvalidInput("tf32 split axis", axis, "-1 or -2 (the K axis)")
    if tuple(parts) not in (A_PARTS, B_PARTS):
        raise InvalidInput("tf32 split parts", parts, [A_PARTS, B_PARTS])
    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    batch, R, C = x3.shape
    shape = list(x3.shape)
    shape[axis] *= 3
    out = torch.empty(shape, device=x.device, dtype=torch.float32)
    if batch * R * C * 3 >= 2 ** 31:
        raise InvalidInput("tf32 split operand elements (tripled)", batch * R * C * 3,
                           "below 2^31 (the kernel's offsets are 32-bit)")
    k3 = C if axis == -1 else R * C   # block j starts j·C columns (out [b, R, 3C]) or j·C·R elements in
    grid = (triton.cdiv(R, BLOCK_R), triton.cdiv(C, BLOCK_C), batch)
    _split3_kernel[grid](x3, out, R, C, k3, *x3.stride(), *out.stride(), *parts,
                         BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C, num_warps=4)
    return out if x.dim() == 3 else out.squeeze(0)


def split_bytes(m: int, n: int, k: int, batch: int = 1, b_batch: int = 1) -> int:
    """DRAM bytes of the two pre-passes: each operand element read once and written three times
    (`batch` A matrices [m, k], `b_batch` B matrices [k, n])."""
    return 16 * k * (batch * m + b_batch * n)
