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
