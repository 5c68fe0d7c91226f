"""bf16 stores under the interpreter round to nearest even (gemm_dot.store_cast), as compiled kernels do:
a kernel's bf16 output against torch's own rounding of the same fp32 values, bit for bit, and the rope
kernel's bf16 output against torch's fp32 math rounded once."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from formloop.library.gemm_dot import store_cast  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tier")


@triton.jit
def _copy(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(y_ptr + i, store_cast(tl.load(x_ptr + i, mask=i < N), y_ptr), mask=i < N)


def _bf16_grid() -> torch.Tensor:
    """fp32 values around bf16 rounding boundaries: exact halves (ties to even both ways), just above and
    below them, random values, signs, zero, inf and nan."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(200, generator=g).to(torch.bfloat16).float()
    ulp_half = (base.abs().view(torch.int32) & 0x7F800000).view(torch.float32) * 2.0 ** -8
    vals = [base + ulp_half, base - ulp_half, base + ulp_half * 1.01, base + ulp_half * 0.99,
            torch.randn(200, generator=g), torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 3.0e38])]
    return torch.cat(vals)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_store_cast_rounds_as_torch_does(dtype):
    x = _bf16_grid()
    y = torch.empty(x.numel(), dtype=dtype)
    _copy[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    assert torch.equal(y.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       x.to(dtype).view(torch.int16 if dtype != torch.float32 else torch.int32))
    nan = torch.full((4,), float("nan"))
    out = torch.empty(4, dtype=dtype)
    _copy[(1,)](nan, out, 4, BLOCK=4)
    assert out.isnan().all()


def test_bf16_rope_is_fp32_math_rounded_once():
    from formloop.library.rope_kernel import RopeConfig, RopeProgram

    g = torch.Generator().manual_seed(1)
    x = torch.randn(48, 64, generator=g).to(torch.bfloat16)
    ang = torch.rand(48, 32, generator=g) * 6.0
    cos = torch.cat((ang.cos(), ang.cos()), -1).to(torch.bfloat16)
    sin = torch.cat((ang.sin(), ang.sin()), -1).to(torch.bfloat16)
    out = RopeProgram(RopeConfig(4, 4), "bf16")(x, cos, sin)
    xf, cf, sf = x.float(), cos.float(), sin.float()
    lo, hi = xf[:, :32], xf[:, 32:]
    want = torch.cat((lo * cf[:, :32] - hi * sf[:, :32], hi * cf[:, 32:] + lo * sf[:, 32:]), -1).to(torch.bfloat16)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
