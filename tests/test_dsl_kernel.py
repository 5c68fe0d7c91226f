"""gemm-epilogue kernels in Triton's interpreter at tiny ragged shapes: every epilogue operation,
every layout and load path, batches, split-K and the implicit-GEMM convolution, each against a
float64 torch reference on the same inputs with NaN-poisoned outputs.

fp32 outputs keep the tolerance tight (1e-4), so that a wrong operation (gelu's tanh form for its
erf form, a sign, a missed bias) fails; the mutation test checks that it does."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.evaluate.gpu import check  # noqa: E402
from formloop.library.gemm_epilogue_emit import Conv2d, KernelSpec, Shape  # noqa: E402
from formloop.library.gemm_epilogue_kernel import EpilogueGemm, EpiloguePlan, new_inputs  # noqa: E402
from formloop.library.gemm_epilogue_ops import KINDS, make_op  # noqa: E402
from formloop.library.gemm_epilogue_stage import convert  # noqa: E402
from formloop.library.gemm_tiling_kernel import TileConfig  # noqa: E402

SMALL = TileConfig(16, 32, 32, S=2, W=4, KS=1, G=8, L=0)


def _check(spec: KernelSpec, cfg: TileConfig, shape: Shape, seed: int = 0):
    inst = EpilogueGemm(EpiloguePlan(spec, cfg, shape))
    result = check(inst, "cpu", torch.Generator().manual_seed(seed))
    assert result.all_written, "an output element was never written"
    return result


ELEMENTWISE = [("relu", []), ("gelu", ["erf"]), ("gelu", ["tanh"]), ("silu", []), ("sigmoid", []), ("tanh", []),
               ("leaky_relu", [0.2]), ("hardtanh", [-0.5, 0.7]), ("clamp", [-0.3]), ("softplus", [2.0, 5.0]),
               ("mish", []), ("scale", [-1.5]), ("cast", ["bf16"])]


@pytest.mark.parametrize("kind,args", ELEMENTWISE, ids=[f"{k}{a}" for k, a in ELEMENTWISE])
def test_each_elementwise_operation_matches_torch(kind, args):
    spec = KernelSpec(c="fp32", chain=(make_op("bias", ["row"]), make_op(kind, args)), name="ew")
    r = _check(spec, SMALL, Shape(33, 40, 48))
    assert r.passed, (kind, r)


def test_every_operation_kind_is_exercised():
    used = {k for k, _ in ELEMENTWISE} | {"bias", "add", "mul", "softmax", "logsumexp", "glu"}
    assert used == set(KINDS)


@pytest.mark.parametrize("kernel_op,reference_op", [(("bias", ["row"]), ("bias", ["col"])),
                                                    (("leaky_relu", [0.2]), ("leaky_relu", [0.02])),
                                                    (("glu", ["silu"]), ("glu", ["gelu_tanh"]))])
def test_a_wrong_operation_is_caught(kernel_op, reference_op):
    # The kernel computes one operation, the reference is told it is a plausible confusion of it
    # (broadcast axis, a constant, the gate's activation): the check must fail.
    shape = Shape(40, 40, 48)
    spec = KernelSpec(c="fp32", chain=(make_op(*kernel_op),), name="mut")
    inst = EpilogueGemm(EpiloguePlan(spec, SMALL, shape))
    wrong = EpilogueGemm(EpiloguePlan(KernelSpec(c="fp32", chain=(make_op(*reference_op),), name="mut"), SMALL, shape))
    inst.reference = wrong.reference
    assert not check(inst, "cpu", torch.Generator().manual_seed(1)).passed


@pytest.mark.parametrize("la,lb,lc", [("row", "row", "row"), ("col", "row", "col"), ("row", "col", "row"),
                                      ("col", "col", "col")])
@pytest.mark.parametrize("load", [0, 1])
def test_layouts_and_load_paths(la, lb, lc, load):
    spec = KernelSpec(la=la, lb=lb, lc=lc, c="fp32", chain=(make_op("bias", ["col"]), make_op("silu")), name="lay")
    cfg = TileConfig(16, 32, 32, S=3, W=4, KS=1, G=2, L=load)
    assert _check(spec, cfg, Shape(32 if la == "col" else 37, 40, 64)).passed


@pytest.mark.parametrize("cfg", [TileConfig(16, 32, 32, KS=3, L=0), TileConfig(32, 16, 32, KS=2, L=1)],
                         ids=["split3-ptr", "split2-tma"])
def test_split_k_applies_the_epilogue_once_after_the_reduction(cfg):
    # add(residual) after the total: adding it in every split would multiply it by KS.
    spec = KernelSpec(c="fp32", chain=(make_op("add", ["residual", "fp32"]), make_op("relu")), name="split")
    assert _check(spec, cfg, Shape(33, 40, 200)).passed


def test_row_softmax_and_logsumexp_over_the_whole_row():
    soft = KernelSpec(c="fp32", chain=(make_op("scale", [2.0]), make_op("softmax")), name="soft")
    assert _check(soft, TileConfig(16, 64, 32, KS=2, L=0), Shape(33, 50, 96)).passed
    lse = KernelSpec(c="fp32", chain=(make_op("logsumexp"), make_op("bias", ["col", "fp32"])), name="lse")
    assert _check(lse, TileConfig(16, 64, 32, KS=1, L=1), Shape(33, 48, 96)).passed


def test_glu_pairs_interleaved_columns_and_halves_the_width():
    spec = KernelSpec(c="fp32", chain=(make_op("glu", ["silu"]), make_op("bias", ["row", "fp32"]),
                                       make_op("mul", ["gate2", "fp32"])), name="glu")
    plan = EpiloguePlan(spec, TileConfig(16, 32, 32, KS=2, L=0), Shape(33, 40, 64))
    assert plan.out_width == 20
    inputs = new_inputs(plan, "cpu", torch.Generator().manual_seed(0))
    assert inputs["bias"].shape == (20,) and inputs["gate2"].shape == (33, 20)
    assert _check(spec, plan.config, plan.shape).passed


def test_batched_gemm_on_both_load_paths():
    spec = KernelSpec(op="batched_gemm", lb="col", c="fp32", chain=(make_op("mul", ["m", "fp32"]),), name="bmm")
    for cfg in (TileConfig(16, 32, 32, KS=2, L=1), TileConfig(32, 16, 32, KS=1, L=0)):
        assert _check(spec, cfg, Shape(24, 40, 96, batch=3)).passed


@pytest.mark.parametrize("geometry", [dict(r=3, s=3, stride=(1, 1), pad=(1, 1)),
                                      dict(r=3, s=2, stride=(2, 1), pad=(1, 0), dilation=(1, 2))])
def test_conv2d_nhwc_implicit_gemm(geometry):
    spec = KernelSpec(op="conv2d", lb="col", c="fp32", chain=(make_op("bias", ["row", "fp32"]), make_op("relu")),
                      name="conv")
    shape = Shape.of_conv(Conv2d(2, 7, 6, 8, 24, **geometry))
    assert _check(spec, TileConfig(16, 32, 32, KS=2, L=0), shape).passed
    # 32 channels: every K block of 32 inside one filter tap (TAP_BLOCKS), split-K across taps
    assert _check(spec, TileConfig(16, 32, 32, KS=2, L=0), Shape.of_conv(Conv2d(2, 7, 6, 32, 24, **geometry))).passed


def test_conv2d_refuses_the_copy_engine():
    spec = KernelSpec(op="conv2d", lb="col", name="conv")
    with pytest.raises(ValueError, match="conv2d"):
        EpiloguePlan(spec, TileConfig(16, 16, 32, L=1), Shape.of_conv(Conv2d(1, 4, 4, 8, 16)))


def test_declared_alignment_must_hold():
    spec = KernelSpec(name="al")
    plan = EpiloguePlan(spec, SMALL, Shape(16, 40, 36), align=8)  # K = 36 is a multiple of 4 only
    inst = EpilogueGemm(plan)
    with pytest.raises(ValueError, match="align"):
        inst.new_case("cpu", torch.Generator().manual_seed(0))  # the launch is bound (and checked) here


def test_stage_convert_transposes_and_casts():
    src = torch.randn(3, 17, 9)
    same = torch.empty(3, 9, 17).transpose(-1, -2)
    convert(src, same)
    assert torch.equal(same, src) and same.stride() == (153, 1, 17)
    narrow = torch.empty(3, 9, 17, dtype=torch.bfloat16).transpose(-1, -2)
    convert(src, narrow)
    # within one bf16 step (the interpreter's fp32 -> bf16 conversion does not round to nearest)
    assert torch.allclose(narrow.float(), src, rtol=2 ** -7, atol=0)


@pytest.mark.parametrize("op,chain,shape", [
    ("gemm", (make_op("glu", ["silu"]),), Shape(37, 48, 64)),
    ("gemm", (make_op("bias", ["row", "fp32"]), make_op("gelu", ["tanh"])), Shape(37, 40, 72)),
    ("batched_gemm", (make_op("scale", [0.5]), make_op("silu")), Shape(24, 40, 96, batch=3)),
], ids=["glu", "bias-gelu", "batched"])
def test_the_copy_engine_stores_c_with_ragged_edges(op, chain, shape):
    # L=1 stores C through a tensor descriptor (edges clipped by the copy engine, glu's half-width
    # tile at column col0/2, batched 3-D tiles); poisoned C: every element must be written.
    spec = KernelSpec(op=op, lb="col", c="bf16", chain=chain, name="store")
    plan = EpiloguePlan(spec, TileConfig(16, 32, 32, KS=1, L=1), shape)
    out = torch.empty((shape.batch, shape.M, plan.out_width) if op == "batched_gemm" else (shape.M, plan.out_width),
                      dtype=torch.bfloat16)
    assert plan._out_descriptor(out) is not out  # the descriptor path is the one under test
    assert _check(spec, plan.config, shape).passed


@pytest.mark.parametrize("op,chain,shape,cfg", [
    ("gemm", (make_op("bias", ["row", "fp32"]), make_op("gelu", ["tanh"])), Shape(37, 72, 64),
     TileConfig(16, 64, 32, KS=1, L=1)),
    ("gemm", (make_op("add", ["residual", "fp32"]), make_op("silu")), Shape(33, 40, 96), TileConfig(16, 32, 32, L=0)),
    ("gemm", (make_op("glu", ["silu"]), make_op("bias", ["row", "fp32"])), Shape(37, 136, 64),
     TileConfig(16, 64, 32, KS=1, L=1)),
    ("gemm", (make_op("scale", ["row", "fp32", "w_scale"]), make_op("scale", ["col", "fp32", "x_scale"]),
              make_op("silu")),
     Shape(40, 72, 200), TileConfig(16, 64, 32, KS=2, L=1)),
    ("batched_gemm", (make_op("mul", ["other", "fp32"]), make_op("tanh")), Shape(24, 40, 64, batch=3),
     TileConfig(16, 32, 32, KS=1, L=1)),
], ids=["bias-gelu-tma", "residual-ptr", "glu-tma", "dequant-splitk", "batched-mul"])
@pytest.mark.parametrize("split", [True, False], ids=["halves", "whole"])
def test_the_epilogue_in_column_halves_matches_the_whole_tile(op, chain, shape, cfg, split):
    # EPI_SPLIT: each half of the tile loads its slices of the chain's tensors (vectors, tiles) and
    # stores its own half of C (through the descriptor's half-width block on L=1); ragged N so the
    # second half of the last column tile is partly or wholly outside C.
    spec = KernelSpec(op=op, lb="col", c="fp32", chain=chain, name="halves")
    plan = EpiloguePlan(spec, cfg, shape, epi_split=split)
    assert plan.epi_split is split
    inst = EpilogueGemm(plan)
    result = check(inst, "cpu", torch.Generator().manual_seed(3))
    assert result.all_written and result.passed


def test_the_epilogue_halves_are_refused_where_the_row_must_be_whole():
    soft = KernelSpec(c="fp32", chain=(make_op("softmax"),), name="soft_h")
    assert EpiloguePlan(soft, TileConfig(16, 64, 32), Shape(16, 64, 32)).epi_split is False
    glu = KernelSpec(c="fp32", chain=(make_op("glu", ["silu"]),), name="glu_h")
    assert EpiloguePlan(glu, TileConfig(16, 32, 32), Shape(16, 64, 32)).epi_split is False  # Tn/4 < 16: whole
    assert EpiloguePlan(glu, TileConfig(16, 64, 32), Shape(16, 64, 32)).epi_split is True
    with pytest.raises(InvalidInput, match="epi_split"):
        EpiloguePlan(soft, TileConfig(16, 64, 32), Shape(16, 64, 32), epi_split=True)
