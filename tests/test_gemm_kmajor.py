"""B copied K-major before a tf32/tf32x3 GEMM whose B is stored [K, N] (row): the rule
(gemm_region.kmajor_b), the copy in gemm_chain against the same kernel given the K-major operand
and against float64 (interpreter), and the GEMM region's design for bmm_heads (fp32 and bf16)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.library.fused_gemm import gemm_chain  # noqa: E402
from formloop.optimize.gemm_region import kmajor_b  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CFG = {"Tm": 32, "Tn": 64, "Tk": 64, "S": 2, "W": 4, "KS": 1, "G": 8, "L": 0}
pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter tier")


def test_only_32_bit_tensor_core_operands_stored_row_are_copied():
    big = [8192, 8192, 8192]
    assert kmajor_b("tf32x3", "row", big) and kmajor_b("tf32", "row", big)
    assert not any(kmajor_b(ab, "row", big) for ab in ("bf16", "fp16", "fp32"))
    assert not kmajor_b("tf32x3", "col", big)


def test_the_copy_is_made_only_where_it_costs_less_than_the_tensor_core_time():
    # bmm_heads [128, 512, 2048, 1024]: B is 1.07 GB, the copy ~0.45 ms at 4.8 TB/s, the GEMM 2.75e11 FLOP
    # (~0.56 ms tf32 at 494 TFLOP/s): copied (measured 7762 -> 5315 us in tf32x3)
    assert kmajor_b("tf32", "row", [128, 512, 2048, 1024], "batched_gemm")
    assert kmajor_b("tf32x3", "row", [128, 512, 2048, 1024], "batched_gemm")
    # gemm_skinny 16 x 8192 x 8192: the copy (~0.11 ms) is 6-19x the GEMM's tensor-core time: B stays as it is
    # (measured 78 -> 545 us with the copy)
    assert not kmajor_b("tf32x3", "row", [16, 8192, 8192], "gemm")
    assert not kmajor_b("tf32", "row", [16, 8192, 8192], "gemm")
    # the boundary moves with M: a square 8192^3 GEMM copies
    assert kmajor_b("tf32", "row", [8192, 8192, 8192], "gemm")


@pytest.mark.parametrize("op", ["gemm", "batched_gemm"])
def test_the_copy_gives_the_kernels_own_result_on_the_k_major_operand(op):
    g = torch.Generator().manual_seed(3)
    shape_a, shape_b = ((3, 32, 128), (3, 128, 72)) if op == "batched_gemm" else ((32, 128), (128, 72))
    a, b = torch.randn(shape_a, generator=g), torch.randn(shape_b, generator=g)
    copied = gemm_chain(a, b, op=op, ab="tf32x3", lb="row", config=CFG, b_kmajor=True, chain="relu")
    given = gemm_chain(a, b.transpose(-1, -2).contiguous(), op=op, ab="tf32x3", lb="col", config=CFG, chain="relu")
    assert torch.equal(copied, given)                      # the same kernel on the same K-major bytes
    truth = torch.relu(a.double() @ b.double())
    assert float((copied.double() - truth).norm() / truth.norm()) < 1e-6
    col = gemm_chain(a, b.transpose(-1, -2).contiguous(), op=op, ab="tf32x3", lb="col", config=CFG, chain="relu",
                     b_kmajor=True)                        # a col b is left as it is
    assert torch.equal(col, given)


@pytest.mark.parametrize("dtype,expect,small", [(None, True, False), (torch.bfloat16, False, False),
                                                (None, False, True)])
def test_the_bmm_region_reads_b_k_major_at_fp32_only(dtype, expect, small):
    from formloop.optimize.capture import capture
    from formloop.optimize.gemm_region import choose, match
    from formloop.sol.problem import load_problem

    # full size: captured on shapes (no data); SMALL (16 x 64 x 64 x 128): the copy would cost more than the GEMM
    cap = capture(load_problem(ROOT / "problems" / "level1" / "bmm_heads.py", small=small), dtype)
    node = next(n for n in cap.gm.graph.nodes if n.op == "call_function" and n.target is torch.bmm)
    region = match(node, cap, set())
    design = choose(region, tier="gpu")
    if expect:
        assert design["ab"] in ("tf32", "tf32x3") and design.get("b_kmajor") is True
        assert f"b = {design['ab']} col" in design["spec"] and any("K-major" in n for n in region.notes)
    elif dtype is None:
        assert design["ab"] in ("tf32", "tf32x3") and "b_kmajor" not in design
        assert f"b = {design['ab']} row" in design["spec"]
    else:
        assert design["ab"] == "bf16" and "b_kmajor" not in design and "b = bf16 row" in design["spec"]
