"""The schedule decision (SC) in the GPU family's cost model: the MILP's pick against brute-force
enumeration of the whole decision grid, per schedule, on small shapes; wave quantization priced."""
from __future__ import annotations

import numpy as np
import pytest

from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import workload
from formloop.solve import enumerate_designs, solve_milp
from formloop.solve.enumerate import feasible_mask, term_grid


def _formulation(shape):
    t = get_template("gemm-tiling-gpu", dtype="bf16", schedules=True)
    return t.formulate(workload(shape, "bf16"), get_chip("h200"))


def _best_per_schedule(f) -> list[float]:
    names = [d.name for d in f.template.decisions]
    cost = np.where(feasible_mask(f), term_grid(f, f.cost), np.inf)
    axis = names.index("SC")
    return [float(np.take(cost, i, axis=axis).min()) for i in range(cost.shape[axis])]


@pytest.mark.parametrize("shape", [(64, 1024, 2048), (200, 200, 200)])
def test_milp_pick_matches_enumeration(shape):
    f = _formulation(shape)
    milp, brute = solve_milp(f), enumerate_designs(f)
    assert milp.objective == pytest.approx(brute.objective, rel=1e-6)
    per = _best_per_schedule(f)
    assert milp.objective == pytest.approx(min(per), rel=1e-6)
    assert per[milp.assignment["SC"]] == pytest.approx(min(per), rel=1e-6)


def test_schedules_are_priced_by_wave_quantization():
    # 2304x2048x4096 in 128x256 tiles: 144 tiles are 1.09 waves of 132 SMs, and both operands stay in
    # the L2: stream-K evens the waves out and loses nothing to its scattered footprint.
    per = _best_per_schedule(_formulation((2304, 2048, 4096)))
    assert per[2] < per[1] < per[0]
    # A skinny shape whose split-K blocks already fill the chip: data-parallel (with split-K) is cheapest.
    per = _best_per_schedule(_formulation((64, 1024, 2048)))
    assert per[0] < min(per[1:])


def test_stream_k_pays_for_its_scattered_footprint():
    # 8192^3: 2048 tiles are 15.5 waves; stream-K saves half a wave of k-steps, but its runs start 15.5
    # tiles apart, so a wave re-reads every row and column panel of A and B (128 MiB each, far over the
    # L2): persistent < stream-K (measured on the H200: 1447 vs 1919 us, benchmarks/RESULTS.md).
    per = _best_per_schedule(_formulation((8192, 8192, 8192)))
    assert per[1] < per[0] and per[1] < per[2]
    # With h_sk = 1 (the L2 catches every extra re-read) the footprint costs nothing: stream-K wins again.
    t = get_template("gemm-tiling-gpu", dtype="bf16", schedules=True, calibration={"h_sk": 1.0})
    per = _best_per_schedule(t.formulate(workload((8192, 8192, 8192), "bf16"), get_chip("h200")))
    assert per[2] < per[1]


def test_stream_k_operand_traffic_against_a_hand_count():
    from formloop.expr import evaluate
    from formloop.library import gemm_tiling_gpu as g

    t = get_template("gemm-tiling-gpu", dtype="bf16", schedules=True, calibration={"h_sk": 0.25})
    env = dict(t.bind(workload((8192, 8192, 8192), "bf16"), get_chip("h200")))
    env.update(Tm=128, Tn=256, Tk=64, S=3, W=8, KS=1, G=8, L=1, SC=2)
    # 64 x 32 tiles, 16 a program; a data-parallel wave of 132 tiles spans 8 rows x 17 columns:
    # A read ceil(32/17) = 2 times, B ceil(64/8) = 8 times. Stream-K: a wave touches all 64 rows and
    # 32 columns: A and B 16 times each. Plus C once and two float32 partial tiles per program.
    op = 8192 * 8192 * 2
    dp = 2 * op + 8 * op
    sk = 16 * op + 16 * op
    want = dp + op + 0.75 * (sk - dp) + 2 * 132 * 128 * 256 * 4
    assert float(evaluate(g.bytes_sk, env)) == pytest.approx(want, rel=1e-9)


def test_schedule_constraint_keeps_tma_and_no_split_k():
    f = _formulation((200, 200, 200))
    names = [d.name for d in f.template.decisions]
    ok = feasible_mask(f)
    sc, ks, ld = (names.index(n) for n in ("SC", "KS", "L"))
    menus = {d.name: d.decision.menu for d in f.template.decisions}
    for idx in zip(*np.nonzero(ok)):
        if menus["SC"][idx[sc]] != 0:
            assert menus["KS"][idx[ks]] == 1 and menus["L"][idx[ld]] == 1
