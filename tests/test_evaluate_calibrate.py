"""Calibration recovers known efficiency terms from points the model itself generated, and the
rank correlation matches a hand computation; the H200 contract's solver agrees with enumeration
and its index obligations hold (and fail when a fault is injected)."""
from __future__ import annotations


import numpy as np
import pytest

from formloop.evaluate.calibrate import Calibration, Point, fit, predict, report, spearman
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import workload
from formloop.library.gemm_tiling_gpu import obligations
from formloop.library.gemm_tiling_index import split_k_partition
from formloop.solve import enumerate_designs, solve_milp
from formloop.solve.enumerate import assignment_at, feasible_mask
from formloop.verify.outcome import Verdict

SHAPES = [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000), (1, 4096, 12288)]
TRUTH = {"eta_mma": 0.6, "bw_sm": 90e9, "lat": 1.0e-6, "t_tile": 2e-6, "eta_bw": 0.8, "alpha": 0.5}


def _points(template, chip, per_shape=40, seed=0):
    rng = np.random.default_rng(seed)
    pts = []
    for shape in SHAPES:
        f = template.formulate(workload(shape, "bf16"), chip)
        flat = np.flatnonzero(feasible_mask(f))
        for i in rng.choice(flat, per_shape, replace=False):
            pts.append(Point(assignment_at(f, int(i)), workload(shape, "bf16"), 0.0))
    true = predict(template, chip, pts, TRUTH)
    return [Point(p.assignment, p.workload, float(t)) for p, t in zip(pts, true)]


def test_fit_recovers_a_known_model():
    t, chip = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    pts = _points(t, chip)
    cal = fit(t, chip, pts, names=tuple(TRUTH), iterations=40, starts=2)
    assert cal.rms_log_error_before > 0.05 and cal.rms_log_error_after < 0.01
    after = predict(t, chip, pts, cal.values)
    assert np.allclose(after, [p.latency_us for p in pts], rtol=0.03)
    rep = report(t, chip, pts, cal)
    assert all(w["spearman_after"] > 0.99 for w in rep["per_workload"].values())


def test_calibration_round_trips(tmp_path):
    cal = Calibration("t", "h", "h200", {"eta_mma": 0.5}, {"eta_mma": 0.8}, 10, 0.3, 0.1)
    cal.save(tmp_path / "c.json")
    assert Calibration.load(tmp_path / "c.json") == cal and cal.key.startswith("h200:")


def test_spearman_against_hand_ranks():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks (1,2,3,4) vs (2,1,4,3): d^2 = 4, rho = 1 - 6*4/(4*15) = 0.6
    assert spearman([1, 2, 3, 4], [2, 1, 4, 3]) == pytest.approx(0.6)


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1, 4096, 12288), (1000, 1000, 1000)])
def test_milp_optimum_equals_enumeration(shape):
    t, chip = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    f = t.formulate(workload(shape, "bf16"), chip)
    assert solve_milp(f, break_ties=False).objective == pytest.approx(enumerate_designs(f).objective, rel=1e-7)


def test_tma_path_needs_aligned_rows():
    t, chip = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    f = t.formulate(workload((100, 101, 99), "bf16"), chip)  # 202- and 198-byte rows
    assert enumerate_designs(f).assignment["L"] == 0
    assert all(a["L"] == 0 for a in enumerate_designs(f).ties)


def test_obligations_proved_and_fault_refuted():
    results = obligations(timeout_s=20.0)
    assert results and all(r.verdict is Verdict.PROVED for r in results)
    bad = split_k_partition(64, 4, floor_split=True, timeout_s=20.0)
    assert bad.verdict is Verdict.COUNTEREXAMPLE
    K, k = bad.witness["K"], bad.witness["k"]
    # replay the witness with the floor-divided split: k is reduced by no split
    tiles, per = -(-K // 64), (-(-K // 64)) // 4
    owners = [s for s in range(4) if min(K, s * per * 64) <= k < min(K, (s + 1) * per * 64)]
    assert 0 <= k < K and len(owners) != 1


def test_chip_walls_bind_the_menu():
    t, chip = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    f = t.formulate(workload((4096, 4096, 4096), "bf16"), chip)
    values = t.bind(workload((4096, 4096, 4096), "bf16"), chip)
    for i in np.flatnonzero(feasible_mask(f))[::97]:
        a = assignment_at(f, int(i))
        assert a["S"] * (a["Tm"] + a["Tn"]) * a["Tk"] * 2 <= values["Ms"]
        assert a["Tm"] * a["Tn"] <= 128 * 32 * a["W"]


def test_memory_terms_match_a_hand_count():
    # M = 1 GEMV-like shape, 16x128 tiles, split 4 ways: A (24 KiB) stays in the L2 and is read once,
    # B is read once, C once, and the float32 partials (4·1·4096·4 bytes) are written back once.
    chip = get_chip("h200")
    values = {"eta_bw": 1.0, "lat_m": 1e-9, "d32": 0.5, "d64": 0.8}
    t = get_template("gemm-tiling-gpu", dtype="bf16", calibration=values)
    w = workload((1, 4096, 12288), "bf16")
    env = t.bind(w, chip)
    a = {"Tm": 16, "Tn": 128, "Tk": 128, "S": 4, "W": 4, "KS": 4, "G": 8, "L": 1}
    nbytes = 1 * 12288 * 2 + 12288 * 4096 * 2 + 1 * 4096 * 2 + 4 * 1 * 4096 * 4
    assert t.evaluate_terms(a, env)["T_mem_us"] == pytest.approx(nbytes / chip.bandwidth * 1e6, rel=1e-12)
    # 32-column tiles: B rows are 64 bytes wide, fetched at d64 of the bandwidth; no split, no partials.
    narrow = {**a, "Tn": 32, "KS": 1}
    nbytes = 1 * 12288 * 2 + 12288 * 4096 * 2 / 0.8 + 1 * 4096 * 2
    assert t.evaluate_terms(narrow, env)["T_mem_us"] == pytest.approx(nbytes / chip.bandwidth * 1e6, rel=1e-12)
    # A shallow pipeline on few SMs is held by Little's law: 32 blocks, one 16x128x128 k-tile in flight.
    slow = {**narrow, "Tn": 128, "S": 2}
    lat_m = 1e-6
    t2 = get_template("gemm-tiling-gpu", dtype="bf16", calibration={**values, "lat_m": lat_m})
    pull = 32 * 1 * (16 + 128) * 128 * 2 / lat_m
    nbytes = 1 * 12288 * 2 + 12288 * 4096 * 2 + 1 * 4096 * 2
    assert t2.evaluate_terms(slow, t2.bind(w, chip))["T_mem_us"] == pytest.approx(nbytes / pull * 1e6, rel=1e-12)
