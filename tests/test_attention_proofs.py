"""The attention proofs: the online-softmax chain (symbolic), the key walks (every length), each
injected fault caught with a replayed counterexample, and the replay interpreter against brute
force and direct softmax."""
from __future__ import annotations

import math
import random

import pytest

from formloop.errors import InvalidInput
from formloop.library.attention_program import FAULTS, check_fault, check_program, decode_program, prefill_program
from formloop.verify import Verdict
from formloop.verify.attention_replay import (
    Loop, SoftmaxArithmetic, replay_causal_walk, replay_softmax, replay_split_walk,
)
from formloop.verify.kv_cover import CausalWalk, SplitWalk, check_causal_walk, check_split_walk, check_tile_loop
from formloop.verify.softmax_merge import EXP, SOFTMAX_OBLIGATIONS, axiom_instances, check_softmax

DEFECT = {  # fault -> words the replay must contain
    "split-overlap": "is read by splits [0, 1]",
    "dropped-tail": "is read by no split",
    "unguarded-tail": "beyond the",
    "stale-max": "differs from softmax attention",
    "missing-rescale": "differs from softmax attention",
    "causal-off-by-one": "a future token contributes",
    "causal-diagonal": "never sees key",
    "rope-uncut": "from the cache, where this launch writes the new key",
    "rope-partial-dropped": "is read by no split",
}


def test_correct_programs_prove_every_obligation():
    for prog in (decode_program(), prefill_program()):
        results = check_program(prog, tiles=(16, 64), packs=(1, 4))
        assert results and all(r.proved for r in results), [(r.obligation, r.verdict, r.reason) for r in results]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_is_caught_with_a_replayed_counterexample(fault):
    results = {r.obligation: r for r in check_fault(fault)}
    responsible = FAULTS[fault][1]
    for name in responsible:
        r = results[name]
        assert r.verdict is Verdict.COUNTEREXAMPLE, (fault, name, r.reason)
        assert DEFECT[fault] in r.replay, r.replay
        assert r.witness
    others = [r for n, r in results.items() if n not in responsible and r.verdict is not Verdict.PROVED]
    assert not [r for r in others if r.verdict is Verdict.COUNTEREXAMPLE and not r.replay], others


def test_fault_names_are_checked():
    with pytest.raises(InvalidInput, match="fault"):
        check_fault("no-such-fault")
    with pytest.raises(InvalidInput, match="decode fault"):
        decode_program("causal-diagonal")


def test_softmax_proof_is_symbolic_and_needs_the_exp_law():
    """Without exp(a)·exp(b) = exp(a+b) the merge does not follow: the proof rests on the law, not
    on sampled values (and the query holds no numeric value of exp)."""
    results = {r.obligation: r for r in check_softmax()}
    assert set(results) == set(SOFTMAX_OBLIGATIONS) and all(r.proved for r in results.values())
    assert "(declare-fun exp (Real) Real)" in results["merge-step"].query
    import z3
    a, b = z3.Reals("a b")
    claim = EXP(a) * EXP(b) == EXP(a + b)
    s = z3.Solver()
    s.add(z3.Not(claim))  # the law itself is not a theorem of the uninterpreted function
    assert s.check() == z3.sat
    s = z3.Solver()
    s.add(*axiom_instances([EXP(a), EXP(b)]), z3.Not(claim))
    assert s.check() == z3.unsat


@pytest.mark.parametrize("arith", [SoftmaxArithmetic(), SoftmaxArithmetic(rescale_sum=False)])
def test_replay_softmax_against_direct_softmax(arith):
    rng = random.Random(3)
    for _ in range(30):
        splits = [[[rng.uniform(-30, 30) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 3))]
                  for _ in range(rng.randint(1, 4))]
        flat = [s for sp in splits for t in sp for s in t]
        values = [rng.uniform(-1, 1) for _ in flat]
        rep = replay_softmax(arith, splits, values)
        top = max(flat)
        w = [math.exp(s - top) for s in flat]
        assert rep.reference == pytest.approx(sum(a * v for a, v in zip(w, values)) / sum(w), rel=1e-12, abs=1e-12)
        if arith == SoftmaxArithmetic():
            assert rep.rel_error < 1e-9 or abs(rep.output - rep.reference) < 1e-12


def test_split_walk_brute_force_matches_the_proof():
    """The replayed walk reads every key exactly once whatever the split count (trailing splits may be
    empty); the kernel's host mirror computes the same ranges."""
    from formloop.library.attention_decode_kernel import kv_split

    for L in (1, 2, 15, 16, 17, 63, 100, 257, 1000):
        for T in (16, 64, 256):
            tiles = -(-L // T)
            for KS in (1, 2, 3, 8, 16):
                walk = SplitWalk()
                assert walk.ranges(L, T, KS) == kv_split(L, T, KS)
                per = walk.per_split(L, T, KS)
                rep = replay_split_walk(L, walk.loops(L, T, KS))
                assert not rep.kinds, (L, T, KS, rep.text)
                if (KS - 1) * per >= tiles:  # the last split is empty, and the first never is
                    assert walk.ranges(L, T, KS)[-1][0] >= L and walk.ranges(L, T, KS)[0][0] < L


def test_causal_walk_brute_force():
    for L in (1, 5, 64, 65, 130):
        for Br, Bc in ((64, 64), (64, 32), (128, 32), (16, 16)):
            rep = replay_causal_walk(L, Br, CausalWalk().blocks(L, Br, Bc))
            assert not rep.kinds, (L, Br, Bc, rep.text)
            assert rep.visits == L * (L + 1) // 2  # the causal pair count (sol.ops.causal_pairs)


def test_causal_walk_needs_bc_to_divide_br():
    results = {r.obligation: r for r in check_causal_walk(aligned=False)}
    assert results["causal-exact-once"].verdict is Verdict.COUNTEREXAMPLE
    assert "times" in results["causal-exact-once"].replay


def test_tile_loop_lemma_and_its_replay_free_failure():
    assert check_tile_loop(64).proved and check_tile_loop(32, masked=False).proved
    assert Loop(3, 10, 4, 9).positions() == [3, 4, 5, 6, 7, 8]
    assert Loop(3, 10, 4).positions() == list(range(3, 11))


def test_split_walk_witness_prefers_the_design():
    r = {x.obligation: x for x in check_split_walk(SplitWalk(floor_tiles=True), prefer=(64, 16))}["kv-coverage"]
    assert r.verdict is Verdict.COUNTEREXAMPLE and (r.witness["T"], r.witness["KS"]) == (64, 16)


def test_lemma_witnesses_are_replayed():
    """The lemmas have replays too: tile-in-page without its precondition (T divides the page size)
    is refuted by a replayed counterexample, and each lemma replay flags a wrong point."""
    from formloop.verify.attention_replay import (
        replay_head_packing, replay_paged_address, replay_tile_in_page, replay_tile_loop,
    )
    from formloop.verify.kv_cover import check_tile_in_page

    r = check_tile_in_page(64, aligned=False)
    assert r.verdict is Verdict.COUNTEREXAMPLE and "its own page" in r.replay
    assert check_tile_in_page(64).proved
    for lo, hi, cut in ((0, 17, 17), (3, 40, 30), (5, 5, 9), (2, 33, None)):  # the lemma on a grid of points
        assert not any(replay_tile_loop(lo, hi, 16, cut, k).kinds for k in range(-2, 60))
    assert not replay_head_packing(2, 8, 4, 9).kinds
    assert "lemma" in replay_paged_address(5, 4, 2, 2).kinds  # entry 2 of a 2-page cache: outside
    assert "lemma" in replay_tile_in_page(48, 0, 64, 50).kinds and not replay_tile_in_page(128, 1, 64, 70).kinds
