"""The persistent and stream-K schedules (decision SC) in Triton's interpreter, against float64.

Ragged shapes and tiny program counts so that runs cross tile boundaries, tiles are shared by two
and three runs, and some runs hold whole tiles; the output is NaN-poisoned first and the partials
too, so an element or a partial that is never written fails; a second launch on the same
workspace checks that the counters came back to zero."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.gemm_tiling_instance import TritonGemm  # noqa: E402
from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig  # noqa: E402

SHAPES = [(17, 40, 48), (1, 48, 200), (70, 24, 136), (33, 16, 16)]
CASES = [  # (config, programs)
    (TileConfig(16, 16, 16, S=2, W=4, G=8, L=1, SC=1), 3),
    (TileConfig(32, 16, 32, S=3, W=4, G=1, L=1, SC=1), 1),
    (TileConfig(16, 16, 16, S=2, W=4, G=8, L=1, SC=2), 5),
    (TileConfig(16, 32, 32, S=3, W=4, G=2, L=1, SC=2), 3),
    (TileConfig(32, 16, 16, S=2, W=4, G=1, L=1, SC=2), 7),
]


def _check(inst, case) -> None:
    inst.poison(case)
    inst.launch(case)
    out, ref = inst.output(case).double(), inst.reference(case)
    assert torch.isfinite(out).all(), "an output element was never written"
    rel = ((out - ref).norm() / ref.norm()).item()
    assert rel <= inst.tolerance, (inst.name, rel)


@pytest.mark.parametrize("cfg,progs", CASES, ids=lambda x: f"sc{x.SC}-{x.Tm}x{x.Tn}x{x.Tk}" if hasattr(x, "SC")
                         else f"p{x}")
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_schedule_matches_float64_with_tails(cfg, progs, dtype):
    for i, shape in enumerate(SHAPES):
        inst = TritonGemm(GemmPlan(cfg, *shape, dtype, sms=progs))
        case = inst.new_case("cpu", torch.Generator().manual_seed(i))
        _check(inst, case)
        if case.workspace is not None:  # counters back at zero: a second launch on the workspace is exact
            n = inst.plan._counters_at
            assert (case.workspace[n:].view(torch.int32) == 0).all()
            _check(inst, case)


def test_stream_k_shares_tiles_between_runs():
    # 17x40x48 in 16x16x16 tiles: 6 tiles of 3 k-steps over 5 runs of 4 steps: runs cross tiles.
    plan = GemmPlan(TileConfig(16, 16, 16, L=1, SC=2), 17, 40, 48, "fp32", sms=5)
    assert plan.grid == (5, 1) and plan.workspace_shape == (10, 16, 16)
    assert GemmPlan(TileConfig(16, 16, 16, L=1, SC=1), 17, 40, 48, "fp32", sms=100).grid == (6, 1)


def test_schedules_need_tma_and_no_split_k():
    with pytest.raises(InvalidInput, match="SC"):
        TileConfig(16, 16, 16, KS=2, L=1, SC=2)
    with pytest.raises(InvalidInput, match="SC"):
        TileConfig(16, 16, 16, L=0, SC=1)
    with pytest.raises(InvalidInput, match="SC"):
        TileConfig(16, 16, 16, L=1, SC=3)
