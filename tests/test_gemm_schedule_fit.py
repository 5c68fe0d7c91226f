"""A schedule-aware calibration of gemm-tiling-gpu (issue 18 part 1): the schedules' own terms (stream-K's
mainloop rate eta_sk, its scattered-wave re-reads h_sk, its fix-up t_sk) are fitted from a measured menu
that spans the schedules, and the re-solve under the fit picks what the measurements favour.

Independent check: the synthetic "gpu" times are the schedule family's cost under a known TRUTH in which
stream-K runs slower than the priors say; the truth's own per-shape optimum (enumerated) is the target."""
from __future__ import annotations

import math

import numpy as np
import pytest

from formloop import api
from formloop.api.resolve import stored_calibration
from formloop.evaluate.calibrate import Point, predict
from formloop.hw.chips import get_chip
from formloop.library import get_template, template_factory
from formloop.library import gemm_tiling_gpu as g
from formloop.library.gemm_tiling import workload
from formloop.population import Population
from formloop.population import calibrations as cal
from formloop.settings import Settings
from formloop.solve import enumerate_designs
from formloop.solve.enumerate import feasible_mask, term_grid

TRUTH = {"eta_sk": 0.6, "h_sk": 0.9, "eta_mma": 0.7}
SHAPES = [(2304, 2048, 4096), (8192, 8192, 8192), (64, 1024, 2048)]
TOOLCHAIN = "triton 3.6.0; torch 2.11.0; cuda 12.8; capability 9.0"


def _sched(calibration=None):
    return get_template("gemm-tiling-gpu", dtype="bf16", schedules=True, calibration=calibration)


def _menu(f, per_schedule: int = 3) -> list[dict]:
    """The prior model's best `per_schedule` designs of each schedule (what a benchmark measures)."""
    names = [d.name for d in f.template.decisions]
    menus = [d.decision.menu for d in f.template.decisions]
    cost = np.where(feasible_mask(f), term_grid(f, f.cost), np.inf)
    out = []
    for sc in (0, 1, 2):
        sub = np.take(cost, sc, axis=names.index("SC"))
        order = np.argsort(sub, axis=None)[:per_schedule]
        rest = [n for n in names if n != "SC"]
        for flat in order:
            idx = np.unravel_index(flat, sub.shape)
            a = {n: menus[names.index(n)][i] for n, i in zip(rest, idx)}
            out.append({**a, "SC": sc})
    return out


def _store(pop):
    chip, t = get_chip("h200"), _sched()
    for s in SHAPES:
        w = workload(s, "bf16")
        for a in _menu(t.formulate(w, chip)):
            us = float(predict(t, chip, [Point(a, w, 0.0)], TRUTH)[0])
            cal.add_point(pop, template=g.NAME, dtype="bf16", chip="h200", toolchain=TOOLCHAIN, device="synthetic",
                          workload=w, assignment=a, latency_us=us, source="test")


def _schedules_factory(**kw):
    return template_factory(g.NAME)(schedules=True, **kw)


def test_prior_and_truth_disagree_on_stream_k():
    # The premise: under the priors stream-K wins 2304x2048x4096; under TRUTH it does not.
    chip, w = get_chip("h200"), workload(SHAPES[0], "bf16")
    assert enumerate_designs(_sched().formulate(w, chip)).assignment["SC"] == 2
    assert enumerate_designs(_sched(TRUTH).formulate(w, chip)).assignment["SC"] != 2


def test_schedule_aware_fit_moves_the_picks(tmp_path):
    chip = get_chip("h200")
    with Population(tmp_path / "p.db") as pop:
        _store(pop)
        new, note = cal.learn(pop, _schedules_factory, chip, template=g.NAME, dtype="bf16", chip="h200",
                              toolchain=TOOLCHAIN, source="test", iterations=40, max_terms=6,
                              first=g.SCHED_CALIBRATED)
    assert new is not None, note
    assert set(g.SCHED_CALIBRATED) <= set(new.fitted)
    assert new.rms_after < 0.5 * new.rms_before
    assert new.terms["eta_sk"] == pytest.approx(TRUTH["eta_sk"], rel=0.15)
    fitted = _sched(dict(new.terms))
    for s in SHAPES:
        w = workload(s, "bf16")
        want = enumerate_designs(_sched(TRUTH).formulate(w, chip)).assignment["SC"]
        assert enumerate_designs(fitted.formulate(w, chip)).assignment["SC"] == want, s


def test_the_default_term_order_cannot_express_it(tmp_path):
    # The diagnosis: the online fit's six terms (LEARN_ORDER) price every schedule alike, so the refit
    # cannot make stream-K slower than persistent; on 8192^3 it leaves the truth's pick (persistent).
    chip, w = get_chip("h200"), workload((8192, 8192, 8192), "bf16")
    with Population(tmp_path / "p.db") as pop:
        _store(pop)
        new, _ = cal.learn(pop, _schedules_factory, chip, template=g.NAME, dtype="bf16", chip="h200",
                           toolchain=TOOLCHAIN, source="test", iterations=40, max_terms=6)
    assert not set(g.SCHED_CALIBRATED) & set(new.fitted)
    assert enumerate_designs(_sched(dict(new.terms)).formulate(w, chip)).assignment["SC"] != \
        enumerate_designs(_sched(TRUTH).formulate(w, chip)).assignment["SC"]


def test_a_fit_without_the_schedules_ignores_their_points_and_keeps_their_terms(tmp_path):
    chip = get_chip("h200")
    with Population(tmp_path / "p.db") as pop:
        _store(pop)
        first, _ = cal.learn(pop, _schedules_factory, chip, template=g.NAME, dtype="bf16", chip="h200",
                             toolchain=TOOLCHAIN, source="test", first=g.SCHED_CALIBRATED)
        # The data-parallel family (SC implicit 0) refits on the SC = 0 points only, carrying eta_sk over.
        second, note = cal.learn(pop, template_factory(g.NAME), chip, template=g.NAME, dtype="bf16", chip="h200",
                                 toolchain=TOOLCHAIN, source="test")
    assert second is not None, note
    assert second.points == 3 * len(SHAPES) and first.points == 9 * len(SHAPES)
    assert second.terms["eta_sk"] == first.terms["eta_sk"]
    assert not set(g.SCHED_CALIBRATED) & set(second.fitted)


def test_solve_reads_the_schedule_fit_and_says_so(tmp_path):
    s = Settings(store_path=tmp_path / "p.db")
    with Population(s.store_path) as pop:
        _store(pop)
        new, _ = cal.learn(pop, _schedules_factory, get_chip("h200"), template=g.NAME, dtype="bf16", chip="h200",
                           toolchain=TOOLCHAIN, source="test", first=g.SCHED_CALIBRATED)
    found, _ = stored_calibration(g.NAME, "bf16", "h200", s)
    assert found is not None and found.id == new.id and "eta_sk" in found.terms
    r = api.solve("gemm-tiling", "4096,4096,4096", chip="h200", dtype="bf16", solver="enumerate", settings=s)
    assert r["calibration_source"] == found.describe() and r["calibration"] == found.key
    assert math.isfinite(r["objective_us"])


def test_solve_with_schedules_reads_the_fit_and_picks_what_it_says(tmp_path):
    s = Settings(store_path=tmp_path / "p.db")
    with Population(s.store_path) as pop:
        _store(pop)
        new, _ = cal.learn(pop, _schedules_factory, get_chip("h200"), template=g.NAME, dtype="bf16", chip="h200",
                           toolchain=TOOLCHAIN, source="test", iterations=40, first=g.SCHED_CALIBRATED)
    shape = "x".join(map(str, SHAPES[0])).replace("x", ",")
    r = api.solve(g.NAME, shape, chip="h200", dtype="bf16", solver="enumerate", settings=s,
                  options={"schedules": "true"})
    assert r["calibration"] == new.key and "SC" in r["design"]
    want = enumerate_designs(_sched(dict(new.terms)).formulate(workload(SHAPES[0], "bf16"), get_chip("h200")))
    assert r["design"] == dict(want.assignment) and r["design"]["SC"] != 2  # stream-K is no longer picked
    with pytest.raises(Exception, match="schedules"):
        api.solve(g.NAME, shape, chip="h200", dtype="bf16", solver="enumerate", settings=s,
                  options={"schedules": "maybe"})
