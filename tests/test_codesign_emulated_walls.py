"""codesign.emulated_walls: relax_walls' problem over chips the H200 emulates, checked against
independent computations (the bf16 shared-memory formula, accumulators a thread, brute-force picks)."""
from __future__ import annotations

import math

import pytest

from formloop.codesign.emulated_walls import EmulatedWallsProblem, design, library, walls_of
from formloop.codesign.walls import relax_walls
from formloop.evaluate.emulated import Walls, emulated_chip
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import workload
from formloop.solve import enumerate_designs

SCENARIOS = {"4096x4096x4096": workload((4096, 4096, 4096), "bf16"), "64x4096x4096": workload((64, 4096, 4096), "bf16")}


@pytest.fixture(scope="module")
def problem():
    t = get_template("gemm-tiling-gpu", dtype="bf16")
    base = get_chip("h200")

    def model_plays_gpu(w, sc):  # the model's time of the pick on the emulated chip
        return enumerate_designs(t.formulate(SCENARIOS[sc], emulated_chip(base, w))).objective

    return EmulatedWallsProblem(t, base, library(), SCENARIOS, model_plays_gpu)


def test_area_is_the_assumed_model_and_walls_map_back():
    lib = library()
    h = lib.chip(sm=33, smem=128, regs=128)
    assert h.area == pytest.approx(33 * (1.6 + 0.012 * 128 + 0.004 * 128 * 2))
    assert walls_of(h) == Walls(33, 128 * 1024, 128) and walls_of(lib.reference) == Walls(132, 227 * 1024, None)


def test_demands_fit_capacities_and_removal_relaxes_to_the_full_chip(problem):
    h = problem.library.chip(sm=16, smem=64, regs=128)
    for sc in SCENARIOS:
        opt = problem.solve_scenario(sc, h)
        a = design(opt.program)
        assert a["S"] * (a["Tm"] + a["Tn"]) * a["Tk"] * 2 / 1024 == problem.demand(sc, opt.program, "smem", h) <= 64
        assert problem.demand(sc, opt.program, "regs", h) == a["Tm"] * a["Tn"] / (32 * a["W"]) + 64 <= 128
        assert problem.admitted(sc, opt.program, h) == []
        free = problem.solve_scenario(sc, h, frozenset({"smem", "regs"}))
        full = problem.solve_scenario(sc, problem.library.chip(sm=16, smem=227, regs=255))
        assert free.program == full.program and free.ratio == full.ratio <= opt.ratio
    full_pick = problem.solve_scenario("4096x4096x4096", problem.library.reference).program
    assert set(problem.admitted("4096x4096x4096", full_pick, h)) == {"smem", "regs"}


def test_relaxation_with_the_model_as_evaluator_never_misses(problem):
    start = min(problem.library.chips(), key=lambda h: h.area)
    rel = relax_walls(problem, "worst", start, k=2, rounds=10, band=1.0)
    assert rel.purchases and rel.chip.area <= problem.library.ceiling_mm2
    for p in rel.purchases:  # the evaluator is the model here: predicted and measured drops agree
        assert p.evaluated_drop == pytest.approx(p.predicted_drop, rel=1e-9)
    assert math.isfinite(rel.evaluated) and rel.evaluated == pytest.approx(rel.L)
    best = min((max(problem.solve_scenario(sc, h).ratio for sc in SCENARIOS) for h in problem.library.chips()))
    assert rel.L >= best - 1e-12  # exhaustive over the grid is at least as good
