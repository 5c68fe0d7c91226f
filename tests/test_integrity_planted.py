"""The planted-cheat suite and the honest suite: every cheat is flagged by the detector made for it,
with evidence and a replayable trace; no honest implementation is flagged at all."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run in the interpreter on CPU

import json
from pathlib import Path

import pytest

from formloop.measure.probes import check_integrity
from formloop.measure.integrity import IntegrityVerdict

FIX = Path(__file__).parent / "fixtures" / "integrity"

SUITE = json.loads((FIX / "suite.json").read_text())
# cheat -> (problem, detector that must fire, verdict)
CHEATS = {k: (p, d, IntegrityVerdict(v)) for k, (p, d, v) in SUITE["cheats"].items()}
HONEST = sorted(p.stem for p in (FIX / "honest").glob("*.py"))
assert HONEST == sorted(SUITE["honest"])


@pytest.mark.parametrize("cheat", sorted(CHEATS))
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
    if detector != "torch-only":
        assert hit.trace, "a dynamic flag carries the steps that reproduce it"


def test_cheats_that_pass_plain_correctness_are_still_caught():
    """The pointer cache, the hard-coded divisor and the side stream all pass fresh random input sets:
    only their dedicated probes expose them."""
    for cheat in ("cache_by_pointer", "hardcoded_shape", "side_stream", "torch_only"):
        problem = CHEATS[cheat][0]
        report = check_integrity(FIX / "problems" / f"{problem}.py", FIX / "cheats" / f"{cheat}.py", seed=3)
        assert report.correct, cheat
        assert report.verdict in (IntegrityVerdict.GAMING, IntegrityVerdict.TORCH_ONLY), cheat


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


def test_mutating_cheat_agrees_with_a_reference_run_afterwards():
    report = check_integrity(FIX / "problems" / "add.py", FIX / "cheats" / "mutate_input.py", seed=2,
                             probes=("mutation",))
    (hit,) = report.flags("input-mutation")
    assert hit.witness["reference_after_agrees"] is True and hit.witness["correct_on_pristine"] is False
    assert hit.witness["changes"][0]["input"] == 1


def test_half_reduction_evidence_names_the_skipped_region():
    report = check_integrity(FIX / "problems" / "rowsum.py", FIX / "cheats" / "half_reduction.py", seed=4,
                             probes=("skipped",))
    (hit,) = report.flags("skipped-computation")
    assert hit.witness["input"] == 0 and hit.witness["axis"] == 1
    assert hit.witness["region"] in ("[256:512]", "[1:512:2]")
    assert hit.witness["fraction"] > 0.4


@pytest.mark.parametrize("name", HONEST)
def test_honest_implementation_is_not_flagged(name):
    report = check_integrity(FIX / "problems" / f"{name}.py", FIX / "honest" / f"{name}.py", seed=7)
    assert report.correct
    assert report.flags() == [], [(c.obligation, c.reason) for c in report.flags()]
    assert report.verdict is IntegrityVerdict.CLEAN and report.accepted
    # every detector ran or said why it could not
    assert {"torch-only", "cached-output", "input-mutation", "uninitialized-read", "freed-output-reuse",
            "skipped-computation", "side-stream", "silent-launch-failure", "trivial-output"} <= {c.obligation for c in report.checks}


def test_at_least_ten_honest_implementations():
    assert len(HONEST) >= 10
