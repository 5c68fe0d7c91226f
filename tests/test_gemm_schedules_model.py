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
    # 8192^3 in 128x256 tiles: 2048 tiles are 15.5 waves of 132 SMs; stream-K evens them out.
    per = _best_per_schedule(_formulation((8192, 8192, 8192)))
    assert per[2] < per[1] < per[0]
    # A skinny shape whose split-K blocks already fill the chip: data-parallel (with split-K) is cheapest.
    per = _best_per_schedule(_formulation((64, 1024, 2048)))
    assert per[0] < min(per[1:])


def test_schedule_constraint_keeps_tma_and_no_split_k():
    f = _formulation((200, 200, 200))
    names = [d.name for d in f.template.decisions]
    ok = feasible_mask(f)
    sc, ks, ld = (names.index(n) for n in ("SC", "KS", "L"))
    menus = {d.name: d.decision.menu for d in f.template.decisions}
    for idx in zip(*np.nonzero(ok)):
        if menus["SC"][idx[sc]] != 0:
            assert menus["KS"][idx[ks]] == 1 and menus["L"][idx[ld]] == 1
