"""The reference for correctness runs the problem's math in its declared precision (fp32: TF32 off
for cuDNN and matmul), timing keeps PyTorch's defaults. The CPU has no TF32, so a reference that
reads the flags stands in for one: it records them on every call, and its output carries a 'TF32
error' (x 1.001) exactly when cuDNN TF32 is on, as an fp32 cuDNN conv does on an H200."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import types

import pytest
import torch
from torch import nn

from formloop.errors import InvalidInput
from formloop.measure.harness import evaluate
from formloop.measure.mathmode import describe, fp32_math, reference_math, tf32_flags
from formloop.measure.probes import check_integrity
from formloop.measure.session import Session

CALLS: list[tuple[str, bool, bool]] = []


def _flags(who: str) -> None:
    CALLS.append((who, bool(torch.backends.cudnn.allow_tf32), bool(torch.backends.cuda.matmul.allow_tf32)))


def tf32_like(x: torch.Tensor) -> torch.Tensor:
    """x * 2 in fp32 math; with cuDNN TF32 on, 1e-3 relative off (a TF32 conv's error)."""
    return x * (2.002 if torch.backends.cudnn.allow_tf32 else 2.0)


class Model(nn.Module):
    def forward(self, x):
        _flags("reference")
        return tf32_like(x)


PROBLEM = types.SimpleNamespace(name="tf32_conv_stand_in", Model=Model, get_inputs=lambda: [torch.randn(256) + 3.0],
                                get_init_inputs=lambda: [])


def fp32_candidate(x):
    _flags("candidate")
    return x * 2.0


def as_users_run_it(x):   # what eager (or torch.compile) computes under PyTorch's defaults
    _flags("candidate")
    return tf32_like(x)


@pytest.fixture
def defaults():
    """PyTorch's defaults on a GPU (cuDNN TF32 on, matmul TF32 off), restored afterwards."""
    before = tf32_flags()
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = True, False
    CALLS.clear()
    yield
    torch.backends.cudnn.allow_tf32 = before["cudnn.allow_tf32"]
    torch.backends.cuda.matmul.allow_tf32 = before["cuda.matmul.allow_tf32"]


@pytest.mark.parametrize("cudnn,matmul", [(True, False), (True, True), (False, True), (False, False)])
def test_fp32_math_turns_tf32_off_and_restores_the_previous_flags(cudnn, matmul):
    before = tf32_flags()
    try:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = cudnn, matmul
        with fp32_math():
            assert tf32_flags() == {"cudnn.allow_tf32": False, "cuda.matmul.allow_tf32": False}
        assert tf32_flags() == {"cudnn.allow_tf32": cudnn, "cuda.matmul.allow_tf32": matmul}
        with pytest.raises(RuntimeError), fp32_math():
            raise RuntimeError("the reference raised")
        assert tf32_flags() == {"cudnn.allow_tf32": cudnn, "cuda.matmul.allow_tf32": matmul}
        with reference_math("defaults"):
            assert tf32_flags() == {"cudnn.allow_tf32": cudnn, "cuda.matmul.allow_tf32": matmul}
    finally:
        torch.backends.cudnn.allow_tf32 = before["cudnn.allow_tf32"]
        torch.backends.cuda.matmul.allow_tf32 = before["cuda.matmul.allow_tf32"]


def _fp32_math_leaves_the_precision_unset(cache_dir: str) -> tuple[str, int]:
    """In a fresh process: the matmul precision after fp32_math, and Inductor's FX graph cache hits of a compile
    after it (the same function was compiled into `cache_dir` before, with the settings untouched)."""
    import os

    os.environ.update({"TORCHINDUCTOR_CACHE_DIR": cache_dir, "TORCHINDUCTOR_COMPILE_THREADS": "1"})
    from torch._dynamo.utils import counters
    with fp32_math():
        pass
    torch.compile(lambda x: torch.relu(x) + 1)(torch.ones(8))
    return torch.backends.cuda.matmul.fp32_precision, counters["inductor"]["fxgraph_cache_hit"]


def _compile_plainly(cache_dir: str) -> int:
    import os

    os.environ.update({"TORCHINDUCTOR_CACHE_DIR": cache_dir, "TORCHINDUCTOR_COMPILE_THREADS": "1"})
    torch.compile(lambda x: torch.relu(x) + 1)(torch.ones(8))
    return 1


@pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="torch before 2.9")
def test_fp32_math_leaves_the_settings_torch_compile_keys_its_cache_on_as_they_were(tmp_path):
    """The legacy switch writes 'ieee' where the setting was unset ('none'); a torch.compile after a reference
    ran must still find what a compile with the settings untouched put in the cache (the torch.compile
    baselines are warmed that way)."""
    from formloop.measure.sandbox import Limits, run_in_child

    assert run_in_child(_compile_plainly, str(tmp_path), limits=Limits(wall_s=300)).ok
    out = run_in_child(_fp32_math_leaves_the_precision_unset, str(tmp_path), limits=Limits(wall_s=300))
    assert out.ok, out.message
    assert out.value == ("none", 1)


def test_the_correctness_reference_runs_without_tf32_and_timing_with_the_defaults(defaults):
    res = evaluate(PROBLEM, fp32_candidate, sets=2, seed=3, tolerance="kernelbench")
    assert res.correct, res.sets
    refs = [c for c in CALLS if c[0] == "reference"]
    # correctness references (2 sets, the timing-size probe, the timed-output check, the after-timing
    # check) ran with both flags off; the timed reference calls ran under the defaults
    assert sum(1 for c in refs if c[1:] == (False, False)) >= 5
    assert sum(1 for c in refs if c[1:] == (True, False)) >= 2
    assert all(c[1:] == (True, False) for c in CALLS if c[0] == "candidate")   # the candidate: as users run it
    assert tf32_flags() == {"cudnn.allow_tf32": True, "cuda.matmul.allow_tf32": False}
    assert res.protocol["reference_math"] == "fp32"
    assert any(n.startswith("reference for correctness: fp32 math (TF32 off)") and "cudnn.allow_tf32=True" in n
               for n in res.notes)


def test_a_tf32_candidate_fails_the_fp32_reference(defaults):
    res = evaluate(PROBLEM, as_users_run_it, sets=1, seed=3, timing=False, tolerance="kernelbench")
    assert not res.correct and "torch.allclose" in res.sets[0].reason
    # the same candidate against the reference under the defaults (KernelBench as it runs) passes
    s = Session(PROBLEM, as_users_run_it, seed=3, rule="kernelbench", reference_math="defaults")
    assert evaluate(PROBLEM, as_users_run_it, sets=1, timing=False, session=s).correct
    with pytest.raises(InvalidInput, match="reference math"):
        Session(PROBLEM, as_users_run_it, reference_math="tf32")


def test_a_baseline_missing_only_by_tf32_is_timed_with_a_note(defaults):
    res = evaluate(PROBLEM, as_users_run_it, sets=2, seed=4, tolerance="kernelbench", tf32_baseline=True)
    assert res.correct and res.cand_time is not None and res.ref_time is not None
    assert res.protocol["reference_math"] == "defaults"
    assert "torch.allclose" in res.protocol["fp32_reference"]["reason"]
    assert any("misses the rule against the fp32 reference" in n for n in res.notes)
    # a baseline wrong beyond TF32 stays incorrect, untimed, against the fp32 reference
    bad = evaluate(PROBLEM, lambda x: x * 2.1, sets=1, seed=4, tolerance="kernelbench", tf32_baseline=True)
    assert not bad.correct and bad.cand_time is None and bad.protocol["reference_math"] == "fp32"
    # an fp32-accurate baseline needs no fallback
    ok = evaluate(PROBLEM, fp32_candidate, sets=1, seed=4, timing=False, tf32_baseline=True)
    assert ok.correct and ok.protocol["reference_math"] == "fp32" and "fp32_reference" not in ok.protocol


def test_integrity_probes_compare_against_the_same_fp32_reference(defaults):
    report = check_integrity(PROBLEM, fp32_candidate, seed=5, sets=1, tolerance="kernelbench")
    assert report.correct
    wrong = [c for c in report.checks if "allclose" in (c.reason or "") or "outside tolerance" in (c.reason or "")]
    assert not wrong, wrong
    assert all(c[1:] == (False, False) for c in CALLS if c[0] == "reference")
    tf32 = check_integrity(PROBLEM, as_users_run_it, seed=5, sets=1, tolerance="kernelbench")
    assert not tf32.correct


def test_describe_names_both_sides():
    assert describe("fp32").startswith("reference for correctness: fp32 math (TF32 off)")
    assert "eager timing: PyTorch defaults" in describe("fp32")
    assert describe("defaults").startswith("reference for correctness: PyTorch defaults")


def test_the_compile_baseline_asks_for_the_tf32_recheck_and_says_so(monkeypatch, tmp_path):
    from formloop.measure import jobs
    from formloop.optimize import compile_phase

    seen = {}

    def fake(problem, candidate, **kw):
        seen.update(kw)
        return {"correct": True, "candidate_time": {"seconds": 0.5}, "protocol": {"reference_math": "defaults"}}

    monkeypatch.setattr(jobs, "run_harness", fake)
    p = tmp_path / "prob.py"
    p.write_text("")
    out = compile_phase.time_baseline(str(p), str(p), small=False, out_dir=str(tmp_path), tolerance="kernelbench")
    assert seen["tf32_baseline"] is True and out["compile_s"] == 0.5 and "TF32 reference" in out["note"]
    compile_phase.time_baseline(str(p), str(p), small=False, out_dir=str(tmp_path), tolerance="kernelbench",
                                dtype="bf16")
    assert seen["tf32_baseline"] is False and seen["precision"] == "bf16"


def test_the_optimizer_report_states_the_reference_math():
    from formloop.optimize.report import markdown

    ve = {"geomean": 1.2, "median": 1.0, "fast_p": {0: 1.0, 1: 0.5}}
    summary = {"problems": 1, "with_accepted_candidate": 1, "kept_reference": 0, "not_covered": 0, "pending": 0,
               "attempts": 1, "integrity_flagged_counted": 0, "vs_eager": ve, "vs_compile": None,
               "median_sol_fraction": 0.5}
    text = markdown({"tier": "gpu", "dtype": "fp32", "note": "", "source": "gpu", "summary": summary,
                     "settings": {"tolerance": "kernelbench"}, "problems": []})
    assert ("rule: kernelbench; reference for correctness: fp32 math (TF32 off); eager timing: PyTorch defaults "
            "(cuDNN TF32 on)") in text


def test_verdicts_against_the_old_tf32_reference_do_not_force_fp32_operands(tmp_path):
    """An incorrect attempt checked against the TF32 reference (its protocol has no reference_math:
    the store of an earlier campaign call) does not switch the problem to fp32 operands; one checked
    against fp32 math does."""
    from formloop.optimize.engine import Settings, _operands
    from formloop.optimize.store import OptimizeStore

    def add(store, protocol):
        store.add_attempt("conv", candidate="/x.py", origin="formloop", correct=False, accepted=False,
                          verdict="incorrect: output 0: 5202724 of 12845056 elements fail torch.allclose",
                          time_s=None, ref_s=None, time_source=None, sol_fraction=None,
                          detail={"harness": {"protocol": protocol}})

    settings = Settings(out=tmp_path)
    with OptimizeStore(tmp_path / "population.db", "fp32/full") as s:
        assert _operands(s, "conv", settings) == "auto"
        add(s, {"tolerance": "kernelbench"})
        assert _operands(s, "conv", settings) == "auto"
        add(s, {"tolerance": "kernelbench", "reference_math": "fp32"})
        assert _operands(s, "conv", settings) == "fp32"


def test_the_assembled_modelnew_runs_leftover_pytorch_ops_without_tf32(tmp_path, defaults, monkeypatch):
    """conv_transpose2d has no implementer: its ModelNew is the graph's own PyTorch code, which must
    compute fp32 math like the reference for correctness (a cuDNN TF32 conv would miss the rule)."""
    import importlib.util
    from pathlib import Path

    from formloop.optimize.assemble import assemble
    from formloop.optimize.capture import capture
    from formloop.optimize.recognize import recognize
    from formloop.sol.problem import load_problem

    path = Path(__file__).resolve().parents[1] / "problems" / "level1" / "conv_transpose2d.py"
    problem = load_problem(str(path), small=True)
    cap = capture(problem)
    rec = recognize(cap)
    assert rec.regions == [] and "ConvTranspose2d" in rec.fallbacks[0]["op"]
    out = assemble(cap, rec, tier="interpreter", small=True)
    target = tmp_path / "conv_transpose2d_a0.py"
    target.write_text(out.source)
    spec = importlib.util.spec_from_file_location("assembled_ct", target)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    real = nn.ConvTranspose2d.forward

    def recording(self, *a, **k):
        _flags("leftover conv")
        return real(self, *a, **k)

    monkeypatch.setattr(nn.ConvTranspose2d, "forward", recording)
    torch.manual_seed(0)
    model = mod.ModelNew(*problem.get_init_inputs())
    ref = problem.Model(*problem.get_init_inputs())
    ref.load_state_dict(model.state_dict())
    x = problem.get_inputs()
    with torch.no_grad():
        got = model(*x)
        torch.testing.assert_close(got, ref(*x))
    assert CALLS[0] == ("leftover conv", False, False) and CALLS[1] == ("leftover conv", True, False)
    assert tf32_flags() == {"cudnn.allow_tf32": True, "cuda.matmul.allow_tf32": False}   # restored
