"""The planted-cheat suite and the honest suite: every cheat is flagged by the detector made for it,
with evidence and a replayable trace; no honest implementation is flagged at all. Cheats whose run
cannot finish (an exit during the check) are run the way a user runs them: in a child process."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run in the interpreter on CPU

import json
from pathlib import Path

import pytest
import torch

from formloop.measure.integrity import RUN_FAILURES, IntegrityVerdict
from formloop.measure.jobs import run_harness, run_integrity
from formloop.measure.probes import check_integrity

FIX = Path(__file__).parent / "fixtures" / "integrity"

SUITE = json.loads((FIX / "suite.json").read_text())
# cheat -> (problem, detector that must fire, verdict)
CHEATS = {k: (p, d, IntegrityVerdict(v)) for k, (p, d, v) in SUITE["cheats"].items()}
IN_PROCESS = sorted(k for k, (_, _, v) in CHEATS.items() if v not in RUN_FAILURES)
HONEST = sorted(p.stem for p in (FIX / "honest").glob("*.py"))
assert HONEST == sorted(SUITE["honest"])


@pytest.mark.parametrize("cheat", IN_PROCESS)
def test_planted_cheat_is_flagged_by_its_detector(cheat):
    problem, detector, verdict = CHEATS[cheat]
    report = check_integrity(FIX / "problems" / f"{problem}.py", FIX / "cheats" / f"{cheat}.py", seed=11)
    assert report.verdict is verdict, [(c.obligation, c.reason) for c in report.flags()]
    assert not report.accepted
    hits = report.flags(detector)
    assert hits, f"{detector} did not fire; flags: {[(c.obligation, c.reason) for c in report.flags()]}"
    hit = hits[0]
    assert hit.details["severity"] == verdict.value
    assert hit.witness and hit.reason and hit.replay and "seed=11" in hit.replay
    assert hit.trace, "a flag carries the steps that reproduce it"
    assert not report.flags("probe:"), "no probe may fail on a planted cheat"


def test_a_cheat_that_exits_during_the_check_gets_a_named_verdict_never_accepted():
    problem, _, verdict = CHEATS["exit_during_check"]
    d = run_integrity(FIX / "problems" / f"{problem}.py", FIX / "cheats" / "exit_during_check.py", seed=11)
    assert d["verdict"] == verdict.value == "exited" and not d["accepted"] and not d["correct"]
    assert d["culprit"] == "candidate" and d["exitcode"] == 0
    h = run_harness(FIX / "problems" / f"{problem}.py", FIX / "cheats" / "exit_during_check.py", seed=11)
    assert h["status"] == "exited" and not h["correct"] and "candidate: forward" in h["step"]


def test_cheats_that_pass_plain_correctness_are_still_caught():
    """The pointer and fingerprint caches, the hard-coded divisor, the side stream, the inherited
    forward and the call counter all pass fresh random input sets: only their probes expose them."""
    for cheat in ("cache_by_pointer", "fingerprint_cache", "hardcoded_shape", "side_stream", "torch_only",
                  "inherited_forward", "count_calls", "fake_transpose"):
        problem = CHEATS[cheat][0]
        report = check_integrity(FIX / "problems" / f"{problem}.py", FIX / "cheats" / f"{cheat}.py", seed=3,
                                 probes=("static", "torch-only"))
        assert report.correct, cheat


def test_inherited_and_patched_forwards_are_torch_only_at_run_time():
    for cheat, op in (("inherited_forward", "aten::silu"), ("patched_forward", "aten::sum")):
        problem = CHEATS[cheat][0]
        report = check_integrity(FIX / "problems" / f"{problem}.py", FIX / "cheats" / f"{cheat}.py", seed=3,
                                 probes=("static", "torch-only"))
        (hit,) = report.flags("torch-only")
        assert op in hit.witness["aten_compute_ops"] and hit.witness["own_launches"] == []
        assert report.verdict is IntegrityVerdict.TORCH_ONLY and not report.flags("probe:")
    # the patched class defines a Triton kernel: the source shows it, the call never launches it
    honest = check_integrity(FIX / "problems" / "rowsum.py", FIX / "honest" / "rowsum.py", seed=3,
                             probes=("torch-only",))
    (ok,) = honest.checks
    assert ok.reason.startswith("passed") and any(x.startswith("triton:") for x in ok.details["own_launches"])


def test_fingerprint_cache_is_answered_from_the_cache_when_half_the_input_is_kept():
    report = check_integrity(FIX / "problems" / "add.py", FIX / "cheats" / "fingerprint_cache.py", seed=5,
                             probes=("cache",))
    (hit,) = report.flags("cached-output")
    assert hit.witness["variant"] == "first half of every input unchanged"


def test_count_calls_is_caught_by_the_harness_after_timing_too():
    """When the timer calls it more often than the checker did, the set checked after timing exposes
    it (on a GPU the graph capture alone makes hundreds of calls; here 20 timed calls)."""
    from formloop.measure.harness import evaluate
    from formloop.measure.timer import TimingPolicy

    res = evaluate(FIX / "problems" / "add.py", FIX / "cheats" / "count_calls.py", sets=2, seed=4,
                   policy=TimingPolicy(min_reps=20))
    assert all(c.ok for c in res.sets) and not res.correct
    assert not res.after_timing.ok and res.after_timing.reason.startswith("after timing")


def test_lazy_subclass_output_is_not_a_result():
    from formloop.measure.harness import evaluate

    res = evaluate(FIX / "problems" / "silu.py", FIX / "cheats" / "lazy_output.py", sets=1, seed=2, timing=False)
    assert not res.correct and "subclass" in res.sets[0].reason


def test_zeros_pass_a_fixed_atol_but_not_magnitude_aware_tolerance():
    report = check_integrity(FIX / "problems" / "softmax_wide.py", FIX / "cheats" / "zeros_small_output.py",
                             seed=5, probes=("trivial",))
    assert not report.correct
    (hit,) = report.flags("trivial-output")
    assert hit.witness["passes_fixed_atol_1e-2"] is True
    assert hit.witness["reference_rms"] < 1e-2


def test_freed_output_cheat_matches_only_under_allocator_reuse():
    report = check_integrity(FIX / "problems" / "add.py", FIX / "cheats" / "freed_reference_read.py",
                             seed=2, probes=("memory",))
    (hit,) = report.flags("freed-output-reuse")
    assert hit.witness["recycled_match"] is True
    assert report.flags("uninitialized-read")[0].witness["moved_fraction"] == 1.0


def test_half_reduction_evidence_names_the_skipped_region():
    report = check_integrity(FIX / "problems" / "rowsum.py", FIX / "cheats" / "half_reduction.py", seed=4,
                             probes=("skipped",))
    (hit,) = report.flags("skipped-computation")
    assert hit.witness["input"] == 0 and hit.witness["axis"] == 1
    assert hit.witness["region"] in ("[256:512]", "[1:512:2]")
    assert hit.witness["fraction"] > 0.4


def test_a_probe_that_crashes_is_a_probe_failure_never_minor():
    """A probe that cannot finish (here the candidate raises inside it) is reported as probe-failed,
    which is never accepted (a crash scored 'minor' once let a torch-only attempt through)."""
    class Weird(torch.nn.Module):
        def forward(self, x, y):
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls > 3:
                raise RuntimeError("only three calls")
            return x + y

    report = check_integrity(FIX / "problems" / "add.py", Weird, seed=1, probes=("unseen", "memory"))
    failed = report.flags("probe:memory")
    assert failed and failed[0].details["severity"] == "probe-failed"
    assert report.verdict is IntegrityVerdict.PROBE_FAILED and not report.accepted


@pytest.mark.parametrize("name", HONEST)
def test_honest_implementation_is_not_flagged(name):
    report = check_integrity(FIX / "problems" / f"{name}.py", FIX / "honest" / f"{name}.py", seed=7)
    assert report.correct
    assert report.flags() == [], [(c.obligation, c.reason) for c in report.flags()]
    assert report.verdict is IntegrityVerdict.CLEAN and report.accepted
    # every detector ran or said why it could not
    assert {"torch-only", "static-scan", "cached-output", "input-mutation", "uninitialized-read", "freed-output-reuse",
            "skipped-computation", "side-stream", "silent-launch-failure", "trivial-output", "lazy-output",
            "call-count"} <= {c.obligation for c in report.checks}


def test_at_least_ten_honest_implementations():
    assert len(HONEST) >= 10
