"""Schedule obligations: the Z3 event model against the independent replay interpreter."""
import random

import pytest

from formloop.errors import InvalidInput
from formloop.library.gemm_tiling_program import verify_schedule
from formloop.verify import Schedule, Verdict
from formloop.verify.events import warp_program
from formloop.verify.replay import explore_interleavings, replay_trace

COMBOS = [(S, P, b) for S in (1, 2, 3) for P in range(4) for b in (0, 1)]


@pytest.mark.parametrize("S,P,beta", COMBOS)
def test_safe_set_is_exactly_the_precondition(S, P, beta):
    readiness, lifetime = verify_schedule(S, P, beta)
    safe = readiness.proved and lifetime.proved
    assert safe == (P <= S - 2 + beta)
    assert readiness.proved  # the leading barrier makes every read ready
    if not safe:  # every rejected schedule fails lifetime, with a replayed overwrite
        assert lifetime.verdict is Verdict.COUNTEREXAMPLE
        assert "overwritten" in lifetime.replay and "instead of" in lifetime.replay


def brute_force(s: Schedule) -> dict[str, bool]:
    found = explore_interleavings(S=s.S, P=s.P, beta=s.beta, warps=s.warps, phases=s.phases, leading=s.leading)
    return {"readiness": not ({"uninitialized", "stale"} & set(found)), "lifetime": "overwritten" not in found}


def random_models(n, seed=7):
    rng = random.Random(seed)
    seen = set()
    while len(seen) < n:
        seen.add((rng.randint(1, 3), rng.randint(0, 3), rng.randint(0, 1), rng.randint(1, 3), rng.randint(1, 6),
                  rng.random() < 0.8))
    return sorted(seen)


@pytest.mark.parametrize("S,P,beta,warps,phases,leading", random_models(40))
def test_checker_equals_brute_force_over_every_interleaving(S, P, beta, warps, phases, leading):
    s = Schedule(S, P, beta, warps, phases, leading)
    results = verify_schedule(S, P, beta, warps=warps, phases=phases, leading=leading)
    expected = brute_force(s)
    for r in results:
        name = r.obligation.split("[")[0]
        assert r.proved == expected[name], (r.obligation, r.replay)
        if not r.proved:
            assert r.verdict is Verdict.COUNTEREXAMPLE and r.trace and r.replay


def test_counterexample_traces_are_valid_interleavings():
    for S, P, beta in [(2, 1, 0), (1, 1, 1), (3, 2, 0)]:
        _, lifetime = verify_schedule(S, P, beta)
        r = replay_trace(lifetime.trace, S=S, P=P, beta=beta, warps=2, phases=5)
        assert r.valid and "overwritten" in r.kinds


def test_replay_rejects_a_trace_that_jumps_a_barrier():
    s = Schedule(2, 1, 1)
    w0, w1 = warp_program(s, 0), warp_program(s, 1)
    bad = tuple(w0 + w1)  # warp 0 runs to the end before warp 1 reaches the first barrier
    r = replay_trace(bad, S=2, P=1, beta=1, warps=2, phases=5)
    assert not r.valid and "barrier" in r.text


def test_replay_of_a_correct_sequential_trace_is_clean():
    s = Schedule(1, 0, 0, warps=1, phases=4)  # one warp: no other warp can race it
    r = replay_trace(tuple(warp_program(s, 0)), S=1, P=0, beta=0, warps=1, phases=4)
    assert r.valid and not r.kinds and "exactly its 4 terms" in r.text


def test_missing_leading_barrier_reads_uninitialized_slots():
    readiness, lifetime = verify_schedule(3, 1, 0, leading=False)
    assert readiness.verdict is Verdict.COUNTEREXAMPLE and "uninitialized" in readiness.replay
    assert lifetime.verdict is Verdict.COUNTEREXAMPLE


def test_bad_schedule_values_name_the_field():
    with pytest.raises(InvalidInput, match="beta"):
        Schedule(2, 1, 2)
    with pytest.raises(InvalidInput, match="S"):
        Schedule(0, 1, 0)
