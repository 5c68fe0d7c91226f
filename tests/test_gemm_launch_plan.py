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
from formloop.library.gemm_tiling_launch import NOT_RUN, LaunchPlan, _raw_launcher, _spec_key, device_key  # noqa: E402

CASES = [(TileConfig(16, 16, 16, S=2, KS=1, L=0), (17, 33, 45)),
         (TileConfig(16, 32, 32, S=3, KS=3, L=0), (5, 40, 200)),
         (TileConfig(16, 16, 16, S=2, KS=1, L=1), (17, 40, 48)),
         (TileConfig(32, 16, 16, S=3, KS=2, L=1), (1, 48, 200))]


@pytest.mark.parametrize("cfg,shape", CASES, ids=lambda x: str(x))
def test_plan_runs_match_float64_across_fresh_operands(cfg, shape):
    M, N, K = shape
    lp = LaunchPlan(GemmPlan(cfg, M, N, K, "bf16"), "cpu")
    assert lp.fallback.startswith("interpreter") and lp.path == "jit"
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


def _fake_triton(calls, *, warmup_none=False, scratch=0):
    """A stand-in JIT kernel whose warmup gives a compiled kernel with Triton 3.6's launcher layout."""
    from triton.backends.nvidia.driver import wrap_handle_tensordesc

    def c_launch(*args):
        calls.append(args)

    signature = {"a_desc": "tensordesc<bf16[16, 16]>", "c_ptr": "*bf16", "M": "i32", "BLOCK": "constexpr"}

    class Launcher:
        launch = staticmethod(wrap_handle_tensordesc(c_launch, signature, None))
        global_scratch_size, profile_scratch_size = scratch, 0
        launch_cooperative_grid = False
        launch_pdl = False

    class Compiled:
        run = Launcher()
        function, packed_metadata = 1234, ("meta",)
        src = type("Src", (), {"signature": signature})()
        metadata = type("Meta", (), {})()

    class Kernel:
        def warmup(self, *args, grid, **kw):
            return None if warmup_none else Compiled()

    return Kernel()


def _fake_plan(monkeypatch, kernel, a, c):
    from triton.tools.tensor_descriptor import TensorDescriptor

    desc = TensorDescriptor.from_tensor(a, [16, 16])
    plan = GemmPlan(TileConfig(16, 16, 16), 16, 16, 32, "bf16")
    lp = LaunchPlan(plan, "cpu")
    lp.fallback, lp._get_stream = NOT_RUN, (lambda index: 77)  # as on a GPU, before the first run
    monkeypatch.setattr(plan.__class__, "kernel_call", lambda self, *args: (kernel, (desc, c, 16, 16), {}))
    return lp


def test_thin_call_has_the_layout_of_tritons_c_launcher(monkeypatch):
    """The bound call against a stand-in compiled kernel: grid, stream and the 9 head values make
    Triton's 13 base arguments (its _BASE_ARGS_FORMAT), descriptors are expanded by Triton's own
    make_tensordesc_arg, tensors become pointers, and a second run reuses the bound tuple."""
    from triton.backends.nvidia.driver import _BASE_ARGS_FORMAT

    calls = []
    a = torch.zeros((16, 32), dtype=torch.bfloat16)
    c = torch.zeros((16, 16), dtype=torch.bfloat16)
    lp = _fake_plan(monkeypatch, _fake_triton(calls), a, c)
    assert lp.path == "jit" and lp.fallback == NOT_RUN
    lp.run(a, a, c)
    lp.run(a, a, c)
    assert lp.path == "thin" and lp.fallback == "" and lp.jit_calls == 0
    assert len(calls) == 2 and calls[0] == calls[1]
    args = calls[0]
    base = len(_BASE_ARGS_FORMAT)
    assert args[:5] == (1, 1, 1, 77, 1234) and args[9] == ("meta",) and args[10:13] == (None, None, None)
    kernel_args = args[base:]
    # host descriptor without metadata: base, shape, strides, padding flag, shape, strides (Triton 3.6)
    assert kernel_args[0] is a and list(kernel_args[1:3]) == [16, 32] and list(kernel_args[3:5]) == [32, 1]
    assert kernel_args[-3:] == (c.data_ptr(), 16, 16)


@pytest.mark.parametrize("case", ["hook", "warmup_none", "scratch", "no_stream_query"])
def test_jit_path_always_names_its_reason(monkeypatch, case):
    """Whenever a plan's path is 'jit' its fallback reason is non-empty (before the first run, and
    after a run that could not bind the thin launcher), and the launch went through the JIT entry."""
    from triton import knobs

    calls, jit = [], []
    a = torch.zeros((16, 32), dtype=torch.bfloat16)
    c = torch.zeros((16, 16), dtype=torch.bfloat16)
    lp = _fake_plan(monkeypatch, _fake_triton(calls, warmup_none=case == "warmup_none",
                                              scratch=64 if case == "scratch" else 0), a, c)
    monkeypatch.setattr(lp.plan.__class__, "launch", lambda self, *args: jit.append(args))
    if case == "hook":
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *args: None)
    if case == "no_stream_query":
        lp._get_stream = None
    assert lp.path == "jit" and lp.fallback
    lp.run(a, a, c)
    assert lp.path == "jit" and lp.fallback and lp.fallback != NOT_RUN, lp.fallback
    assert len(jit) == 1 and lp.jit_calls == 1 and not calls


def test_interpreted_plans_are_jit_with_a_reason_and_cuda_names_one_plan(monkeypatch):
    inst = TritonGemm(GemmPlan(TileConfig(16, 16, 16), 9, 16, 32, "fp32"))
    case = inst.new_case("cpu", torch.Generator().manual_seed(0))
    inst.launch(case)
    lp = inst.launch_plan("cpu")
    assert lp.path == "jit" and lp.fallback.startswith("interpreter")
    # 'cuda' and 'cuda:<current>' are the same plan (a report asking for 'cuda' reads the launches' plan)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert device_key("cuda") == torch.device("cuda:0") and device_key("cpu") == torch.device("cpu")
    assert inst.launch_plan("cuda") is inst.launch_plan(torch.device("cuda", 0))
