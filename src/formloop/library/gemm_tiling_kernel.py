"""The Triton program family of the tiling template: one GEMM kernel per assignment.

Decision → program: Tm, Tn, Tk are the block sizes (BLOCK_M, BLOCK_N, BLOCK_K); S is Triton's
pipelining depth (num_stages: S shared-memory slots, loads issued S−1 k-tiles ahead, a slot
refilled only after the tensor-core read of it was waited on, so the seed's P = S−1, beta = 1 and
its lifetime rule P ≤ S−2+beta holds by construction); W is num_warps; G is the grouped-M swizzle
(G consecutive tile rows walked column by column so one wave shares A rows and B columns in L2);
KS is split-K: grid axis 1 cuts the k-tiles into KS contiguous ranges that each write a float32
partial tile to a workspace and then count themselves in on a per-tile counter (one atomic,
acquire-release, after a block barrier); the block that arrives last sums the KS partials in split
order (so the result does not depend on which block came last), writes C and resets the counter
for the next launch. One launch; the partials are read back while they are still in the L2.

Tails: rows and columns of A and B are wrapped (index mod M, mod N) so every load stays in
bounds, the k tail is masked, and every store is masked by i < M, j < N. `ALIGN` is a hint, the
largest power of two ≤ 8 that divides K, N and every leading stride; the host computes it, so the
hint is true by construction (it lets 16-byte vector loads survive ragged shapes like 1000³).

This module imports triton and torch; set TRITON_INTERPRET=1 before importing it to run the
kernels in Triton's interpreter on the CPU.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.runtime.jit import MockTensor

from formloop.dtypes import KERNEL_DTYPES, get_dtype, torch_dtype
from formloop.errors import InvalidInput
from formloop.library.gemm_dot import _dot, store_cast
from formloop.library.gemm_tiling_config import TileConfig  # noqa: F401 (re-exported)

# Views of formloop.dtypes: storage, tl.dot's input_precision, allowed ‖out − ref‖ / ‖ref‖ vs float64.
TORCH_DTYPES = {d: torch_dtype(d) for d in KERNEL_DTYPES}
PRECISION = {d: get_dtype(d).dot_precision for d in KERNEL_DTYPES}
TOLERANCE = {d: get_dtype(d).kernel_tolerance for d in KERNEL_DTYPES}
# Triton 3.6's interpreter multiplies the raw bits of 16-bit floats in tl.dot; under the
# interpreter the operands are widened to float32 first (exact: a product of two bf16 values is
# exact in fp32, as on the tensor cores). Compiled kernels never take this path.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _split_arrive(acc, ws_ptr, cnt_ptr, tile, pid_k, rm, rn, ok, M, N):
    # This split's float32 partial tile, then its arrival on the tile's counter. The barrier puts
    # every thread's stores before the one release-acquire atomic; the returned count is the
    # number of splits that arrived before this one.
    mn = tl.full((), 0, tl.int64) + M * N  # one split's partials (64-bit: KS·M·N may pass 2^31)
    part = ws_ptr + pid_k * mn + rm[:, None] * N + rn[None, :]
    tl.store(part, acc, mask=ok)
    tl.debug_barrier()
    return tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")


@triton.jit
def _split_total(ws_ptr, cnt_ptr, tile, rm, rn, ok, M, N, SPLIT_K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Run by the last split of a tile only: the sum in split order (deterministic), read past the
    # L1 (.cg: the partials were written by other SMs), and the counter reset for the next launch.
    mn = tl.full((), 0, tl.int64) + M * N
    part = ws_ptr + rm[:, None] * N + rn[None, :]
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, SPLIT_K):
        total += tl.load(part, mask=ok, other=0.0, cache_modifier=".cg")
        part += mn
    tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")
    return total


@triton.jit
def _tile_of(pid, pid_k, M, N, K, GROUP_M, SPLIT_K,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The output tile (grouped-M launch order) and k range of one program; every kernel shares it. The jit
    copy of the rules of `gemm_tiling_index` (GRID, SWIZZLE, SPLIT); tests/test_index_rules.py checks both agree."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_pid_n
    first_m = (pid // width) * GROUP_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % rows
    pid_n = (pid % width) // rows
    per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)
    return pid_m, pid_n, pid_k * per_split * BLOCK_K, per_split


@triton.jit(do_not_specialize=["M", "N", "K", "GROUP_M", "SPLIT_K"])
def _gemm_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K,
                 stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 GROUP_M, SPLIT_K,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 ALIGN: tl.constexpr, PRECISION: tl.constexpr, TO_WORKSPACE: tl.constexpr,
                 WIDEN: tl.constexpr = False):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m, pid_n, k_lo, per_split = _tile_of(pid, pid_k, M, N, K, GROUP_M, SPLIT_K, BLOCK_M, BLOCK_N, BLOCK_K)
    # The hints below are true because the host picks ALIGN dividing K, N and the strides; they
    # keep the k-tail mask and the row offsets vector-friendly so both loads are pipelined.
    k_hi = tl.multiple_of(tl.minimum(K, k_lo + per_split * BLOCK_K), ALIGN)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ram = rm % M
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, ALIGN), ALIGN)
    rk = tl.arange(0, BLOCK_K)
    a_rows = tl.multiple_of(ram * stride_am, ALIGN)
    b_rows = tl.multiple_of((k_lo + rk) * stride_bk, ALIGN)
    a_ptrs = a_ptr + a_rows[:, None] + (k_lo + rk)[None, :] * stride_ak
    b_ptrs = b_ptr + b_rows[:, None] + rbn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        k_ok = (k + rk) < k_hi
        a = tl.load(a_ptrs, mask=k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None], other=0.0)
        if WIDEN:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = _dot(a, b, acc, PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ok = (rm < M)[:, None] & (rn < N)[None, :]
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    if TO_WORKSPACE:
        if _split_arrive(acc, ws_ptr, cnt_ptr, pid, pid_k, rm, rn, c_ok, M, N) == SPLIT_K - 1:
            total = _split_total(ws_ptr, cnt_ptr, pid, rm, rn, c_ok, M, N, SPLIT_K, BLOCK_M, BLOCK_N)
            tl.store(c_ptrs, store_cast(total, c_ptr), mask=c_ok)
    else:
        tl.store(c_ptrs, store_cast(acc, c_ptr), mask=c_ok)


@triton.jit
def _tma_tile(desc, bid, r, c, R: tl.constexpr, C: tl.constexpr, STORED_T: tl.constexpr, BATCHED: tl.constexpr):
    # The R×C tile at (r, c) of a logical matrix through its descriptor; STORED_T: memory holds the
    # transpose (the tile is read as C×R and transposed in registers, which tl.dot takes as is);
    # BATCHED: a 3-D descriptor whose leading index is the batch.
    if STORED_T:
        if BATCHED:
            t = desc.load([bid, c, r]).reshape(C, R)
        else:
            t = desc.load([c, r])
        return tl.trans(t)
    else:
        if BATCHED:
            return desc.load([bid, r, c]).reshape(R, C)
        else:
            return desc.load([r, c])


@triton.jit
def _tma_mainloop(a_desc, b_desc, bid, off_m, off_n, k_lo, k_hi,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  PRECISION: tl.constexpr, WIDEN: tl.constexpr, A_T: tl.constexpr = False,
                  B_T: tl.constexpr = False, BATCHED: tl.constexpr = False):
    """The copy-engine main loop: the float32 accumulator of the BLOCK_M×BLOCK_N tile at (off_m,
    off_n) over k in [k_lo, k_hi). Shared by this family's kernel and gemm-epilogue's emitted ones
    (A_T/B_T: the operand is stored transposed; BATCHED: 3-D descriptors, batch `bid`)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        a = _tma_tile(a_desc, bid, off_m, k, BLOCK_M, BLOCK_K, A_T, BATCHED)
        b = _tma_tile(b_desc, bid, k, off_n, BLOCK_K, BLOCK_N, B_T, BATCHED)
        if WIDEN:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = _dot(a, b, acc, PRECISION)
    return acc


@triton.jit(do_not_specialize=["M", "N", "K", "GROUP_M", "SPLIT_K"])
def _gemm_tma_kernel(a_desc, b_desc, c_desc, ws_ptr, cnt_ptr, M, N, K, GROUP_M, SPLIT_K,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     PRECISION: tl.constexpr, TO_WORKSPACE: tl.constexpr, WIDEN: tl.constexpr = False):
    # The same tiles, swizzle and k split as _gemm_kernel; the copy engine (TMA) moves the tiles.
    # It fills reads past the tensor's edge with zeros and drops writes past it, so the tails need
    # no masks: the k tail of the last split and the M/N edge tiles are exact by construction.
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m, pid_n, k_lo, per_split = _tile_of(pid, pid_k, M, N, K, GROUP_M, SPLIT_K, BLOCK_M, BLOCK_N, BLOCK_K)
    k_hi = tl.minimum(K, k_lo + per_split * BLOCK_K)
    acc = _tma_mainloop(a_desc, b_desc, 0, pid_m * BLOCK_M, pid_n * BLOCK_N, k_lo, k_hi,
                        BLOCK_M, BLOCK_N, BLOCK_K, PRECISION, WIDEN)
    if TO_WORKSPACE:
        # Partials go out as plain stores (their visibility is ordered by the atomic; a bulk
        # tensor store would need an async-proxy fence first); the total leaves through TMA.
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = (rm < M)[:, None] & (rn < N)[None, :]
        if _split_arrive(acc, ws_ptr, cnt_ptr, pid, pid_k, rm, rn, ok, M, N) == SPLIT_K - 1:
            total = _split_total(ws_ptr, cnt_ptr, pid, rm, rn, ok, M, N, SPLIT_K, BLOCK_M, BLOCK_N)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], total.to(c_desc.dtype))
    else:
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def _sched():  # the persistent and stream-K kernels (that module imports this one's jit helpers)
    import formloop.library.gemm_tiling_sched_kernel as m  # noqa: PLC0415
    return m


def alignment(*values: int) -> int:
    """The largest power of two ≤ 8 dividing every value (the kernel's ALIGN hint)."""
    g = 0
    for v in values:
        g = math.gcd(g, int(v))
    a = 8
    while g % a:
        a //= 2
    return a


@dataclass(frozen=True)
class GemmPlan:
    """One instance of the family: a config bound to a shape and dtype (plan once, run many)."""

    config: TileConfig
    M: int
    N: int
    K: int
    dtype: str = "bf16"
    maxnreg: int | None = None  # registers per thread cap (Triton's maxnreg): an emulated chip's register wall
    sms: int = 132  # programs of the persistent and stream-K schedules (SC = 1, 2): the chip's SMs

    def __post_init__(self) -> None:
        if self.dtype not in TORCH_DTYPES:
            raise InvalidInput("dtype", self.dtype, sorted(TORCH_DTYPES))
        if self.config.simt:
            raise InvalidInput("Tm of gemm-tiling-gpu", 1, "a power of two >= 16 (Tm = 1, the CUDA-core GEMV, is "
                                                           "gemv-epilogue-gpu's)")
        for name in ("M", "N", "K"):
            if int(getattr(self, name)) < 1:
                raise InvalidInput(name, getattr(self, name), "a positive integer")
        if self.maxnreg is not None and not 24 <= self.maxnreg <= 255:
            raise InvalidInput("maxnreg", self.maxnreg, "None or 24..255 registers per thread")

    @property
    def torch_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.dtype]

    @property
    def grid(self) -> tuple[int, int]:
        c = self.config
        return (_sched().programs(self), 1) if c.SC else (triton.cdiv(self.M, c.Tm) * triton.cdiv(self.N, c.Tn), c.KS)

    @property
    def workspace_shape(self) -> tuple[int, ...] | None:
        c = self.config
        return _sched().workspace_shape(self) if c.SC else ((c.KS, self.M, self.N) if c.KS > 1 else None)

    @property
    def tiles(self) -> int:
        return triton.cdiv(self.M, self.config.Tm) * triton.cdiv(self.N, self.config.Tn)

    def new_workspace(self, device) -> torch.Tensor | None:
        """The float32 partial tiles of split-K, with the per-tile arrival counters (zeroed once;
        the kernel leaves them at zero) appended as int32 words after the partials."""
        shape = self.workspace_shape
        if shape is None:
            return None
        ws = torch.empty(self._counters_at + self.tiles, device=device, dtype=torch.float32)
        ws[self._counters_at:].view(torch.int32).zero_()
        return ws

    @property
    def _counters_at(self) -> int:
        n = math.prod(self.workspace_shape)
        return n + (-n) % 4  # 16-byte aligned, like every pointer the precompiled kernels assume

    def _split_buffers(self, workspace: torch.Tensor | None):
        """(partials, counters) views of the workspace, or the error naming what is expected."""
        size = self._counters_at + self.tiles
        if workspace is None or workspace.dtype != torch.float32 or workspace.numel() != size \
                or not workspace.is_contiguous():
            raise InvalidInput("workspace", None if workspace is None else (workspace.dtype, tuple(workspace.shape)),
                               f"a contiguous float32 tensor of {size} elements (GemmPlan.new_workspace)")
        return workspace[: self._counters_at], workspace[self._counters_at:].view(torch.int32)

    def launch(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, workspace: torch.Tensor | None = None) -> None:
        """C = A·B. `c` must be a contiguous M×N tensor; split-K needs the float32 workspace. This is the
        ordinary JIT launch (Triton's Python launcher, descriptors built per call); a `LaunchPlan`
        (gemm_tiling_launch) builds them once and launches through the compiled kernel's handle."""
        kernel, args, options = self.kernel_call(a, b, c, workspace)
        kernel[self.grid](*args, **options)

    def kernel_call(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, workspace: torch.Tensor | None = None):
        """(jit kernel, every argument in declaration order, launch options) for C = A·B: the one
        place the launch arguments are built, shared by `launch` and the plan/run path."""
        cfg = self.config
        shapes = (tuple(a.shape), tuple(b.shape), tuple(c.shape))
        if shapes != ((self.M, self.K), (self.K, self.N), (self.M, self.N)):
            raise InvalidInput("operand shapes", shapes,
                               f"A {self.M}x{self.K}, B {self.K}x{self.N}, C {self.M}x{self.N}")
        if not c.is_contiguous():
            raise InvalidInput("C layout", c.stride(), "a contiguous (row-major) output")
        split = self.workspace_shape is not None
        ws, cnt = self._split_buffers(workspace) if split else (c, c)
        widen = INTERPRETED and self.dtype in ("bf16", "fp16")
        options = {"num_warps": cfg.W, "num_stages": cfg.S}
        if self.maxnreg is not None:
            options["maxnreg"] = self.maxnreg
        if cfg.SC:
            return _sched().kernel_call(self, self._descriptors(a, b, c), ws, cnt, PRECISION[self.dtype], widen,
                                        options)
        if cfg.L:
            a_d, b_d, c_d = self._descriptors(a, b, c)
            return _gemm_tma_kernel, (a_d, b_d, c_d, ws, cnt, self.M, self.N, self.K, cfg.G, cfg.KS, cfg.Tm, cfg.Tn,
                                      cfg.Tk, PRECISION[self.dtype], split, widen), options
        align = alignment(self.K, self.N, a.stride(0), b.stride(0))
        return _gemm_kernel, (a, b, c, ws, cnt, self.M, self.N, self.K,
                              a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                              cfg.G, cfg.KS, cfg.Tm, cfg.Tn, cfg.Tk, align, PRECISION[self.dtype], split,
                              widen), options

    def _descriptors(self, a, b, c):
        from triton.tools.tensor_descriptor import TensorDescriptor

        cfg = self.config
        e = a.element_size()
        if (a.stride(0) * e) % 16 or (b.stride(0) * e) % 16 or (c.stride(0) * c.element_size()) % 16 or \
                a.stride(1) != 1 or b.stride(1) != 1:
            raise InvalidInput("row pitch for the TMA path (L=1)", (a.stride(), b.stride()),
                               "unit inner stride and 16-byte aligned row pitches", fix="use L=0")
        return (TensorDescriptor.from_tensor(a, [cfg.Tm, cfg.Tk]), TensorDescriptor.from_tensor(b, [cfg.Tk, cfg.Tn]),
                TensorDescriptor.from_tensor(c, [cfg.Tm, cfg.Tn]))

    def warmup(self, align: int) -> None:
        """Compile without launching (fills Triton's cache; used by parallel pre-compilation)."""
        cfg, t, split = self.config, self.torch_dtype, self.config.KS > 1
        if cfg.L:  # descriptors carry only dtype and block shape into the compile key
            from triton.tools.tensor_descriptor import TensorDescriptor

            def desc(dtype, shape, block):
                x = MockTensor(dtype, list(shape))
                return TensorDescriptor(x, list(shape), list(x.stride()), list(block))

            if cfg.SC:
                return _sched().warmup(self, desc, t, PRECISION[self.dtype])
            ws, cnt = (torch.float32, torch.int32) if split else (t, t)
            _gemm_tma_kernel.warmup(desc(t, (16, 16), (cfg.Tm, cfg.Tk)), desc(t, (16, 16), (cfg.Tk, cfg.Tn)),
                                    desc(t, (16, 16), (cfg.Tm, cfg.Tn)), ws, cnt, self.M, self.N, self.K, cfg.G, cfg.KS,
                                    BLOCK_M=cfg.Tm, BLOCK_N=cfg.Tn,
                                    BLOCK_K=cfg.Tk, PRECISION=PRECISION[self.dtype], TO_WORKSPACE=split, WIDEN=False,
                                    num_warps=cfg.W, num_stages=cfg.S, grid=(1, 1))
        else:
            self._warmup_pointer(align)

    def _warmup_pointer(self, align: int) -> None:
        cfg = self.config
        t = self.torch_dtype
        split = cfg.KS > 1
        ws, cnt = (torch.float32, torch.int32) if split else (t, t)
        _gemm_kernel.warmup(t, t, t, ws, cnt, self.M, self.N, self.K,
                            self.K, 1, self.N, 1, self.N, 1, cfg.G, cfg.KS,
                            BLOCK_M=cfg.Tm, BLOCK_N=cfg.Tn, BLOCK_K=cfg.Tk, ALIGN=align,
                            PRECISION=PRECISION[self.dtype], TO_WORKSPACE=split, WIDEN=False,
                            num_warps=cfg.W, num_stages=cfg.S, grid=(1, 1))
