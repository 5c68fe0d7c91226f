"""The six injected faults, each rejected by the obligation responsible with a replayed defect,
and index obligations against brute-force replay of the loop nest."""
from dataclasses import replace

import pytest

from formloop.errors import InvalidInput
from formloop.library.gemm_tiling_program import FAULTS, PROVED_DESIGN, check_design, check_fault, program
from formloop.verify import Verdict
from formloop.verify.replay import AxisLoop, replay_tiling
from formloop.verify import check_index

EXPECTED = {  # fault -> {obligation: verdict}; unlisted obligations must be proved
    "floor-grid": {"coverage": Verdict.COUNTEREXAMPLE},
    "unguarded-tail": {"no-phantom": Verdict.COUNTEREXAMPLE},
    "overlapping-tiles": {"coverage": Verdict.UNRESOLVED, "exact-once": Verdict.COUNTEREXAMPLE},
    "single-buffer-prefetch": {"lifetime": Verdict.COUNTEREXAMPLE},
    "double-buffer-no-trailing": {"lifetime": Verdict.COUNTEREXAMPLE},
    "missing-leading-barrier": {"readiness": Verdict.COUNTEREXAMPLE, "lifetime": Verdict.COUNTEREXAMPLE},
}
DEFECT = {
    "floor-grid": "misses 8 reduction terms",
    "unguarded-tail": "outside C",
    "overlapping-tiles": "C[127,0] receives A[127,0]·B[0,0] twice",
    "single-buffer-prefetch": "instead of",
    "double-buffer-no-trailing": "one foreign term added",
    "missing-leading-barrier": "uninitialized",
}


def test_the_proved_design_passes_every_obligation():
    results = check_design(PROVED_DESIGN)
    assert [r.obligation for r in results] == ["coverage", "exact-once", "no-phantom", "readiness", "lifetime"]
    assert all(r.proved for r in results)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_is_caught_by_its_obligation(fault):
    results = {r.obligation: r for r in check_fault(fault)}
    for name, r in results.items():
        assert r.verdict is EXPECTED[fault].get(name, Verdict.PROVED), (fault, name, r.replay, r.reason)
    assert set(FAULTS[fault][1]) <= {n for n, v in EXPECTED[fault].items() if v is Verdict.COUNTEREXAMPLE}
    texts = " ".join(r.replay for r in results.values() if r.verdict is Verdict.COUNTEREXAMPLE)
    assert DEFECT[fault] in texts


def test_overlapping_coverage_is_unresolved_not_invented():
    cov = {r.obligation: r for r in check_fault("overlapping-tiles")}["coverage"]
    assert "no semantic witness" in cov.reason and "replay shows no missing defect" in cov.replay


def test_unknown_fault_names_the_choices():
    with pytest.raises(InvalidInput, match="floor-grid"):
        check_fault("off-by-one")


VARIANTS = {"ok": {}, "floor": {"floor": True}, "shrink": {"shrink": 1}, "unguarded": {"guarded": False}}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("tile", [4, 5, 8])
def test_index_verdicts_match_brute_force_over_extents(variant, tile):
    """Z3's verdict for every extent against replaying the loop nest at extents 1..4T."""
    spec = replace(program({"Tm": tile, "Tn": 16, "Tk": 8, "S": 2, "P": 0, "beta": 1}).axis("M"), **VARIANTS[variant])
    axis = spec.expr()
    one = AxisLoop(1, 1, 1, 1)
    seen = {"missing": False, "duplicate": False, "outside": False}
    for X in range(1, 4 * tile + 1):
        kinds = replay_tiling(spec.loop(X, tile), one, one).kinds
        for k in seen:
            seen[k] |= k in kinds
    for obligation, kind in (("coverage", "missing"), ("exact-once", "duplicate"), ("no-phantom", "outside")):
        r = check_index(axis, obligation, tile)
        if r.proved:  # sound: no extent in the brute-force range shows the defect
            assert not seen[kind], (variant, obligation)
        elif obligation != "coverage":  # exact-once and no-phantom queries are semantic
            assert seen[kind], (variant, obligation, r.witness)
        if seen[kind]:
            assert not r.proved
