"""The plan/run launch path of the tiling family (gemm_tiling_launch) in Triton's interpreter.

Independent checks: a float64 product is the reference, outputs are NaN-poisoned before each run,
one plan is run several times on fresh operands (split-K counters must come back to zero), and the
thin launcher is located inside Triton's own descriptor wrapper (its 3.6 source), not a copy."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.gemm_tiling_instance import TritonGemm, random_operands  # noqa: E402
from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig  # noqa: E402
from formloop.library.gemm_tiling_launch import LaunchPlan, _raw_launcher, _spec_key  # noqa: E402

CASES = [(TileConfig(16, 16, 16, S=2, KS=1, L=0), (17, 33, 45)),
         (TileConfig(16, 32, 32, S=3, KS=3, L=0), (5, 40, 200)),
         (TileConfig(16, 16, 16, S=2, KS=1, L=1), (17, 40, 48)),
         (TileConfig(32, 16, 16, S=3, KS=2, L=1), (1, 48, 200))]


@pytest.mark.parametrize("cfg,shape", CASES, ids=lambda x: str(x))
def test_plan_runs_match_float64_across_fresh_operands(cfg, shape):
    M, N, K = shape
    lp = LaunchPlan(GemmPlan(cfg, M, N, K, "bf16"), "cpu")
    assert lp.fallback == "interpreter" and lp.path == "jit"
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):  # the plan's own workspace is reused: the counters must be reset by each run
        a, b = random_operands(M, N, K, "bf16", "cpu", gen)
        c = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
        lp.run(a, b, c)
        ref = a.double() @ b.double()
        out = c.double()
        assert torch.isfinite(out).all()
        assert ((out - ref).norm() / ref.norm()).item() <= 1e-2
    if cfg.KS > 1:
        counters = lp.workspace[lp.plan._counters_at:].view(torch.int32)
        assert int(counters.abs().sum()) == 0


def test_instance_launches_through_its_plan_and_rejects_wrong_shapes():
    inst = TritonGemm(GemmPlan(TileConfig(16, 16, 16), 9, 16, 32, "fp32"))
    case = inst.new_case("cpu", torch.Generator().manual_seed(0))
    inst.launch(case)
    assert inst.launch_plan("cpu") is inst.launch_plan(torch.device("cpu"))  # made once per device
    assert torch.allclose(case.c.double(), inst.reference(case), rtol=1e-3, atol=1e-3)
    with pytest.raises(InvalidInput, match="operand shapes"):
        inst.launch_plan("cpu").run(case.b, case.a, case.c)


def test_raw_launcher_is_found_inside_tritons_descriptor_wrapper():
    from triton.backends.nvidia.driver import wrap_handle_tensordesc

    def c_launch(*args):
        return args

    class FakeLauncher:
        pass

    wrapped = FakeLauncher()
    wrapped.launch = wrap_handle_tensordesc(c_launch, {"a": "tensordesc<bf16[16, 16]>", "b": "i32"}, None)
    assert wrapped.launch is not c_launch and _raw_launcher(wrapped) is c_launch
    plain = FakeLauncher()
    plain.launch = wrap_handle_tensordesc(c_launch, {"a": "*bf16", "b": "i32"}, None)
    assert _raw_launcher(plain) is c_launch


def test_specialization_key_separates_alignment_and_unit_strides():
    x = torch.zeros(64, dtype=torch.float32)
    aligned, offset = x[:16], x[1:17]
    assert _spec_key((aligned, 32)) == _spec_key((x[4:20], 48))
    assert _spec_key((aligned, 32)) != _spec_key((offset, 32))  # 4-byte offset: not 16-byte aligned
    assert _spec_key((aligned, 1)) != _spec_key((aligned, 32))  # Triton specializes the value 1
