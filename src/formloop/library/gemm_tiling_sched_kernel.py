"""The persistent and stream-K schedules of the tiling family (decision SC), as Triton kernels.

SC = 1, persistent: P = min(tiles, programs) programs; program p computes tiles p, p+P, p+2P, ...
  in the family's grouped-M swizzled order (`_tile_of`), each over its whole k range, and stores it.
SC = 2, stream-K: the tiles·I k-steps (I = ⌈K/Tk⌉ a tile, step i = tile ⌊i/I⌋, k-tile i mod I)
  are cut into P = min(tiles·I, programs) runs of c = ⌈tiles·I/P⌉ steps: run p is [p·c, min(T, p·c+c)).
  A run walks its steps tile by tile (segments). A tile whose steps all lie in one run is stored
  directly; otherwise each contributing run writes its float32 partial to workspace slot 2p + s
  (s = 0 if the segment is the run's first, i.e. the run starts inside the tile, else 1), then
  counts itself in on the tile's counter (block barrier, one acquire-release atomic). The runs
  owning the tile's first and last steps are q0 = ⌊t·I/c⌋ and q1 = ⌊(t·I+I−1)/c⌋; the run that arrives
  (q1 − q0)-th sums the partials of q0..q1 in run order (deterministic), stores the tile and resets
  the counter for the next launch. The same last-arriver merge as split-K, in one launch.
The index rules (run bounds, owners, slots) are declared as expressions in `gemm_tiling_sched_index`
and proved there (exactly-once coverage of every (tile, k-step), every partial summed once).

Both kernels use the copy engine (TMA descriptors: tails zero-filled on read, clipped on write);
the template's C6 keeps SC ≠ 0 to L = 1 and KS = 1. Imports triton and torch."""
from __future__ import annotations

import triton
import triton.language as tl

from formloop.library.gemm_tiling_kernel import _tile_of, _tma_mainloop


@triton.jit(do_not_specialize=["M", "N", "K", "GROUP_M", "PROGS"])
def _persistent_tma_kernel(a_desc, b_desc, c_desc, M, N, K, GROUP_M, PROGS,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           PRECISION: tl.constexpr, WIDEN: tl.constexpr = False):
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in range(pid, num_tiles, PROGS):
        pid_m, pid_n, _, _ = _tile_of(tile, 0, M, N, K, GROUP_M, 1, BLOCK_M, BLOCK_N, BLOCK_K)
        acc = _tma_mainloop(a_desc, b_desc, 0, pid_m * BLOCK_M, pid_n * BLOCK_N, 0, K,
                            BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, WIDEN)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


@triton.jit
def _slot(q, t_lo, per):
    # The workspace slot of run q's partial of the tile whose first step is t_lo.
    return 2 * q + tl.where(q * per >= t_lo, 0, 1)


@triton.jit(do_not_specialize=["M", "N", "K", "GROUP_M", "PROGS"])
def _stream_k_tma_kernel(a_desc, b_desc, c_desc, ws_ptr, cnt_ptr, M, N, K, GROUP_M, PROGS,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         PRECISION: tl.constexpr, WIDEN: tl.constexpr = False):
    pid = tl.program_id(0)
    steps = tl.cdiv(K, BLOCK_K)
    total = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) * steps
    per = tl.cdiv(total, PROGS)
    lo = pid * per
    hi = tl.minimum(total, lo + per)
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    it = lo
    while it < hi:
        tile = it // steps
        t_lo = tile * steps
        seg_hi = tl.minimum(hi, t_lo + steps)
        pid_m, pid_n, _, _ = _tile_of(tile, 0, M, N, K, GROUP_M, 1, BLOCK_M, BLOCK_N, BLOCK_K)
        acc = _tma_mainloop(a_desc, b_desc, 0, pid_m * BLOCK_M, pid_n * BLOCK_N, (it - t_lo) * BLOCK_K,
                            tl.minimum(K, (seg_hi - t_lo) * BLOCK_K), BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, WIDEN)
        q0 = t_lo // per
        q1 = (t_lo + steps - 1) // per
        if q0 == q1:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))
        else:
            tl.store(ws_ptr + _slot(pid, t_lo, per).to(tl.int64) * (BLOCK_M * BLOCK_N) + offs, acc)
            tl.debug_barrier()
            if tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu") == q1 - q0:
                total_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for q in range(q0, q1 + 1):
                    part = ws_ptr + _slot(q, t_lo, per).to(tl.int64) * (BLOCK_M * BLOCK_N) + offs
                    total_acc += tl.load(part, cache_modifier=".cg")
                tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], total_acc.to(c_desc.dtype))
        it = seg_hi


def programs(plan) -> int:
    """The grid of a persistent (tiles) or stream-K (k-steps) plan: at most `plan.sms` programs."""
    c = plan.config
    tiles = triton.cdiv(plan.M, c.Tm) * triton.cdiv(plan.N, c.Tn)
    units = tiles if c.SC == 1 else tiles * triton.cdiv(plan.K, c.Tk)
    return max(1, min(units, plan.sms))


def workspace_shape(plan) -> tuple[int, ...] | None:
    """Stream-K's partials: two float32 tiles a program (its first and last segment)."""
    c = plan.config
    return (2 * programs(plan), c.Tm, c.Tn) if c.SC == 2 else None


def kernel_call(plan, descriptors, ws, cnt, precision: str, widen: bool, options: dict):
    """(kernel, arguments, options) of a persistent or stream-K launch."""
    c = plan.config
    a_d, b_d, c_d = descriptors
    tail = (plan.M, plan.N, plan.K, c.G, programs(plan), c.Tm, c.Tn, c.Tk, precision, widen)
    if c.SC == 1:
        return _persistent_tma_kernel, (a_d, b_d, c_d, *tail), options
    return _stream_k_tma_kernel, (a_d, b_d, c_d, ws, cnt, *tail), options


def warmup(plan, desc, t, precision: str) -> None:
    """Compile without launching (the same compile key as `kernel_call`'s launch)."""
    import torch

    c = plan.config
    ds = (desc(t, (16, 16), (c.Tm, c.Tk)), desc(t, (16, 16), (c.Tk, c.Tn)), desc(t, (16, 16), (c.Tm, c.Tn)))
    kw = dict(BLOCK_M=c.Tm, BLOCK_N=c.Tn, BLOCK_K=c.Tk, PRECISION=precision, WIDEN=False,
              num_warps=c.W, num_stages=c.S, grid=(1,))
    tail = (plan.M, plan.N, plan.K, c.G, programs(plan))
    if c.SC == 1:
        _persistent_tma_kernel.warmup(*ds, *tail, **kw)
    else:
        _stream_k_tma_kernel.warmup(*ds, torch.float32, torch.int32, *tail, **kw)
