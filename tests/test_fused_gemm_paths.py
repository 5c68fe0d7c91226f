"""The load path of an assembled ModelNew's GEMM call (formloop.library.fused_gemm.gemm_chain), per call:
a TMA design (L=1) takes the pointer path where the copy engine cannot take an operand (ragged row
pitch, unaligned base or batch stride), and operands with strided rows are read densely -- at every
shape and layout the problem's Model accepts the output is right (float64 reference, KernelBench's
allclose), never garbage. Interpreter, small shapes (tensor descriptors run in Triton 3.6's interpreter)."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library import fused_gemm  # noqa: E402
from formloop.library.fused_gemm import gemm_chain, load_path  # noqa: E402

# gemm_bf16's attempt 0 on the H200 (the MILP's design at 4096^3, bf16, lb=row; the optimize store's record)
BF16_DESIGN = {"Tm": 128, "Tn": 256, "Tk": 64, "S": 4, "W": 8, "KS": 1, "G": 8, "L": 1}
SMALL_TMA = {"Tm": 64, "Tn": 64, "Tk": 32, "S": 2, "W": 4, "KS": 1, "G": 8, "L": 1}


def _bad(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements outside KernelBench's allclose (atol = rtol = 0.01) of the float64 product."""
    ref = a.double() @ b.double()
    return int((~torch.isclose(out.double(), ref, atol=0.01, rtol=0.01)).sum())


def _paths() -> set[int]:
    return {dict(config)["L"] for _, config, _ in fused_gemm._PLANS}


def test_load_path_per_call_at_unaligned_pitches():
    g = torch.Generator().manual_seed(0)

    def m(rows, cols):
        return torch.randn(rows, cols, generator=g).bfloat16()
    assert load_path(BF16_DESIGN, m(64, 64), m(64, 256)) == 1
    assert load_path(BF16_DESIGN, m(64, 64), m(64, 257)) == 0            # N = 257: B's pitch 514 B
    assert load_path(BF16_DESIGN, m(64, 65), m(65, 256)) == 0            # K = 65: A's pitch 130 B
    assert load_path(BF16_DESIGN, m(64, 72)[:, 1:65], m(64, 256)) == 0   # base 2 B past 16-byte alignment
    assert load_path({**BF16_DESIGN, "L": 0}, m(64, 64), m(64, 256)) == 0
    batched = torch.randn(2, 32 * 64 + 1, generator=g).bfloat16()[:, :32 * 64].reshape(2, 32, 64)
    assert batched.stride() == (2049, 64, 1)   # rows aligned, the batch stride (4098 B) is not
    assert load_path(BF16_DESIGN, batched, m(64, 64).expand(2, 64, 64).contiguous()) == 0


def test_gemm_bf16_design_is_right_at_a_ragged_n_and_at_the_aligned_one():
    """The shape probe's case at small size: N = 257 (B and C pitches not 16-byte multiples) runs the
    pointer path with the design's tiles; N = 256 the TMA path. Both right against float64."""
    g = torch.Generator().manual_seed(1)
    fused_gemm._PLANS.clear()
    for n, path in ((257, 0), (256, 1)):
        a, b = torch.randn(128, 64, generator=g).bfloat16(), torch.randn(64, n, generator=g).bfloat16()
        out = gemm_chain(a, b, op="gemm", ab="bf16", c="bf16", lb="row", config=BF16_DESIGN)
        assert out.shape == (128, n) and _bad(out, a, b) == 0, n
        assert path in _paths()
    # an nn.Linear weight [N, K] with N = 257: A and W aligned (TMA loads), C's pitch ragged (pointer stores)
    fused_gemm._PLANS.clear()
    a, w = torch.randn(64, 64, generator=g).bfloat16(), torch.randn(257, 64, generator=g).bfloat16()
    out = gemm_chain(a, w, ab="bf16", c="bf16", lb="col", config=SMALL_TMA)
    assert _bad(out, a, w.T) == 0 and _paths() == {1}


def test_strided_b_rows_are_read_dense():
    """`a @ b` with b a transposed view (the Model accepts it): the kernels read B's stored rows with
    unit stride, so b is copied dense first (before: 16258 of 16384 elements wrong)."""
    g = torch.Generator().manual_seed(2)
    a = torch.randn(64, 64, generator=g).bfloat16()
    b = torch.randn(256, 64, generator=g).bfloat16().t()
    assert b.stride() == (1, 64)
    for cfg in (BF16_DESIGN, {**BF16_DESIGN, "L": 0}):
        assert _bad(gemm_chain(a, b, ab="bf16", c="bf16", lb="row", config=cfg), a, b) == 0
    w = torch.randn(64, 96, generator=g).bfloat16().t()    # an nn.Linear-style weight [N, K], strided
    out = gemm_chain(a, w, ab="bf16", c="bf16", lb="col", config=SMALL_TMA)
    assert _bad(out, a, w.T) == 0


def test_batched_tma_design_with_an_unaligned_batch_stride_takes_the_pointer_path():
    """(before: the TMA descriptor's AssertionError 'strides must be 16-byte aligned')"""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 32 * 64 + 1, generator=g).bfloat16()[:, :32 * 64].reshape(2, 32, 64)
    b = torch.randn(2, 64, 64, generator=g).bfloat16()
    fused_gemm._PLANS.clear()
    out = gemm_chain(a, b, op="batched_gemm", ab="bf16", c="bf16", lb="row", config=SMALL_TMA)
    assert _bad(out, a, b) == 0 and _paths() == {0}


def test_a_plan_refuses_operands_with_strided_rows():
    from formloop.library.gemm_epilogue_emit import KernelSpec, Shape
    from formloop.library.gemm_epilogue_kernel import EpiloguePlan, new_output
    from formloop.library.gemm_tiling_kernel import TileConfig

    spec = KernelSpec(op="gemm", ab="bf16", c="bf16", la="row", lb="row", lc="row", chain=(), name="fused_gemm")
    plan = EpiloguePlan(spec, TileConfig(**{**SMALL_TMA, "L": 0}), Shape(64, 64, 64))
    a = torch.randn(64, 64).bfloat16()
    with pytest.raises(InvalidInput, match="operand b"):
        plan.launch({"a": a, "b": torch.randn(64, 64).bfloat16().t()}, new_output(plan, "cpu"))
