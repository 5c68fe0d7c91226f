"""The harness: tolerance rule against an independent numpy computation, poisoning, immutability,
timing labels and clear errors for malformed problems and candidates."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import types
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from formloop.measure.compare import TOLERANCES, compare_outputs, compare_tensor
from formloop.measure.harness import evaluate
from formloop.measure.session import Session, load_candidate
from formloop.errors import FormloopError, InvalidInput, StructureError

FIX = Path(__file__).parent / "fixtures" / "integrity"


def problem_of(forward, make_inputs, init=()):
    class Model(nn.Module):
        def forward(self, *xs):
            return forward(*xs)

    return types.SimpleNamespace(name="inline", Model=Model, get_inputs=make_inputs, get_init_inputs=lambda: list(init))


def numpy_verdict(c, r, t, rtol, atol_scale, k=4.0):
    """The documented rule, recomputed in numpy float64."""
    c, r, t = (np.asarray(v, dtype=np.float64) for v in (c, r, t))
    rms = lambda v: float(np.sqrt(np.mean(v ** 2)))
    allowed = rtol * np.abs(t) + atol_scale * rms(t) + k * rms(r - t)
    return bool(np.all(np.abs(c - t) <= np.maximum(allowed, np.finfo(np.float32).tiny)))


@pytest.mark.parametrize("seed", range(12))
def test_tolerance_rule_matches_numpy(seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(64, generator=g, dtype=torch.float64) * 10 ** float(torch.randint(-6, 3, (1,), generator=g))
    r = (t + 1e-7 * torch.randn(64, generator=g, dtype=torch.float64) * t.abs()).float()
    scale = [0.0, 1e-5, 1e-3, 3e-3, 1e-1][seed % 5]
    c = (t * (1 + scale * torch.randn(64, generator=g, dtype=torch.float64))).float()
    tol = TOLERANCES[torch.float32]
    got = compare_tensor(c, r, t).ok
    assert got == numpy_verdict(c, r, t, tol.rtol, tol.atol_scale)


def test_special_values_and_structure():
    r = torch.tensor([1.0, float("nan"), float("inf")])
    assert compare_tensor(r.clone(), r).ok
    assert not compare_tensor(torch.tensor([1.0, 0.0, float("inf")]), r).ok
    assert not compare_tensor(torch.tensor([float("nan"), float("nan"), float("inf")]), r).ok
    assert "shape" in compare_tensor(torch.zeros(2), torch.zeros(3)).reason
    assert "dtype" in compare_tensor(torch.zeros(3, dtype=torch.float64), torch.zeros(3)).reason
    assert "2 outputs" in compare_outputs((r, r), r).reason
    assert compare_tensor(torch.tensor([1, 2]), torch.tensor([1, 2])).ok
    assert not compare_tensor(torch.tensor([1, 3]), torch.tensor([1, 2])).ok


def test_reference_error_term_admits_honest_cancellation_noise():
    """(x - mean(x)).sum() is zero in exact arithmetic; fp32 leaves ~1e-6 noise whose value depends on
    summation order. An honest reordering passes (the reference misses the fp64 truth by as much)."""
    prob = problem_of(lambda x: (x - x.mean(dim=1, keepdim=True)).sum(dim=1), lambda: [torch.randn(8, 4096) + 3.0])
    honest = lambda x: (x.flip(1) - x.mean(dim=1, keepdim=True)).sum(dim=1)
    assert evaluate(prob, honest, sets=3, seed=1, timing=False).correct


def test_poisoning_exposes_an_unwritten_output_and_inputs_must_not_change():
    prob = problem_of(lambda x: x * 2.0, lambda: [torch.randn(64)])
    res = evaluate(prob, lambda x: torch.empty_like(x), sets=2, seed=1, timing=False)
    assert not res.correct and "outside tolerance" in res.sets[0].reason

    def mutating(x):
        x.mul_(2.0)
        return x.clone()

    res = evaluate(prob, mutating, sets=2, seed=1, timing=False)
    assert res.mutated and res.mutated[0]["input"] == 0 and not res.correct


def test_input_sets_are_fresh_and_replayable():
    prob = problem_of(lambda x: x + 1, lambda: [torch.randn(16)])
    s = Session(prob, lambda x: x + 1, seed=9)
    a, b = s.inputs(s.set_seed(0)), s.inputs(s.set_seed(1))
    assert not torch.equal(a[0], b[0])
    assert torch.equal(a[0], Session(prob, lambda x: x + 1, seed=9).inputs(s.set_seed(0))[0])


def test_timing_on_cpu_is_labelled_cpu_and_never_compared_with_sol():
    res = evaluate(FIX / "problems" / "add.py", FIX / "honest" / "add.py", sets=1, seed=1)
    assert res.correct and res.cand_time.source == "cpu" and res.ref_time.source == "cpu"
    assert res.protocol["timing_rounds"] == 1   # rounds are for the GPU (formloop.measure.rounds)
    assert res.speedup == pytest.approx(res.ref_time.seconds / res.cand_time.seconds)
    res.sol_floor_s = 1e-6
    assert res.sol_fraction is None  # a CPU time against a GPU floor means nothing
    d = res.as_dict()
    assert d["candidate_time"]["source"] == "cpu" and "--seed 1" in d["replay"]


def test_weights_are_shared_with_the_reference():
    res = evaluate(FIX / "problems" / "linear_relu.py", FIX / "honest" / "linear_relu.py", sets=1, seed=2, timing=False)
    assert res.correct and res.weights == "copied from the reference"


def test_zero_inputs_are_refused():
    prob = problem_of(lambda x: x, lambda: [torch.zeros(8)])
    with pytest.raises(InvalidInput, match="all-zero"):
        evaluate(prob, lambda x: x, timing=False)


def test_bad_problems_and_candidates_name_what_is_wrong(tmp_path):
    no_inputs = tmp_path / "no_inputs.py"
    no_inputs.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n"
                         "def get_init_inputs():\n    return []\n")
    with pytest.raises(FormloopError, match="get_inputs"):
        evaluate(no_inputs, FIX / "honest" / "add.py", timing=False)
    broken = tmp_path / "broken.py"
    broken.write_text("def get_inputs(:\n")
    with pytest.raises(FormloopError, match="broken"):
        evaluate(broken, FIX / "honest" / "add.py", timing=False)
    with pytest.raises(FormloopError, match="missing.py"):
        evaluate(tmp_path / "missing.py", FIX / "honest" / "add.py", timing=False)
    no_model_new = tmp_path / "cand.py"
    no_model_new.write_text("def forward(x):\n    return x\n")
    with pytest.raises(StructureError, match="ModelNew"):
        load_candidate(no_model_new)
    with pytest.raises(InvalidInput, match="ModelNew"):
        Session(FIX / "problems" / "linear_relu.py", lambda x: x)
    with pytest.raises(InvalidInput, match="sets"):
        evaluate(FIX / "problems" / "add.py", FIX / "honest" / "add.py", sets=0)


def test_faster_than_the_sol_bound_is_a_warning_that_points_to_integrity():
    from formloop.measure.harness import sol_warning
    from formloop.measure.timer import Timing

    def timing(seconds, source="gpu"):
        return Timing(seconds, source, "graph", 10, seconds, seconds, seconds, seconds)

    floor = 4.0e-4  # the fingerprint cheat's case: a quarter of the floor (SOL fraction 4.0)
    w = sol_warning(timing(1.0e-4), floor, "SOL floor on h200")
    assert w and "faster than the SOL bound" in w and "formloop integrity" in w and "75.0% below" in w
    assert sol_warning(timing(0.91 * floor), floor) is None          # within the 10% margin
    assert sol_warning(timing(0.89 * floor), floor) is not None
    assert sol_warning(timing(1.0e-6, source="cpu"), floor) is None  # a CPU time is never held to a GPU floor
    assert sol_warning(None, floor) is None and sol_warning(timing(1e-6), None) is None


def test_device_names_map_to_chip_specs():
    from formloop.hw.chips import chip_for_device

    assert chip_for_device("NVIDIA H200") == "h200" and chip_for_device("NVIDIA H100 80GB HBM3") == "h100"
    assert chip_for_device("NVIDIA A100-SXM4-80GB") == "a100"
    assert chip_for_device("Tesla V100-SXM2-16GB") is None and chip_for_device("NVIDIA GH200 480GB") is None


def test_without_a_chip_a_cpu_run_says_it_has_no_floor():
    res = evaluate(FIX / "problems" / "add.py", FIX / "honest" / "add.py", sets=1, seed=1)
    assert res.sol_floor_s is None and res.sol_chip is None and not res.warnings
    assert res.sol_note.startswith("no SOL floor: timed on the CPU")
    res = evaluate(FIX / "problems" / "add.py", FIX / "honest" / "add.py", sets=1, seed=1, timing=False)
    assert res.sol_note.startswith("no SOL floor: not timed")


def test_device_chip_reads_the_cuda_device_name(monkeypatch):
    from formloop.measure import harness

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    assert harness.device_chip("cuda", True) == ("h200", "chip h200 taken from the device 'NVIDIA H200'")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100")
    chip, note = harness.device_chip("cuda:0", True)
    assert chip is None and "no chip spec matches the device 'Tesla V100'" in note and "h200" in note
    assert harness.device_chip("cpu", True)[0] is None


def test_a_gpu_run_without_chip_is_held_against_the_device_floor(monkeypatch):
    """The fingerprint cache at full size (4096 x 393216 fp32 ReLU, 12.9 GB moved: 2.68 ms on an H200)
    timed at 0.047 ms on the device, no chip given: the harness warns and points to integrity. The
    floor is counted on meta tensors (the session builds no input here)."""
    from formloop.measure import harness
    from formloop.measure.timer import Timing

    monkeypatch.setattr(harness, "device_chip", lambda device, timed: ("h200", "chip h200 taken from the device"))
    s = Session(FIX / "large" / "relu.py", FIX / "large" / "relu_fingerprint.py", seed=1)
    res = harness.HarnessResult(s.name, s.candidate.name, "cuda", 1, s.weights, [], [])
    res.cand_time = Timing(4.7e-5, "gpu", "graph", 10, 4.7e-5, 4.7e-5, 4.7e-5, 4.7e-5)
    harness._sol(s, res, None, None, None, timed=True)
    expected = 2 * 4096 * 393216 * 4 / 4.8e12   # read x, write relu(x): bytes over the H200's bandwidth
    assert res.sol_chip == "h200" and res.sol_floor_s == pytest.approx(expected, rel=1e-6)
    assert len(res.warnings) == 1 and "faster than the SOL bound" in res.warnings[0]
    assert "formloop integrity" in res.warnings[0] and "taken from the device" in res.sol_note
    assert res.sol_fraction == pytest.approx(expected / 4.7e-5)
    honest = harness.HarnessResult(s.name, s.candidate.name, "cuda", 1, s.weights, [], [])
    honest.cand_time = Timing(3.4e-3, "gpu", "graph", 10, 3.4e-3, 3.4e-3, 3.4e-3, 3.4e-3)
    harness._sol(s, honest, None, None, None, timed=True)
    assert honest.sol_floor_s == pytest.approx(expected, rel=1e-6) and not honest.warnings
    small = Session(FIX / "large" / "relu.py", FIX / "large" / "relu_triton.py", seed=1,
                    overrides={"BATCH": 6, "DIM": 3000})
    shrunk = harness.HarnessResult(small.name, "relu_triton", "cuda", 1, small.weights, [], [])
    harness._sol(small, shrunk, "h200", None, None, timed=False)   # the floor of the shapes that ran
    assert shrunk.sol_floor_s == pytest.approx(2 * 6 * 3000 * 4 / 4.8e12, rel=1e-6)


def test_the_floor_is_counted_at_the_precision_that_ran():
    from formloop.measure import harness

    s = Session(FIX / "large" / "relu.py", FIX / "large" / "relu_triton.py", seed=1, precision="bf16",
                overrides={"BATCH": 6, "DIM": 3000})
    res = harness.HarnessResult(s.name, "relu_triton", "cuda", 1, s.weights, [], [])
    harness._sol(s, res, "h200", None, None, timed=False)
    assert res.sol_floor_s == pytest.approx(2 * 6 * 3000 * 2 / 4.8e12, rel=1e-6)   # 2-byte elements


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter tier: no GPU")
def test_triton_imported_before_the_interpreter_is_refused_by_name():
    # Triton fixes interpreted-or-compiled when triton.language is imported: imported earlier without
    # TRITON_INTERPRET=1, an honest kernel would fail inside tl.zeros and be judged incorrect. The harness
    # refuses instead, naming the variable; with it set first, the same candidate is correct.
    import subprocess
    import sys
    body = ("import sys; sys.path.insert(0, {src!r})\n{first}import triton.language\n"
            "from formloop.measure.harness import evaluate\nfrom formloop.errors import InvalidInput\n"
            "try:\n    r = evaluate({p!r}, {c!r}, sets=1, seed=2, timing=False); print('correct', r.correct)\n"
            "except InvalidInput as e:\n    print('refused', e.field)\n")
    src = str(Path(__file__).parents[1] / "src")
    args = dict(src=src, p=str(FIX / "problems" / "linear_relu.py"), c=str(FIX / "honest" / "linear_relu.py"))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    late = subprocess.run([sys.executable, "-c", body.format(first="", **args)], env=env, capture_output=True,
                          text=True, timeout=300)
    early = subprocess.run([sys.executable, "-c", body.format(first="import os; os.environ['TRITON_INTERPRET'] = '1'\n",
                                                              **args)], env=env, capture_output=True, text=True,
                           timeout=300)
    assert late.stdout.split() == ["refused", "TRITON_INTERPRET"], late.stderr[-2000:]
    assert early.stdout.split() == ["correct", "True"], early.stderr[-2000:]
