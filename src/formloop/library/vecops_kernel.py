"""Triton kernels of the vecops family (formloop.library.vecops) and the functions a ModelNew calls.

seg_norm: group / instance / batch norm of a contiguous x [N, C, *spatial] in three launches: partial
statistics of row chunks (rows are x's [N·C, HW] rows; each chunk's count, mean and M2 about a shift),
their combination per statistic (Chan's formula; batch norm also updates the running mean and the
unbiased running variance in place), and the affine normalization. Statistic of row (n, c):
n·G + c // (C/G) for group norm (instance norm: G = C), c for batch norm.
row_scan: inclusive prefix sum along the last dim. The fp32 prefix of a 32768-long row of randn drifts
by ~1e-4 (KernelBench's whole fp32 tolerance) from the exact one, for PyTorch too, in an order-dependent
way: KernelBench compares with torch.cumsum, so by default the kernel adds in PyTorch's CUDA order
(_scan_torch_kernel: the same roundings, no difference to see); order='fp64' sums in fp64 (the exact
prefix rounded once). Both memory-bound: a few adds per element.
col_argreduce: argmax / argmin of [B, D1, D2] over D1 (first index of the extreme), int64 out.
Storage: fp32, bf16 or fp16 (FLOATS); the arithmetic is fp32 (statistics, partials, the scan's adds, the
comparisons), outputs are stored in x's dtype, as PyTorch's CUDA kernels do for these ops. In 16 bits the
'torch' scan rounds every add to the storage type as PyTorch's does (its shared buffer holds scalar_t), so it
stays bit for bit PyTorch's. Triton 3.6's interpreter truncates fp32 -> bf16 (the GPU rounds to nearest even):
under TRITON_INTERPRET=1 bf16 rounds in integer arithmetic (_rne, through gemm_dot.store_cast), the GPU's bits.
Designs are vecops.solved_design's (BC, RP, W, SPLIT)."""
from __future__ import annotations

from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from formloop.errors import InvalidInput
from formloop.library.gemm_dot import store_cast

FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def float_x(x: torch.Tensor, what: str) -> None:
    if x.dtype not in FLOATS:
        raise InvalidInput(f"{what} dtype", str(x.dtype), [str(d) for d in FLOATS])


@triton.jit
def _rne(x, p):
    """fp32 x rounded to the element type of pointer p, as fp32 (identity for an fp32 p): store_cast's rounding,
    to nearest even under the interpreter too."""
    return store_cast(x, p).to(tl.float32)


@triton.jit
def _stats_kernel(x_ptr, cnt_ptr, mean_ptr, m2_ptr, ROWS, HW, CHUNK, SPLIT, BC: tl.constexpr, RP: tl.constexpr):
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    s = tl.program_id(1)
    row_ok = rows < ROWS
    base = rows.to(tl.int64) * HW
    c0 = s * CHUNK
    shift = tl.load(x_ptr + base + c0, mask=row_ok & (c0 < HW), other=0.0).to(tl.float32)
    acc = tl.zeros([RP, BC], tl.float32)
    acc2 = tl.zeros([RP, BC], tl.float32)
    for k in range(0, CHUNK, BC):
        cols = c0 + k + tl.arange(0, BC)
        m = row_ok[:, None] & ((cols < HW) & (cols < c0 + CHUNK))[None, :]
        x = tl.load(x_ptr + base[:, None] + cols[None, :], mask=m, other=0.0).to(tl.float32)
        d = tl.where(m, x - shift[:, None], 0.0)
        acc += d
        acc2 += d * d
    n = tl.maximum(tl.minimum(HW - c0, CHUNK), 0).to(tl.float32)
    sm = tl.sum(acc, 1)
    dm = tl.where(n > 0, sm / tl.maximum(n, 1.0), 0.0)
    m2 = tl.sum(acc2, 1) - sm * dm
    out = rows * SPLIT + s
    tl.store(cnt_ptr + out, tl.zeros([RP], tl.float32) + n, mask=row_ok)
    tl.store(mean_ptr + out, shift + dm, mask=row_ok)
    tl.store(m2_ptr + out, tl.maximum(m2, 0.0), mask=row_ok)


@triton.jit
def _combine_kernel(cnt_ptr, mean_ptr, m2_ptr, smean_ptr, srstd_ptr, rm_ptr, rv_ptr, A, ASTRIDE, STAT_MUL, SPLIT,
                    eps, momentum, UPDATE: tl.constexpr, BLOCK: tl.constexpr):
    """Statistic st combines the partials of rows st·STAT_MUL + a·ASTRIDE (a < A), SPLIT chunks each."""
    st = tl.program_id(0)
    total = A * SPLIT
    tot_n = tl.zeros([BLOCK], tl.float32)
    tot_s = tl.zeros([BLOCK], tl.float32)
    for k in range(0, total, BLOCK):
        i = k + tl.arange(0, BLOCK)
        ok = i < total
        p = (st * STAT_MUL + (i // SPLIT) * ASTRIDE) * SPLIT + i % SPLIT
        n = tl.load(cnt_ptr + p, mask=ok, other=0.0)
        tot_n += n
        tot_s += n * tl.load(mean_ptr + p, mask=ok, other=0.0)
    count = tl.sum(tot_n, 0)
    mean = tl.sum(tot_s, 0) / count
    m2 = tl.zeros([BLOCK], tl.float32)
    for k in range(0, total, BLOCK):
        i = k + tl.arange(0, BLOCK)
        ok = i < total
        p = (st * STAT_MUL + (i // SPLIT) * ASTRIDE) * SPLIT + i % SPLIT
        n = tl.load(cnt_ptr + p, mask=ok, other=0.0)
        d = tl.load(mean_ptr + p, mask=ok, other=0.0) - mean
        m2 += tl.load(m2_ptr + p, mask=ok, other=0.0) + n * d * d
    M2 = tl.sum(m2, 0)
    tl.store(smean_ptr + st, mean)
    tl.store(srstd_ptr + st, 1.0 / tl.sqrt(M2 / count + eps))
    if UPDATE:
        rm = tl.load(rm_ptr + st).to(tl.float32)
        rv = tl.load(rv_ptr + st).to(tl.float32)
        unbiased = M2 / tl.maximum(count - 1.0, 1.0)
        tl.store(rm_ptr + st, store_cast((1.0 - momentum) * rm + momentum * mean, rm_ptr))
        tl.store(rv_ptr + st, store_cast((1.0 - momentum) * rv + momentum * unbiased, rv_ptr))


@triton.jit
def _apply_kernel(x_ptr, y_ptr, smean_ptr, srstd_ptr, w_ptr, b_ptr, ROWS, HW, CHUNK, CH, SN, CG,
                  AFFINE: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr):
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    s = tl.program_id(1)
    row_ok = rows < ROWS
    ch = rows % CH
    st = (rows // CH) * SN + ch // CG
    # y = (x − mean)·(rstd·w) + b: subtracting first keeps a constant row exact (x·scale − mean·scale leaves
    # an ulp of x·rstd, ~1e-4 at x = 7, rstd = 1/sqrt(eps)); one more add per element in a memory-bound pass
    mean = tl.load(smean_ptr + st, mask=row_ok, other=0.0)
    scale = tl.load(srstd_ptr + st, mask=row_ok, other=0.0)
    shift = tl.zeros([RP], tl.float32)
    if AFFINE:
        w = tl.load(w_ptr + ch, mask=row_ok, other=0.0).to(tl.float32)
        shift = tl.load(b_ptr + ch, mask=row_ok, other=0.0).to(tl.float32)
        scale = scale * w
    base = rows.to(tl.int64) * HW
    c0 = s * CHUNK
    for k in range(0, CHUNK, BC):
        cols = c0 + k + tl.arange(0, BC)
        m = row_ok[:, None] & ((cols < HW) & (cols < c0 + CHUNK))[None, :]
        off = base[:, None] + cols[None, :]
        x = tl.load(x_ptr + off, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + off, store_cast((x - mean[:, None]) * scale[:, None] + shift[:, None], y_ptr), mask=m)


@triton.jit
def _scan_kernel(x_ptr, y_ptr, R, C, BC: tl.constexpr, RP: tl.constexpr):
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    row_ok = rows < R
    base = rows.to(tl.int64) * C
    carry = tl.zeros([RP], tl.float64)
    for c0 in range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        m = row_ok[:, None] & (cols < C)[None, :]
        off = base[:, None] + cols[None, :]
        x = tl.load(x_ptr + off, mask=m, other=0.0).to(tl.float64)   # fp64 sums: each output is the
        y = tl.cumsum(x, axis=1) + carry[:, None]                     # exact prefix, rounded once
        tl.store(y_ptr + off, store_cast(y, y_ptr), mask=m)
        # the carry is the tile's last prefix (masked lanes add 0); not `carry += tl.sum(x, 1)`, which crashes
        # Triton 3.6's thread-locality pass for some tiles
        carry = tl.sum(tl.where((tl.arange(0, BC) == BC - 1)[None, :], y, 0.0), 1)


@triton.jit
def _scan_torch_kernel(x_ptr, y_ptr, R, C, LOGX: tl.constexpr, RP: tl.constexpr):
    """PyTorch's CUDA cumsum order over rows (tensor_kernel_scan_innermost_dim): chunks of
    CH = 2 << LOGX columns, the running total added to each chunk's first value, then a Sklansky
    scan of the chunk. Written as: B = the Sklansky partials that do not reach back to the chunk's
    first value (the same sums in the same order), then the chain e_0 = x_0 + carry, e_k = B[2^k - 1]
    + e_(k-1), and out_j = B_j + e_(floor(log2 j)): every output is rounded exactly as PyTorch rounds it.
    16-bit storage: each add rounded to it (_rne: PyTorch's shared buffer is scalar_t; identity for fp32)."""
    CH: tl.constexpr = 2 << LOGX
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    row_ok = rows < R
    base = rows.to(tl.int64) * C
    lane = tl.arange(0, CH)
    carry = tl.zeros([RP], tl.float32)
    for c0 in range(0, C, CH):
        cols = c0 + lane
        m = row_ok[:, None] & (cols < C)[None, :]
        off = base[:, None] + cols[None, :]
        b = tl.load(x_ptr + off, mask=m, other=0.0).to(tl.float32)
        for lv in tl.static_range(LOGX + 1):   # level lv: the second half of each 2s-group += the first's last
            b4 = tl.reshape(b, (RP, CH // (2 << lv), 2, 1 << lv))   # [rows, groups, halves, 2^lv]
            half = tl.arange(0, 2)[:, None]
            pos = tl.arange(0, 1 << lv)[None, :]
            src = tl.sum(tl.sum(tl.where(((half == 0) & (pos == (1 << lv) - 1))[None, None, :, :], b4, 0.0), 3), 2)
            upd = ((tl.arange(0, CH // (2 << lv)) > 0)[:, None, None] & (half == 1)[None, :, :])[None, :, :, :]
            b = tl.reshape(tl.where(upd, _rne(b4 + src[:, :, None, None], y_ptr), b4), (RP, CH))
        e0 = _rne(tl.sum(tl.where((lane == 0)[None, :], b, 0.0), 1) + carry, y_ptr)    # E_0 = x_0 + carry
        e = e0
        sel = tl.zeros([RP, CH], tl.float32) + e0[:, None]
        for k in tl.static_range(1, LOGX + 1):   # E_k = B[2^k - 1] + E_(k-1): the prefix through 2^k - 1
            e = _rne(tl.sum(tl.where((lane == (1 << k) - 1)[None, :], b, 0.0), 1) + e, y_ptr)
            sel = tl.where((lane >= (1 << k))[None, :], e[:, None], sel)
        e = _rne(tl.sum(tl.where((lane == CH - 1)[None, :], b, 0.0), 1) + e, y_ptr)  # the chunk's last: carry
        y = _rne(tl.where((lane == 0)[None, :], e0[:, None], b + sel), y_ptr)
        tl.store(y_ptr + off, y.to(y_ptr.dtype.element_ty), mask=m)
        carry = e


@triton.jit
def _colarg_kernel(x_ptr, y_ptr, D1, D2, MIN: tl.constexpr, BC: tl.constexpr, RP: tl.constexpr):
    """Program (b, tile of RP contiguous output columns) walks D1 BC rows at a time."""
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * RP + tl.arange(0, RP)
    col_ok = cols < D2
    base = b * D1 * D2
    if MIN:
        acc = tl.full([BC, RP], float("inf"), tl.float32)
    else:
        acc = tl.full([BC, RP], float("-inf"), tl.float32)
    idx = tl.zeros([BC, RP], tl.int32)
    for d0 in range(0, D1, BC):
        d = d0 + tl.arange(0, BC)
        m = (d < D1)[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + base + d.to(tl.int64)[:, None] * D2 + cols[None, :], mask=m,
                    other=float("inf") if MIN else float("-inf")).to(tl.float32)
        if MIN:
            better = (x < acc) & m
        else:
            better = (x > acc) & m
        idx = tl.where(better, d[:, None], idx)
        acc = tl.where(better, x, acc)
    if MIN:
        best = tl.min(acc, 0)
    else:
        best = tl.max(acc, 0)
    cand = tl.where(acc == best[None, :], idx, 2147483647)
    out = tl.min(cand, 0)
    tl.store(y_ptr + b * D2 + cols, out.to(tl.int64), mask=col_ok)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


MODES = ("group", "instance", "batch")


def seg_norm(mode: str, x: torch.Tensor, *, stats: Mapping[str, int], apply: Mapping[str, int], groups: int = 1,
             weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5,
             running_mean: torch.Tensor | None = None, running_var: torch.Tensor | None = None,
             momentum: float = 0.1, use_batch_stats: bool = True) -> torch.Tensor:
    """group_norm / instance_norm / batch_norm (training: batch statistics, running stats updated in place;
    eval: the running statistics) of x [N, C, *spatial], with the designs of the stats and apply kernels."""
    if mode not in MODES:
        raise InvalidInput("seg_norm mode", mode, MODES)
    if x.dim() < 2:
        raise InvalidInput("seg_norm x", tuple(x.shape), "an [N, C, ...] tensor")
    float_x(x, "seg_norm x")
    x = x if x.is_contiguous() else x.contiguous()
    n, ch = int(x.shape[0]), int(x.shape[1])
    hw = x.numel() // max(1, n * ch)
    g = ch if mode == "instance" else groups
    if mode == "group" and (g < 1 or ch % g):
        raise InvalidInput("group_norm groups", g, f"a divisor of C={ch}")
    rows = n * ch
    y = torch.empty_like(x)
    if rows == 0 or hw == 0:
        return y
    nstat = ch if mode == "batch" else n * g
    if mode == "batch" and not use_batch_stats:
        smean = running_mean.to(torch.float32)
        srstd = torch.rsqrt(running_var.to(torch.float32) + eps)
    else:
        bc, rp, split = int(stats["BC"]), int(stats["RP"]), int(stats["SPLIT"])
        chunk = triton.cdiv(triton.cdiv(hw, split), bc) * bc
        split = triton.cdiv(hw, chunk)
        part = torch.empty(3, rows * split, device=x.device, dtype=torch.float32)
        _stats_kernel[(triton.cdiv(rows, rp), split)](x, part[0], part[1], part[2], rows, hw, chunk, split, BC=bc,
                                                      RP=rp, num_warps=int(stats["W"]))
        smean = torch.empty(nstat, device=x.device, dtype=torch.float32)
        srstd = torch.empty_like(smean)
        if mode == "batch":
            a, astride, mul = n, ch, 1
        else:
            a, astride, mul = ch // g, 1, ch // g
        update = mode == "batch" and running_mean is not None
        rm = running_mean if update else smean
        rv = running_var if update else srstd
        block = min(1024, _pow2(max(a * split, 16)))
        _combine_kernel[(nstat,)](part[0], part[1], part[2], smean, srstd, rm, rv, a, astride, mul, split,
                                  float(eps), float(momentum), UPDATE=update, BLOCK=block, num_warps=4)
    bc, rp, split = int(apply["BC"]), int(apply["RP"]), int(apply["SPLIT"])
    chunk = triton.cdiv(triton.cdiv(hw, split), bc) * bc
    sn, cg = (0, 1) if mode == "batch" else (g, ch // g)
    affine = weight is not None
    w = weight if affine else smean
    b = (bias if bias is not None else torch.zeros_like(weight)) if affine else smean
    _apply_kernel[(triton.cdiv(rows, rp), triton.cdiv(hw, chunk))](x, y, smean, srstd, w, b, rows, hw, chunk, ch, sn,
                                                                   cg, AFFINE=affine, BC=bc, RP=rp,
                                                                   num_warps=int(apply["W"]))
    return y


def torch_scan_log_x(rows: int, cols: int) -> int:
    """log2 of PyTorch's x-threads for an innermost-dim CUDA scan (get_log_num_threads_x_inner_scan,
    in uint32 arithmetic as PyTorch instantiates it): its chunk is 2 << this many columns."""
    lx = max(0, int(cols) - 1).bit_length()
    ly = max(0, int(rows) - 1).bit_length()
    v = ((9 + ((lx - ly) % 2**32)) % 2**32) // 2
    return min(max(4, v), 9)


def torch_scan_rows(config: Mapping[str, int], logx: int) -> int:
    """Rows per program of the PyTorch-order scan: the design's tile (BC x RP elements) as rows of
    PyTorch's chunk (2 << logx columns), a power of two in 1 ... 128."""
    tile = int(config["BC"]) * int(config["RP"])
    return 1 << max(0, min(7, max(1, tile // (2 << logx)).bit_length() - 1))


def row_scan(x: torch.Tensor, *, config: Mapping[str, int], order: str = "auto") -> torch.Tensor:
    """torch.cumsum(x, dim=-1) for fp32 / bf16 / fp16 x. order 'torch': PyTorch's CUDA summation order (chunks,
    running total, Sklansky; bit for bit what torch.cumsum returns on a GPU for more than one row,
    so KernelBench's rule, which compares with it, sees no difference); 'fp64': the exact prefix
    rounded once (also for a single row, where PyTorch uses CUB). 'auto' (the ModelNew's): 'torch', except
    a 16-bit x on the CPU (the interpreter), whose torch.cumsum is a sequential fp32 sum rounded once per
    output: 'fp64' is that within an ulp (4 of 131072 bf16 outputs one ulp off at 64 x 2048), where the CUDA
    order's per-add roundings fail KernelBench's 1e-2 against it."""
    if x.dim() < 1:
        raise InvalidInput("row_scan x", tuple(x.shape), "a tensor of rank >= 1")
    float_x(x, "row_scan x")
    if order not in ("auto", "torch", "fp64"):
        raise InvalidInput("row_scan order", order, "auto, torch, fp64")
    if order == "auto":
        order = "fp64" if x.dtype != torch.float32 and x.device.type == "cpu" else "torch"
    x = x if x.is_contiguous() else x.contiguous()
    c = int(x.shape[-1]) if x.dim() else 1
    r = x.numel() // max(c, 1)
    y = torch.empty_like(x)
    if not x.numel():
        return y
    if order == "torch" and r > 1:
        logx = torch_scan_log_x(r, c)
        rp = torch_scan_rows(config, logx)
        _scan_torch_kernel[(triton.cdiv(r, rp),)](x, y, r, c, LOGX=logx, RP=rp, num_warps=int(config["W"]))
    else:
        rp = int(config["RP"])
        _scan_kernel[(triton.cdiv(r, rp),)](x, y, r, c, BC=int(config["BC"]), RP=rp,
                                            num_warps=int(config["W"]))
    return y


def col_argreduce(op: str, x: torch.Tensor, dim: int, *, config: Mapping[str, int]) -> torch.Tensor:
    """torch.argmax / argmin(x, dim) (keepdim off) for fp32 / bf16 / fp16 x, any dim (compared in fp32: exact)."""
    if op not in ("argmax", "argmin") or x.dim() < 1:
        raise InvalidInput("col_argreduce (op, rank)", (op, x.dim()), "argmax/argmin of a tensor of rank >= 1")
    float_x(x, "col_argreduce x")
    dim = dim % x.dim()
    x = x if x.is_contiguous() else x.contiguous()
    shape = tuple(x.shape)
    b = 1
    for s in shape[:dim]:
        b *= s
    d2 = 1
    for s in shape[dim + 1:]:
        d2 *= s
    d1 = shape[dim]
    if d1 == 0:
        raise InvalidInput("col_argreduce reduced extent", 0, ">= 1")
    y = torch.empty(shape[:dim] + shape[dim + 1:], device=x.device, dtype=torch.int64)
    if y.numel():
        rp = int(config["RP"])
        _colarg_kernel[(b, triton.cdiv(d2, rp))](x, y, d1, d2, MIN=op == "argmin", BC=int(config["BC"]), RP=rp,
                                                 num_warps=int(config["W"]))
    return y


def module_norm(x: torch.Tensor, mod, *, stats: Mapping[str, int], apply: Mapping[str, int]) -> torch.Tensor:
    """What nn.GroupNorm / nn.InstanceNorm*d (no running stats) / nn.BatchNorm*d `mod` computes on x, with
    its semantics read at call time: training or eval, running statistics updated in place (momentum set),
    num_batches_tracked counted, affine or not."""
    kind = type(mod).__name__
    w, b = getattr(mod, "weight", None), getattr(mod, "bias", None)
    if kind == "GroupNorm":
        return seg_norm("group", x, stats=stats, apply=apply, groups=mod.num_groups, weight=w, bias=b, eps=mod.eps)
    if kind.startswith("InstanceNorm"):
        if mod.track_running_stats:
            raise InvalidInput(f"{kind}.track_running_stats", True, [False])
        return seg_norm("instance", x, stats=stats, apply=apply, weight=w, bias=b, eps=mod.eps)
    if not kind.startswith("BatchNorm") or mod.momentum is None:
        raise InvalidInput("module_norm module", kind, "GroupNorm, InstanceNorm*d, BatchNorm*d with a momentum")
    update = mod.training and mod.track_running_stats
    if update and mod.num_batches_tracked is not None:
        mod.num_batches_tracked.add_(1)
    batch = mod.training or mod.running_mean is None
    return seg_norm("batch", x, stats=stats, apply=apply, weight=w, bias=b, eps=mod.eps,
                    running_mean=mod.running_mean if (update or not batch) else None,
                    running_var=mod.running_var if (update or not batch) else None,
                    momentum=float(mod.momentum), use_batch_stats=batch)
