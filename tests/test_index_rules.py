"""The index rules of the GEMM families are declared once (library/gemm_tiling_index): the Z3
obligations are lowered from the declaration, the host helpers evaluate it, and the kernels' jit
helper `_tile_of` must equal it point for point on bounded domains (Triton's interpreter).

Independent checks: a scalar reference written from the kernel source's formulas, brute-force
partition and bijection properties, and the replayed witnesses of injected faults."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import itertools  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from formloop.expr import evaluate  # noqa: E402
from formloop.library import gemm_tiling_index as rules  # noqa: E402
from formloop.verify import Verdict  # noqa: E402

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = triton.language
from formloop.library.gemm_tiling_kernel import _tile_of  # noqa: E402


def reference(pid, pid_k, M, N, K, G, KS, Tm, Tn, Tk):
    """The kernels' index arithmetic, written out from _tile_of's source with Python integers."""
    npm, npn = -(-M // Tm), -(-N // Tn)
    width = G * npn
    first = (pid // width) * G
    rows = min(npm - first, G)
    per = -(-(-(-K // Tk)) // KS)
    return first + (pid % width) % rows, (pid % width) // rows, pid_k * per * Tk, per


def test_declaration_equals_the_kernel_formulas_exhaustively():
    for M, N, G in itertools.product(range(1, 50, 3), range(1, 40, 3), (1, 2, 3, 8)):
        npm, npn = -(-M // 16), -(-N // 16)
        for p in range(npm * npn):
            assert rules.tile_of(p, 0, M, N, 1, G, 1, 16, 16, 16) == reference(p, 0, M, N, 1, G, 1, 16, 16, 16)
    for K, KS, Tk in itertools.product(range(1, 70), (1, 2, 3, 4, 8), (16, 32)):
        for s in range(KS):
            assert rules.tile_of(0, s, 1, 1, K, 1, KS, 16, 16, Tk) == reference(0, s, 1, 1, K, 1, KS, 16, 16, Tk)


def test_host_helpers_partition_k_and_biject_onto_tiles():
    for K, Tk, KS in itertools.product(range(1, 100), (16, 32, 64), (1, 2, 3, 4, 8)):
        count = np.zeros(K, dtype=int)
        for lo, hi in rules.k_split(K, Tk, KS):
            count[lo:hi] += 1
        assert (count == 1).all(), (K, Tk, KS)
    for npm, npn, G in itertools.product(range(1, 7), range(1, 6), (1, 2, 3, 8)):
        tiles = {rules.swizzle(p, npm, npn, G) for p in range(npm * npn)}
        assert tiles == set(itertools.product(range(npm), range(npn)))


@triton.jit
def _probe(out_ptr, m_ptr, n_ptr, k_ptr, g_ptr, ks_ptr, SIZE: tl.constexpr, PIDS: tl.constexpr, SPLITS: tl.constexpr,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # One program evaluates _tile_of at every (case, pid_k, pid) at once (elementwise integer ops).
    idx = tl.arange(0, SIZE)
    case = idx // (SPLITS * PIDS)
    pid_k = (idx // PIDS) % SPLITS
    pid = idx % PIDS
    M = tl.load(m_ptr + case)
    N = tl.load(n_ptr + case)
    K = tl.load(k_ptr + case)
    G = tl.load(g_ptr + case)
    KS = tl.load(ks_ptr + case)
    pid_m, pid_n, k_lo, per_split = _tile_of(pid, pid_k, M, N, K, G, KS, BLOCK_M, BLOCK_N, BLOCK_K)
    tl.store(out_ptr + idx * 4, pid_m)
    tl.store(out_ptr + idx * 4 + 1, pid_n)
    tl.store(out_ptr + idx * 4 + 2, k_lo)
    tl.store(out_ptr + idx * 4 + 3, per_split)


def _interpret(cases, pids, splits, blocks):
    """_tile_of on every case (M, N, K, G, KS) x pid_k < splits x pid < pids, and the declaration
    evaluated with numpy on the same points; both masked to the programs a launch would run."""
    size = 1 << (len(cases) * splits * pids - 1).bit_length()
    cols = np.zeros((size // (splits * pids), 5), dtype=np.int32)
    cols[:, :] = 1
    cols[: len(cases)] = np.asarray(cases, dtype=np.int32)
    args = [torch.from_numpy(np.ascontiguousarray(cols[:, j])) for j in range(5)]
    out = torch.full((size * 4,), -1, dtype=torch.int32)
    _probe[(1,)](out, *args, SIZE=size, PIDS=pids, SPLITS=splits,
                 BLOCK_M=blocks[0], BLOCK_N=blocks[1], BLOCK_K=blocks[2])
    got = out.numpy().reshape(size, 4).astype(np.int64)
    idx = np.arange(size)
    case, pid_k, pid = idx // (splits * pids), (idx // pids) % splits, idx % pids
    env = {name: cols[case, j].astype(np.int64) for j, name in enumerate(("M", "N", "K", "G", "KS"))}
    env.update({"Tm": blocks[0], "Tn": blocks[1], "Tk": blocks[2], "pid": pid, "pid_k": pid_k})
    env.update({k: evaluate(v, env) for k, v in rules.GRID.items()})
    declared = (rules.SWIZZLE["pid_m"], rules.SWIZZLE["pid_n"], rules.SPLIT["k_lo"], rules.SPLIT["per_split"])
    want = np.stack([np.broadcast_to(evaluate(e, env), (size,)) for e in declared], 1)
    live = (case < len(cases)) & (pid < env["num_pid_m"] * env["num_pid_n"]) & (pid_k < env["KS"])
    return got[live], want[live], int(live.sum())


# Lanes past a case's last program divide by zero (an empty last group); they are masked out.
@pytest.mark.filterwarnings("ignore:divide by zero")
@pytest.mark.parametrize("blocks", [(16, 16, 16), (32, 16, 64)])
def test_jit_tile_of_equals_the_declaration_swizzle(blocks):
    cases = [(M, N, 16, G, 1) for M in range(1, 6 * blocks[0] + 1, 7) for N in range(1, 5 * blocks[1] + 1, 5)
             for G in (1, 2, 3, 8)]
    got, want, live = _interpret(cases, 32, 1, blocks)
    assert live > 2000 and np.array_equal(got, want)


@pytest.mark.filterwarnings("ignore:divide by zero")
@pytest.mark.parametrize("blocks", [(16, 16, 16), (16, 16, 32)])
def test_jit_tile_of_equals_the_declaration_split_k(blocks):
    cases = [(5, 5, K, 1, KS) for K in range(1, 150) for KS in (1, 2, 3, 4, 8)]
    got, want, live = _interpret(cases, 1, 8, blocks)
    assert live == 149 * 18 and np.array_equal(got, want)


def test_obligations_from_the_declaration_hold_and_injected_faults_replay():
    assert rules.split_k_partition(32, 4, timeout_s=20).verdict is Verdict.PROVED
    assert rules.swizzle_bijective(8, timeout_s=20).verdict is Verdict.PROVED
    assert all(r.proved for r in rules.tile_cover(rules.OUTPUT_AXES[1], 64, timeout_s=20))
    floor = rules.split_k_partition(64, 4, floor_split=True, timeout_s=20)
    assert floor.verdict is Verdict.COUNTEREXAMPLE
    K, k = floor.witness["K"], floor.witness["k"]
    covered = sum(lo <= k < hi for lo, hi in [(min(K, s * ((-(-K // 64)) // 4) * 64),
                                                min(K, (s + 1) * ((-(-K // 64)) // 4) * 64)) for s in range(4)])
    assert 0 <= k < K and covered != 1 and "lies in 0" in floor.replay
    unclamped = rules.swizzle_bijective(2, clamp_last_group=False, timeout_s=20)
    assert unclamped.verdict is Verdict.COUNTEREXAMPLE and "outside the grid" in unclamped.replay
    w = unclamped.witness
    assert w["num_pid_m"] % 2 == 1  # only a short last group can go wrong
