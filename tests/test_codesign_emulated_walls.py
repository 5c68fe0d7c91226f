"""codesign.emulated_walls: relax_walls' problem over chips the H200 emulates, checked against
independent computations (the bf16 shared-memory formula, accumulators a thread, brute-force picks)."""
from __future__ import annotations

import math

import pytest

from formloop.codesign.emulated_model import EmulatedModel
from formloop.codesign.emulated_walls import EmulatedWallsProblem, design, library, walls_of
from formloop.codesign.walls import relax_walls
from formloop.errors import InvalidInput
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

    model = EmulatedModel(t, base)

    def model_plays_gpu(w, sc):  # the model's time of the pick on the emulated chip
        return model.pick(SCENARIOS[sc], w)[1]

    return EmulatedWallsProblem(t, base, library(), SCENARIOS, model_plays_gpu, model=model)


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


# -- the occupancy-aware model (codesign.emulated_model) and relaxation against a synthetic evaluator --------

SHAPES3 = {"x".join(map(str, s)): workload(s, "bf16")
           for s in [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000)]}


def test_occupancy_by_hand_and_cost_at_k_virtual_sms():
    t, base = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    m, blind = EmulatedModel(t, base), EmulatedModel(t, base, occupancy=False)
    w, wl = Walls(16, 64 * 1024, 128), SHAPES3["4096x4096x4096"]
    a = {"Tm": 64, "Tn": 128, "Tk": 32, "S": 4, "W": 4, "KS": 1, "G": 8, "L": 1}
    # smem 4*(64+128)*32*2 = 48 KiB (+1 KiB reserve) -> 4 of 228 KiB; regs 64 acc + 64 = 128 a thread,
    # x 128 threads -> 4 of 64 Ki; warps 64 / 4 = 16; capped at MAX_OCC = 4
    assert m.occupancy_of(a, wl, w) == 4
    big = {"Tm": 128, "Tn": 128, "Tk": 64, "S": 3, "W": 8, "KS": 1, "G": 8, "L": 1}  # 96 KiB: 2 by smem and regs
    assert m.occupancy_of(big, wl, Walls(16, 128 * 1024, 128)) == 2
    # occupancy k = the family's formula with k x the SMs, each at 1/k of the L2 feed
    chip = emulated_chip(base, w)
    bw_sm = t.bind(wl, chip)["bw_sm"]
    t4 = get_template("gemm-tiling-gpu", dtype="bf16", calibration={"bw_sm": bw_sm / 4})
    from dataclasses import replace
    wide = replace(chip, sm_count=64)
    assert m.cost_of(a, wl, w) == pytest.approx(t4.evaluate_terms(a, t4.bind(wl, wide))["cost"], rel=1e-12)
    # the blind model is the family's model unchanged: its pick is enumeration's
    sol = enumerate_designs(t.formulate(wl, chip))
    assert blind.pick(wl, w) == (dict(sol.assignment), pytest.approx(float(sol.objective)))
    assert m.pick(wl, w)[1] <= blind.pick(wl, w)[1]  # k >= 1 never slows a design down under the model


def _synthetic(model, truth):
    """The evaluator a GPU would be: the truth model's time of the design `model` picked (+-3%, fixed)."""
    import zlib

    def gpu(w, sc):
        a, _ = model.pick(SHAPES3[sc], w)
        return truth.cost_of(a, SHAPES3[sc], w) * (1 + 0.03 * math.sin(zlib.crc32(repr((w, sc)).encode())))
    return gpu


def test_relaxation_reaches_the_exhaustive_optimum_under_a_synthetic_evaluator():
    t, base = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    model, lib = EmulatedModel(t, base), library()
    gpu = _synthetic(model, EmulatedModel(t, base))
    problem = EmulatedWallsProblem(t, base, lib, SHAPES3, gpu, model=model)
    rel = relax_walls(problem, "worst", min(lib.chips(), key=lambda h: h.area), k=2, rounds=16, band=0.5)

    def measured(h):
        return max(gpu(walls_of(h), sc) / gpu(walls_of(lib.reference), sc) for sc in SHAPES3)
    best = min(lib.chips(), key=measured)   # exhaustive over the grid within the ceiling
    assert rel.chip == best and rel.evaluated == pytest.approx(measured(best))
    assert len(rel.purchases) >= 2 and rel.recalibrations == 0
    for p in rel.purchases:  # every purchase validated: measured drop within half the predicted one
        assert p.evaluated_drop > 0.5 * p.predicted_drop


def test_the_blind_model_buys_the_smem_that_occupancy_does_not_pay_for():
    """The H200 run's miss, reproduced: one block per SM prices 16sm-64k -> 16sm-128k as a large gain;
    under occupancy the 64 KiB designs already run several blocks per SM and the gain mostly vanishes."""
    t, base = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    blind, lib = EmulatedModel(t, base, occupancy=False), library()
    problem = EmulatedWallsProblem(t, base, lib, SHAPES3, _synthetic(blind, EmulatedModel(t, base)), model=blind)
    rel = relax_walls(problem, "worst", min(lib.chips(), key=lambda h: h.area), k=2, rounds=1, band=0.5)
    assert rel.events[1].startswith("miss on smem+1") and rel.recalibrations == 1
    first = EmulatedWallsProblem(t, base, lib, SHAPES3, _synthetic(blind, EmulatedModel(t, base)))
    start = min(lib.chips(), key=lambda h: h.area)
    assert relax_walls(first, "worst", start, k=2, rounds=1, band=0.5).purchases[0].move == "sm+1"


# --- the attention-decode family on emulated chips ---------------------------------------------------------------

DECODE = {"8x32x8x128x4096": {"B": 8, "Hq": 32, "Hkv": 8, "D": 128, "L": 4096, "e": 2, "page": 0},
          "1x32x8x128x32768": {"B": 1, "Hq": 32, "Hkv": 8, "D": 128, "L": 32768, "e": 2, "page": 0}}


@pytest.fixture(scope="module")
def decode_problem():
    t = get_template("attention-decode", dtype="bf16")
    base = get_chip("h200")
    model = EmulatedModel(t, base)
    return EmulatedWallsProblem(t, base, library(), DECODE, lambda w, sc: model.pick(DECODE[sc], w)[1], model=model)


def test_decode_reads_its_own_cost_and_refuses_the_gemm_occupancy_grid():
    t = get_template("attention-decode", dtype="bf16")
    assert EmulatedModel(t, get_chip("h200")).occupancy is False
    with pytest.raises(InvalidInput, match="occupancy"):
        EmulatedModel(t, get_chip("h200"), occupancy=True)
    with pytest.raises(InvalidInput, match="emulated-walls"):
        EmulatedWallsProblem(get_template("attention-prefill", dtype="bf16"), get_chip("h200"), library(), {},
                             lambda w, sc: 1.0)


def test_decode_demands_by_hand(decode_problem):
    """Shared memory (S - 1 stages of K and V tiles, the query, the score tile, 2 KiB), the 16-row padded rows a
    thread holds plus 95 registers of state, and the grid: written out here, not read from the template."""
    p = decode_problem
    h = p.library.chip(sm=132, smem=227, regs=255)
    a = {"Bn": 128, "KS": 4, "QP": 4, "S": 3, "W": 4, "MG": 1, "TM": 1}
    program = ",".join(f"{k}={v}" for k, v in a.items())
    smem = (3 - 1) * 2 * 128 * 128 * 2 + 16 * 128 * 2 + 16 * 128 * 2 + 2048
    assert p.demand("8x32x8x128x4096", program, "smem", h) == smem / 1024
    assert p.demand("8x32x8x128x4096", program, "regs", h) == 16 * (128 + 2 * 128) / (32 * 4) + 95
    assert p.demand("8x32x8x128x4096", program, "sm", h) == 8 * 8 * (4 // 4) * 4


def test_decode_register_cap_is_its_c2_wall(decode_problem):
    """Under maxnreg = 128 every design the decode family admits holds at most 128 - 95 fp32 row registers a
    thread, and a design admitted on the full chip is refused there (the wall binds)."""
    import numpy as np

    from formloop.solve.enumerate import assignment_at, feasible_mask

    t, wl = decode_problem.template, DECODE["8x32x8x128x4096"]
    capped = emulated_chip(get_chip("h200"), Walls(66, 227 * 1024, 128))
    rows = lambda a: max(a["QP"], 16) * (128 + 2 * a["Bn"]) / (32 * a["W"])  # noqa: E731
    f = t.formulate(wl, capped)
    feasible = np.flatnonzero(feasible_mask(f))
    assert feasible.size and all(rows(assignment_at(f, int(i))) <= 128 - 95 for i in feasible)
    wide = {"Bn": 128, "KS": 4, "QP": 4, "S": 3, "W": 4, "MG": 1, "TM": 1}  # 48 row registers a thread
    assert any(v.name == "C2" for v in t.check(wide, wl, capped))
    assert not any(v.name == "C2" for v in t.check(wide, wl, get_chip("h200")))


def test_decode_relaxation_under_the_model_buys_only_what_the_model_prices(decode_problem):
    """The model as evaluator: every purchase's measured drop equals the predicted one and lowers L*, the end chip
    is within the ceiling, and the L* the relaxation reports for it is the worst ratio recomputed here from the
    family's picks on that chip and on the full chip."""
    p = decode_problem
    start = min(p.library.chips(), key=lambda h: h.area)
    rel = relax_walls(p, "worst", start, k=2, rounds=10, band=1.0)
    assert rel.purchases and rel.chip.area <= p.library.ceiling_mm2
    for b in rel.purchases:
        assert b.evaluated_drop == pytest.approx(b.predicted_drop, rel=1e-9) and b.predicted_drop > 0
    bought = [L for step, _, L, _ in rel.path if step in ("start", "buy")]
    assert all(after < before for before, after in zip(bought, bought[1:]))
    model = p.model
    full, end = walls_of(p.library.reference), walls_of(rel.chip)
    worst = max(model.pick(wl, end)[1] / model.pick(wl, full)[1] for wl in DECODE.values())
    assert rel.L == pytest.approx(worst, rel=1e-9)
