"""The persistent and stream-K index obligations (Z3, every tiles, I, P >= 1) and the injected faults:
each fault is caught with a counterexample whose replay (the schedule run step by step) shows it."""
from __future__ import annotations

import pytest

from formloop.errors import InvalidInput
from formloop.library.gemm_tiling_sched_index import obligations, replay_persistent, replay_stream_k
from formloop.verify.outcome import Verdict

CAUGHT = {  # fault -> the obligations that must refute it
    "k-split-off-by-one": {"exact-once[stream-k]", "summed-once[stream-k]"},
    "skipped-tile": {"coverage[persistent]"},
    "double-counted-partial": {"summed-once[stream-k]"},
    "shared-slot": {"slots-distinct[stream-k]"},
}


def _verdicts(results):
    return {r.obligation: r for r in results}


def test_correct_schedules_are_proved():
    got = _verdicts(obligations(timeout_s=20))
    assert len(got) == 8
    for name, r in got.items():
        assert r.verdict is Verdict.PROVED, (name, r.reason)


@pytest.mark.parametrize("fault", sorted(CAUGHT))
def test_fault_is_caught_with_a_replayed_trace(fault):
    got = _verdicts(obligations(fault=fault, timeout_s=20))
    refuted = {n for n, r in got.items() if r.verdict is Verdict.COUNTEREXAMPLE}
    assert CAUGHT[fault] <= refuted, (fault, refuted)
    for n in CAUGHT[fault]:
        r = got[n]
        assert r.trace and r.replay and r.witness  # the replay's events, its account, the sizes
        again = (replay_persistent if "persistent" in n else replay_stream_k)(r.witness, fault)
        assert again.defects and again.trace == r.trace  # the witness replays to the same trace


def test_replay_sees_every_step_once_without_a_fault():
    for tiles in range(1, 7):
        for steps in range(1, 6):
            for progs in range(1, 12):
                w = {"tiles": tiles, "I": steps, "P": progs}
                assert replay_stream_k(w).defects == (), w
                assert replay_persistent(w).defects == (), w
    assert "overwritten" in replay_stream_k({"tiles": 2, "I": 5, "P": 3}, "shared-slot").defects


def test_unknown_fault_is_refused():
    with pytest.raises(InvalidInput, match="fault"):
        obligations(fault="nope")
