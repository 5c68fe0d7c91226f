"""The emulated tier's chip (issue 18, part 3): walls moved within the base chip, peaks scaled by the
SM fraction, the family's own walls refusing designs that do not fit the emulated shared memory.
The GPU side (green contexts, maxnreg) runs in benchmarks/emulated_walls.py on the H200."""
from __future__ import annotations

import pytest

from formloop.errors import InvalidInput
from formloop.evaluate.emulated import Walls, emulated_chip
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import workload
from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig
from formloop.solve import enumerate_designs


def test_emulated_chip_moves_walls_and_scales_peaks():
    base = get_chip("h200")
    chip = emulated_chip(base, Walls(33, 100 * 1024, 128))
    assert chip.sm_count == 33 and chip.smem_per_block == 100 * 1024 and chip.name == base.name
    assert chip.peak("bf16") == pytest.approx(base.peak("bf16") * 33 / base.sm_count)
    assert chip.bandwidth == base.bandwidth and "33sm-100k-128r" in chip.notes
    for bad in (Walls(0, 1024), Walls(200, 1024), Walls(16, 400 * 1024), Walls(16, 1024, 8)):
        with pytest.raises(InvalidInput):
            emulated_chip(base, bad)


def test_family_walls_refuse_designs_over_the_emulated_shared_memory():
    t = get_template("gemm-tiling-gpu", dtype="bf16")
    w = workload((4096, 4096, 4096), "bf16")
    small = emulated_chip(get_chip("h200"), Walls(16, 64 * 1024))
    full_pick = dict(enumerate_designs(t.formulate(w, get_chip("h200"))).assignment)
    small_pick = enumerate_designs(t.formulate(w, small))
    smem = lambda a: a["S"] * (a["Tm"] + a["Tn"]) * a["Tk"] * 2  # noqa: E731 (the template's C1 for bf16)
    assert smem(full_pick) > 64 * 1024  # the full chip's pick does not fit the emulated budget...
    assert any(v.name == "C1" for v in t.check(full_pick, w, small))  # ...and the walls say so
    assert smem(dict(small_pick.assignment)) <= 64 * 1024
    assert small_pick.objective > enumerate_designs(t.formulate(w, get_chip("h200"))).objective


def test_maxnreg_is_a_checked_launch_option():
    plan = GemmPlan(TileConfig(64, 64, 32), 64, 64, 64, "bf16", maxnreg=128)
    assert plan.maxnreg == 128
    with pytest.raises(InvalidInput, match="maxnreg"):
        GemmPlan(TileConfig(64, 64, 32), 64, 64, 64, "bf16", maxnreg=8)


def test_maxnreg_reaches_the_launch_options():
    import torch

    plan = GemmPlan(TileConfig(16, 16, 16), 16, 16, 16, "bf16", maxnreg=96)
    a = torch.zeros((16, 16), dtype=torch.bfloat16)
    _, _, options = plan.kernel_call(a, a, a.clone())
    assert options == {"num_warps": 4, "num_stages": 3, "maxnreg": 96}
    _, _, plain = GemmPlan(TileConfig(16, 16, 16), 16, 16, 16, "bf16").kernel_call(a, a, a.clone())
    assert "maxnreg" not in plain


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000)])
def test_register_cap_is_a_wall_the_solver_respects(shape):
    """Under maxnreg=128 a thread keeps 64 registers besides its accumulators: the H200 run picked
    128x256 with 8 warps (128 fp32 accumulators a thread) for that cap and Triton failed to compile it."""
    t = get_template("gemm-tiling-gpu", dtype="bf16")
    w = workload(shape, "bf16")
    capped = emulated_chip(get_chip("h200"), Walls(66, 227 * 1024, 128))
    assert capped.registers_per_thread == 128
    acc = lambda a: a["Tm"] * a["Tn"] / (32 * a["W"])  # noqa: E731 - fp32 accumulators a thread holds
    pick = dict(enumerate_designs(t.formulate(w, capped)).assignment)
    assert acc(pick) <= 128 - 64
    crashed = {"Tm": 128, "Tn": 256, "Tk": 64, "S": 4, "W": 8, "KS": 1, "G": 8, "L": 1}
    assert any(v.name == "C2" for v in t.check(crashed, w, capped))
    assert not any(v.name == "C2" for v in t.check(crashed, w, get_chip("h200")))  # 255 a thread: admitted
    import numpy as np

    from formloop.solve.enumerate import assignment_at, feasible_mask

    f = t.formulate(w, capped)
    feasible = np.flatnonzero(feasible_mask(f))  # every design the walls admit under the cap, not just the pick
    assert feasible.size and all(acc(assignment_at(f, int(i))) <= 64 for i in feasible)


def test_decode_plan_takes_a_checked_maxnreg():
    """The emulated evaluator caps a decode plan's registers the way it caps a GEMM plan's (replace(plan,
    maxnreg=...)); an out-of-range cap is a named error."""
    from dataclasses import replace

    from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan

    plan = DecodePlan(DecodeConfig(Bn=64, KS=2), 1, 32, 8, 128, 256)
    capped = replace(plan, maxnreg=128)
    assert capped.maxnreg == 128 and capped.config == plan.config and plan.maxnreg is None
    with pytest.raises(InvalidInput, match="maxnreg"):
        replace(plan, maxnreg=300)


def test_emulated_timing_modes_are_named():
    from formloop.evaluate.emulated import EmulatedEvaluator

    with pytest.raises(InvalidInput, match="emulated timing mode"):
        EmulatedEvaluator(Walls(16, 64 * 1024), device="cpu", timing="graph")
