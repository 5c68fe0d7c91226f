"""The generated GEMM kernels in Triton's interpreter: tiny ragged shapes, many assignments.

Independent checks: a float64 product on the CPU is the reference; the output is poisoned with
NaN first, so an element no program writes fails; the split-K ranges and the swizzle computed by
the host mirror the kernel's formulas and are checked by brute force."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import itertools  # noqa: E402

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.gemm_tiling_index import k_split, swizzle  # noqa: E402
from formloop.library.gemm_tiling_instance import TorchGemm, TritonGemm  # noqa: E402
from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig, alignment  # noqa: E402

# (M, N, K): ragged in every extent; K and N multiples of 8 where the TMA path (L=1) needs
# 16-byte row pitches, odd where only the pointer path applies.
SHAPES_ANY = [(17, 33, 45), (1, 19, 70), (70, 5, 29)]
SHAPES_ALIGNED = [(17, 40, 48), (1, 48, 200), (70, 24, 136), (33, 16, 16)]
CONFIGS = [
    TileConfig(16, 16, 16, S=1, W=4, KS=1, G=1),
    TileConfig(16, 32, 16, S=2, W=4, KS=1, G=8),
    TileConfig(32, 16, 32, S=3, W=4, KS=3, G=2),
    TileConfig(16, 16, 64, S=4, W=8, KS=4, G=8),
    TileConfig(64, 32, 16, S=3, W=4, KS=2, G=1),
    TileConfig(32, 64, 32, S=2, W=8, KS=8, G=8),
]


def _run(cfg: TileConfig, shape, dtype: str, seed: int):
    inst = TritonGemm(GemmPlan(cfg, *shape, dtype))
    gen = torch.Generator().manual_seed(seed)
    case = inst.new_case("cpu", gen)
    assert torch.isnan(case.c).all()  # poisoned before the launch
    inst.launch(case)
    out = inst.output(case).double()
    ref = inst.reference(case)
    assert torch.isfinite(out).all(), "an output element was never written"
    rel = ((out - ref).norm() / ref.norm()).item()
    assert rel <= inst.tolerance, (cfg, shape, dtype, rel)
    worst = (out - ref).abs().max().item() / (ref.norm().item() / ref.numel() ** 0.5)
    assert worst <= 10 * inst.tolerance
    return rel


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.Tm}x{c.Tn}x{c.Tk}s{c.S}w{c.W}ks{c.KS}g{c.G}")
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_pointer_path_matches_float64(cfg, dtype):
    for i, shape in enumerate(SHAPES_ANY + SHAPES_ALIGNED[:2]):
        _run(cfg, shape, dtype, seed=i)


@pytest.mark.parametrize("cfg", CONFIGS[1:5], ids=lambda c: f"{c.Tm}x{c.Tn}x{c.Tk}ks{c.KS}")
@pytest.mark.parametrize("dtype", ["bf16", "tf32"])
def test_tma_path_matches_float64(cfg, dtype):
    tma = TileConfig(**{**cfg.as_dict(), "L": 1})
    for i, shape in enumerate(SHAPES_ALIGNED):
        _run(tma, shape, dtype, seed=10 + i)


def test_tma_path_refuses_unaligned_rows():
    inst = TritonGemm(GemmPlan(TileConfig(16, 16, 16, L=1), 17, 33, 45, "bf16"))
    case = inst.new_case("cpu", torch.Generator().manual_seed(0))
    with pytest.raises(InvalidInput, match="TMA"):
        inst.launch(case)


def test_split_k_ranges_partition_k():
    for K, Tk, KS in itertools.product((1, 7, 16, 45, 130, 1000), (16, 32, 64, 128), (1, 2, 3, 4, 8)):
        covered = [0] * K
        for lo, hi in k_split(K, Tk, KS):
            assert lo == hi or lo % Tk == 0  # every non-empty range starts on a k-tile
            for k in range(lo, hi):
                covered[k] += 1
        assert covered == [1] * K, (K, Tk, KS)


def test_swizzle_is_a_bijection_onto_tiles():
    for npm, npn, G in itertools.product((1, 2, 5, 9), (1, 3, 8), (1, 2, 8)):
        tiles = {swizzle(pid, npm, npn, G) for pid in range(npm * npn)}
        assert tiles == {(i, j) for i in range(npm) for j in range(npn)}


def test_workspace_is_checked_for_split_k():
    plan = GemmPlan(TileConfig(16, 16, 16, KS=2), 8, 8, 64, "fp32")
    a, b, c = torch.randn(8, 64), torch.randn(64, 8), torch.empty(8, 8)
    with pytest.raises(InvalidInput, match="workspace"):
        plan.launch(a, b, c, None)


def test_alignment_hint_divides_everything():
    assert alignment(1000, 1000) == 8
    assert alignment(45, 64) == 1
    assert alignment(12, 4096) == 4


def test_bad_configs_are_refused():
    with pytest.raises(InvalidInput, match="Tk"):
        TileConfig(16, 16, 8)
    with pytest.raises(InvalidInput, match="W"):
        TileConfig(16, 16, 16, W=3)


def test_torch_baseline_runs_the_same_case():
    base = TorchGemm(5, 7, 9, "fp32")
    case = base.new_case("cpu", torch.Generator().manual_seed(1))
    base.launch(case)
    assert torch.allclose(base.output(case).double(), base.reference(case), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", [0, 1])
def test_split_k_counters_return_to_zero_and_relaunch_is_exact(path):
    # A CUDA graph replays the launch on the same workspace: the last split of every tile must leave
    # its counter at zero, and a second launch on fresh operands (partials poisoned) must be exact.
    cfg = TileConfig(16, 16, 16, S=2, W=4, KS=3, G=2, L=path)
    inst = TritonGemm(GemmPlan(cfg, 33, 40, 72, "fp32"))
    gen = torch.Generator().manual_seed(7)
    case = inst.new_case("cpu", gen)
    counters = case.workspace[inst.plan._counters_at:].view(torch.int32)
    assert counters.numel() == inst.plan.tiles == 3 * 3
    for _ in range(2):
        inst.launch(case)
        assert (counters == 0).all()
        assert torch.allclose(case.c.double(), inst.reference(case), rtol=1e-5, atol=1e-4)
        case.a.copy_(torch.randn(case.a.shape, generator=gen))
        inst.poison(case)
        assert torch.isnan(case.c).all() and (counters == 0).all()


def test_split_k_total_is_the_in_order_sum_of_the_partials():
    # The last split sums the partials in split order, so C equals the host's in-order float32 sum
    # of the per-range products bit for bit (no dependence on which split came last).
    cfg = TileConfig(16, 16, 16, S=2, W=4, KS=4, G=1)
    plan = GemmPlan(cfg, 20, 24, 64, "fp32")
    inst = TritonGemm(plan)
    case = inst.new_case("cpu", torch.Generator().manual_seed(3))
    inst.launch(case)
    parts = case.workspace[: 4 * 20 * 24].view(4, 20, 24)
    for s, (lo, hi) in enumerate(k_split(64, 16, 4)):
        assert torch.allclose(parts[s].double(), case.a[:, lo:hi].double() @ case.b[lo:hi].double(), rtol=1e-5, atol=1e-5)
    total = parts[0].clone()
    for s in range(1, 4):
        total += parts[s]
    assert torch.equal(case.c, total)
