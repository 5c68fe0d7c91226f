"""Proofs that follow the chip: K1/K3 with chip parameters symbolic over ranges or menus, the
certificate's record of it, and the check that a given chip is covered.

Independent checks: the numpy enumerator finds a feasible design (or none) at chips sampled from
the proved range; a counterexample's chip is re-checked by enumerating the joint menu."""
from dataclasses import replace

import numpy as np
import pytest

from formloop.errors import InvalidInput
from formloop.expr import evaluate, grid_env
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.verify import Certificate, ParamScope, Verdict, check_k1, check_k3, prove_template

MS_RANGE = (16 * 1024, 256 * 1024)
R_MENU = [4096, 16384, 32768, 65536]


@pytest.fixture(scope="module")
def tiling():
    return get_template("gemm-tiling")


@pytest.fixture(scope="module")
def symbolic(tiling):
    return prove_template(tiling, chip_ranges={"Ms": MS_RANGE, "R_acc": R_MENU})


def feasible_count(t, values):
    env = {**grid_env(t.decisions), **values}
    shape = tuple(len(d.decision.menu) for d in t.decisions)
    mask = np.ones(shape, dtype=bool)
    for c in t.constraints:
        mask &= np.broadcast_to(np.asarray(evaluate(c.expr, env), dtype=bool), shape)
    return int(mask.sum())


def test_symbolic_certificate_is_proved_and_says_so(symbolic):
    assert symbolic.verdict is Verdict.PROVED
    assert symbolic.chip["mode"] == "symbolic" and symbolic.chip["read"] == ["Ms", "R_acc"]
    text = symbolic.chip_statement()
    assert "symbolic over Ms in [16384, 262144]" in text and "R_acc in {4096, 16384, 32768, 65536}" in text
    k1 = next(r for r in symbolic.obligations if r.obligation == "K1")
    assert "Ms" not in k1.details.get("fixed", {}) and k1.details["symbolic"]["Ms"] == MS_RANGE
    # the schedule checks range over the same chips: every (S, P, beta) the exact contract admits
    assert sum(r.obligation.startswith("lifetime[") for r in symbolic.obligations) == 9


def test_every_chip_in_the_range_has_a_design(tiling, symbolic):
    # what K3 claims, checked by enumeration at chips across the proved range and menu
    base = tiling.bind_chip(get_chip("illustrative"))
    for ms in np.linspace(*MS_RANGE, 9).astype(int):
        for r_acc in R_MENU:
            values = {**base, "Ms": int(ms), "R_acc": r_acc, "M": 7, "N": 9, "K": 11, "e": 4}
            assert symbolic.covers(values)
            assert feasible_count(tiling, values) > 0


def test_coverage_of_given_chips(tiling, symbolic):
    illustrative = tiling.bind_chip(get_chip("illustrative"))
    assert symbolic.uncovered(illustrative) == []
    assert "outside the proved range" in symbolic.uncovered({**illustrative, "Ms": 8192})[0]
    assert "not on the proved menu" in symbolic.uncovered({**illustrative, "R_acc": 20000})[0]
    # parameters no rule reads (bandwidth, SM count, ...) never make a chip uncovered
    assert symbolic.covers({**illustrative, "bw": 1.0, "n_sm": 7})
    fixed = prove_template(tiling)
    assert fixed.chip["mode"] == "fixed" and fixed.chip["fixed"] == {"Ms": 98304, "R_acc": 32768}
    assert fixed.chip_statement().startswith("chip: fixed (Ms=98304, R_acc=32768)")
    assert fixed.covers({**illustrative, "bw": 2.0})
    assert fixed.uncovered({**illustrative, "Ms": 65536}) == ["Ms=65536, but the proof fixed Ms=98304"]


def test_a_purchased_chip_is_proved_on_its_own(tiling):
    bigger = replace(get_chip("illustrative"), smem_per_block=160 * 1024)
    values = tiling.bind_chip(bigger)
    cert = prove_template(tiling, chip=values)
    assert cert.verdict is Verdict.PROVED and cert.chip["pinned"] and cert.covers(values)
    assert not cert.covers(tiling.bind_chip(get_chip("illustrative")))
    again = Certificate.from_json(cert.to_json()).recheck(tiling)
    assert again.agrees, again.changes


def test_symbolic_certificate_round_trips_and_rechecks(tiling, symbolic):
    back = Certificate.from_json(symbolic.to_json())
    assert back.chip_statement() == symbolic.chip_statement()
    assert back.covers(tiling.bind_chip(get_chip("illustrative")))
    assert back.recheck(tiling).agrees


def test_k3_finds_the_chip_in_a_range_that_fits_no_design(tiling):
    r = check_k3(tiling, scope=ParamScope({"e": 4}, {"Ms": (100, 98304)}, {"R_acc": (32768,)}))
    assert r.verdict is Verdict.COUNTEREXAMPLE
    ms = r.witness["Ms"]
    assert 100 <= ms < 1024  # the smallest slot set (16x16 tiles, Tk 8, S 1, fp32) needs 1024 bytes
    assert feasible_count(tiling, {**r.witness, "e": 4}) == 0


def test_k1_counterexample_names_a_chip_inside_the_range():
    weak = get_template("gemm-tiling", pre="weak")
    r = check_k1(weak, scope=ParamScope({"e": 4}, {"Ms": MS_RANGE}, {"R_acc": tuple(R_MENU)}))
    assert r.verdict is Verdict.COUNTEREXAMPLE
    w = r.witness
    assert MS_RANGE[0] <= w["Ms"] <= MS_RANGE[1] and w["R_acc"] in R_MENU
    env = {**w, "e": 4}
    assert all(bool(evaluate(c.expr, env)) for c in weak.constraints)
    assert not bool(evaluate(weak.preconditions[0].expr, env))


def test_gpu_contract_k3_over_every_extent_and_a_range_of_chips():
    # C4 and C5 read K and N: K3 says every K, N >= 1 admits a design, on every chip in the range
    gpu = get_template("gemm-tiling-gpu", dtype="bf16")
    scope = ParamScope({"e": 2}, {"Ms": (64 * 1024, 256 * 1024)}, {"acc_regs": (64, 128, 255)})
    r = check_k3(gpu, scope=scope)
    assert r.verdict is Verdict.PROVED
    values = {**gpu.bind_chip(get_chip("h200")), "e": 2, "Ms": 64 * 1024, "acc_regs": 64}
    for K, N in ((1, 1), (7, 9), (4096, 4096), (1000, 1001)):
        assert any(all(bool(evaluate(c.expr, {**values, **d, "M": 3, "N": N, "K": K})) for c in gpu.constraints)
                   for d in r.witness["designs"])


@pytest.mark.parametrize("ranges, field", [
    ({"M": (1, 2)}, "chip_ranges parameter"), ({"Ms": (5, 1)}, "range of Ms"),
    ({"Ms": "big"}, "chip_ranges\\[Ms\\]"), ({"Ms": []}, "chip_ranges\\[Ms\\]"),
])
def test_bad_chip_ranges_name_the_field(tiling, ranges, field):
    with pytest.raises(InvalidInput, match=field):
        prove_template(tiling, chip_ranges=ranges)


def test_certificates_say_what_they_prove_about_the_extents(tiling):
    # gemm-tiling's rules read no extent: K1/K3 hold trivially in M, N, K, which enter through the
    # index obligations (every extent >= 1); the GPU contract's C4/C5 read K and N.
    cert = prove_template(tiling)
    assert cert.workload == {"fixed": {"e": 4}, "read": [], "unread": ["M", "N", "K"],
                             "lower": {"M": 1, "N": 1, "K": 1}}
    assert "M, N, K symbolic but read by no constraint" in cert.workload_statement()
    assert all(r.details["scope"] == "every M >= 1" for r in cert.obligations if r.obligation.startswith("coverage[M"))
    gpu = prove_template(get_template("gemm-tiling-gpu", dtype="bf16"))
    assert gpu.verdict is Verdict.PROVED and gpu.workload["read"] == ["N", "K"]
    assert "K1/K3 hold for every N >= 1, K >= 1" in gpu.workload_statement()
    assert Certificate.from_json(gpu.to_json()).workload == gpu.workload
