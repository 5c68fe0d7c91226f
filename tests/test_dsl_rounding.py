"""The epilogue's reference at its roundings (the GPU failures of router_softmax and dequant_silu):
a kernel that computes in float32 and rounds to bf16 where the spec says is right, even where its
float32 value sits a hair from the float64 one at a rounding boundary, or where one output element
is far above the others' RMS; a kernel off by more than that still fails.

Before the reference rounded as the kernel stores (and admitted either neighbour at a boundary),
a correct dequant chain failed the element bound (max |err| <= 10·tol·RMS) whenever one output was
large: its own bf16 rounding exceeded the bound. A cast(bf16) >> softmax failed whenever a logit
near a bf16 boundary rounded the other way in float32 (one bf16 step of a large logit moves its
probability by several percent of the row's RMS)."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.evaluate.gpu import check  # noqa: E402
from formloop.library.gemm_epilogue_emit import KernelSpec, Shape  # noqa: E402
from formloop.library.gemm_epilogue_kernel import EpilogueGemm, EpiloguePlan  # noqa: E402
from formloop.library.gemm_epilogue_ops import make_op  # noqa: E402
from formloop.library.gemm_epilogue_reference import apply_chain, round_pair  # noqa: E402
from formloop.library.gemm_tiling_kernel import TileConfig  # noqa: E402

CFG = TileConfig(16, 64, 32, S=2, W=4, KS=1, G=8, L=0)
DEQUANT = KernelSpec(c="bf16", chain=(make_op("scale", ["row", "fp32", "w_scale"]),
                                      make_op("scale", ["col", "fp32", "x_scale"]), make_op("silu")), name="deq")
ROUTER = KernelSpec(c="fp32", chain=(make_op("cast", ["bf16"]), make_op("softmax")), name="router")


def test_round_pair_gives_the_other_neighbour_only_near_a_boundary():
    # bf16 steps by 2^-7 above 1: 1 + 2^-8 is the tie between 1 and 1 + 2^-7
    one = torch.tensor([1.0 + 2.0 ** -9, 1.0 + 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20, 3.0], dtype=torch.float64)
    near, other = round_pair(one, torch.bfloat16, 2.0 ** -14)
    assert near.tolist()[3] == other.tolist()[3] == 3.0                     # exactly representable
    assert near[0].item() == other[0].item() == 1.0                         # a quarter step: far from the tie
    assert {near[1].item(), other[1].item()} == {1.0, 1.0 + 2.0 ** -7}      # a tie: both neighbours
    assert {near[2].item(), other[2].item()} == {1.0, 1.0 + 2.0 ** -7}      # a hair above the tie


def test_a_large_output_element_keeps_its_own_rounding():
    # dequant_silu's failure mode: the kernel (interpreter, float32 epilogue, bf16 store) is right,
    # one row scale and one column scale are large, so one output element is far above the RMS and
    # its own bf16 rounding (2^-9 relative) is more than 10·tol of the RMS.
    inst = EpilogueGemm(EpiloguePlan(DEQUANT, CFG, Shape(256, 256, 32)))
    case = inst.new_case("cpu", torch.Generator().manual_seed(0))
    case.inputs["w_scale"][5] = 3000.0
    case.inputs["x_scale"][3] = 3000.0
    inst.launch(case)
    out, ref = case.out.double(), inst.reference(case)
    exact = apply_chain(DEQUANT.chain, case.inputs["a"].double() @ case.inputs["b"].double(), case.inputs)
    rms = exact.pow(2).mean().sqrt()
    assert (out - exact).abs().max() / rms > 10 * inst.tolerance  # the unrounded reference rejects it
    assert (out - ref).norm() / ref.norm() <= inst.tolerance
    assert (out - ref).abs().max() / ref.pow(2).mean().sqrt() <= 10 * inst.tolerance
    assert check(inst, "cpu", torch.Generator().manual_seed(1)).passed


class _Router(EpilogueGemm):
    """router's chain as a float32 kernel would compute it: logits off the exact ones by a relative
    2^-16 (float32 accumulation over a long K), rounded to bf16, softmax; `bump` moves one logit by
    two bf16 steps (a wrong kernel)."""

    bump = False

    def launch(self, case):
        acc = case.inputs["a"].double() @ case.inputs["b"].double()
        g = torch.Generator().manual_seed(7)
        noisy = acc * (1.0 + 2.0 ** -16 * (2 * torch.rand(acc.shape, generator=g, dtype=torch.float64) - 1))
        logits = noisy.to(torch.bfloat16).double()
        if self.bump:
            i = logits[0].argmax()
            logits[0, i] += 2 * 2.0 ** (torch.floor(torch.log2(logits[0, i].abs())) - 7)
        case.out.copy_(torch.softmax(logits, dim=-1))


def test_a_logit_rounded_the_other_way_at_a_boundary_is_right():
    inst = _Router(EpiloguePlan(ROUTER, TileConfig(16, 128, 32, S=2, W=4), Shape(4096, 128, 32)))
    case = inst.new_case("cpu", torch.Generator().manual_seed(0))
    inst.launch(case)
    exact = apply_chain(ROUTER.chain, case.inputs["a"].double() @ case.inputs["b"].double(), case.inputs)
    flips = (case.out.double() - exact).abs().max() / exact.pow(2).mean().sqrt()
    assert flips > 10 * inst.tolerance  # the nearest-only reference alone would reject this kernel
    assert check(inst, "cpu", torch.Generator().manual_seed(0)).passed


def test_a_logit_two_steps_off_still_fails():
    inst = _Router(EpiloguePlan(ROUTER, TileConfig(16, 128, 32, S=2, W=4), Shape(4096, 128, 32)))
    inst.bump = True
    assert not check(inst, "cpu", torch.Generator().manual_seed(0)).passed


def test_a_matrix_past_32_bit_offsets_is_refused():
    from formloop.errors import InvalidInput

    with pytest.raises(InvalidInput, match="2\\^31"):
        EpiloguePlan(DEQUANT, CFG, Shape(65536, 32768, 64))
    with pytest.raises(InvalidInput, match="2\\^31"):  # split-K partials: KS·M·N floats
        EpiloguePlan(DEQUANT, TileConfig(16, 64, 32, KS=8), Shape(32768, 16384, 4096))
    EpiloguePlan(DEQUANT, CFG, Shape(16384, 22016, 4096))  # the benchmark's largest: fine
