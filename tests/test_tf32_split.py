"""tf32x3 as one TF32 GEMM over the operands split before it (formloop.library.tf32_split): the split
against the same rounding done in torch on the bits, the GEMM through gemm_chain(presplit=True) against
float64 (interpreter)."""
from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.fused_gemm import gemm_chain  # noqa: E402
from formloop.library.tf32_split import A_PARTS, B_PARTS, split3  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tier")


def _rna(x: torch.Tensor) -> torch.Tensor:
    """x rounded to tf32 (10 mantissa bits, ties away from zero) in torch integer arithmetic."""
    return ((x.view(torch.int32) + 0x1000) & -8192).view(torch.float32)


def _parts(x: torch.Tensor):
    hi = _rna(x)
    lo = _rna(x - hi)
    return hi, torch.where(lo.isnan(), torch.zeros_like(lo), lo)


def test_split_blocks_are_the_rounded_parts_in_order_and_special_values_keep_hi():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, 70, generator=g) * 100
    a[0, 0], a[1, 1], a[2, 2] = float("inf"), float("nan"), -float("inf")
    hi, lo = _parts(a)
    out = split3(a, -1, A_PARTS)                               # [a_lo | a_hi | a_hi]
    assert out.shape == (37, 210) and out.is_contiguous()
    assert torch.equal(out[:, :70], lo)
    for j in (1, 2):
        assert torch.equal(out[:, 70 * j:70 * (j + 1)].nan_to_num(), hi.nan_to_num())
    assert out[0, 70] == float("inf") and out[0, 0] == 0 and out[1, 71].isnan() and out[1, 1] == 0
    b = torch.randn(3, 50, 33, generator=g)[:, :, :31]         # strided rows, K along dim -2
    hi, lo = _parts(b)
    out = split3(b, -2, B_PARTS)                               # [b_hi ; b_lo ; b_hi]
    assert out.shape == (3, 150, 31)
    assert torch.equal(out[:, :50], hi) and torch.equal(out[:, 50:100], lo) and torch.equal(out[:, 100:], hi)
    assert torch.equal(hi + lo, b) or float((hi + lo - b).abs().max()) <= 2.0 ** -22 * float(b.abs().max())


@pytest.mark.parametrize("lb", ["col", "row"])
def test_presplit_gemm_chain_is_fp32_accurate(lb):
    g = torch.Generator().manual_seed(1)
    M, N, K = 48, 64, 256
    a = torch.randn(2, M // 2, K, generator=g)
    b = torch.randn((N, K) if lb == "col" else (K, N), generator=g) / math.sqrt(K)
    bias = torch.randn(N, generator=g)
    cfg = {"Tm": 64, "Tn": 64, "Tk": 64, "S": 2, "W": 4, "KS": 1, "G": 8, "L": 0}
    bm = b.double().T if lb == "col" else b.double()
    truth = torch.relu(a.double() @ bm + bias.double())
    for presplit, ab in ((True, "tf32x3"), (False, "tf32")):
        c = gemm_chain(a, b, ab=ab, lb=lb, chain="bias(axis=row,name=bias) >> relu", config=cfg,
                       tensors={"bias": bias}, presplit=presplit)
        err = float((c.double() - truth).norm() / truth.norm())
        assert c.shape == (2, M // 2, N)
        if presplit:
            assert err < 1e-6, err
        else:
            assert err > 1e-4, err      # plain tf32 (truncated operands): the split is what makes it accurate


def test_presplit_batched_gemm():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(3, 32, 128, generator=g), torch.randn(3, 128, 40, generator=g)
    cfg = {"Tm": 32, "Tn": 64, "Tk": 64, "S": 2, "W": 4, "KS": 1, "G": 8, "L": 0}
    c = gemm_chain(a, b, op="batched_gemm", ab="tf32x3", lb="row", config=cfg, presplit=True)
    truth = a.double() @ b.double()
    assert float((c.double() - truth).norm() / truth.norm()) < 1e-6


def test_bad_split_inputs_are_named_errors():
    x = torch.randn(8, 8)
    with pytest.raises(InvalidInput, match="dtype"):
        split3(x.double(), -1, A_PARTS)
    with pytest.raises(InvalidInput, match="axis"):
        split3(x, 0, A_PARTS)
    with pytest.raises(InvalidInput, match="parts"):
        split3(x, -1, (0, 0, 0))
    with pytest.raises(InvalidInput, match="presplit"):
        gemm_chain(x, x, ab="tf32", config={"Tm": 16, "Tn": 16, "Tk": 16}, presplit=True)
