"""Index-computed gathers of the vecops family (vecops 'gather' kind) and cross-entropy, as ModelNew calls.

unfold2d: F.unfold of x [N, C, H, W] (dilation, padding, stride), out [N, C·kh·kw, L]; the output viewed
[N·C·kh·kw, L] is tiled [RP, BC]; each element reads its input (0 outside the padding).
max_pool2d: F.max_pool2d (floor mode, no indices) of x [N, C, H, W]; the output viewed [N·C·OH, OW]; design GL
picks one load per window tap (GL 0) or window-row runs (GL 1: Q contiguous [BC, SW] runs per input row, lanes on
consecutive addresses; vecops.pool_row_taps).
cross_entropy: F.cross_entropy(logits [N, C], targets [N]) with reduction 'mean' and an ignore_index:
one online log-sum-exp per row (rowwise logsumexp's design), the target's logit subtracted, then the mean
over the rows kept (a second one-program launch, fixed order: deterministic).
unfold2d and max_pool2d take fp32, bf16 or fp16 x (vecops_kernel.FLOATS): a copy and a max, exact in any of
them (the max compares the upcast fp32 values; stored back, they are the inputs' own); cross_entropy fp32."""
from __future__ import annotations

from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from formloop.errors import InvalidInput
from formloop.library.vecops import pool_row_taps
from formloop.library.vecops_kernel import FLOATS


@triton.jit
def _unfold_kernel(x_ptr, y_ptr, ROWS, L, C, H, W, OW, KH: tl.constexpr, KW: tl.constexpr, SH, SW, PH, PW, DH, DW,
                   BC: tl.constexpr, RP: tl.constexpr):
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    m_out = (rows < ROWS)[:, None] & (cols < L)[None, :]
    kk = rows % (C * KH * KW)
    n = rows // (C * KH * KW)
    c = kk // (KH * KW)
    i = (kk // KW) % KH
    j = kk % KW
    oh = cols // OW
    ow = cols % OW
    ih = oh[None, :] * SH - PH + (i * DH)[:, None]
    iw = ow[None, :] * SW - PW + (j * DW)[:, None]
    ok = m_out & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    src = ((n.to(tl.int64) * C + c)[:, None] * H + ih) * W + iw
    v = tl.load(x_ptr + src, mask=ok, other=0.0)
    tl.store(y_ptr + rows.to(tl.int64)[:, None] * L + cols[None, :], v, mask=m_out)


@triton.jit
def _maxpool_kernel(x_ptr, y_ptr, ROWS, OH, OW, H, W, KH: tl.constexpr, KW: tl.constexpr, SH, SW, PH, PW, DH, DW,
                    BC: tl.constexpr, RP: tl.constexpr):
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    m_out = (rows < ROWS)[:, None] & (cols < OW)[None, :]
    nc = rows // OH
    oh = rows % OH
    acc = tl.full([RP, BC], float("-inf"), tl.float32)
    for i in tl.static_range(KH):
        ih = oh * SH - PH + i * DH
        row_ok = (ih >= 0) & (ih < H)
        for j in tl.static_range(KW):
            iw = cols * SW - PW + j * DW
            ok = m_out & row_ok[:, None] & ((iw >= 0) & (iw < W))[None, :]
            src = (nc.to(tl.int64) * H + ih)[:, None] * W + iw[None, :]
            v = tl.load(x_ptr + src, mask=ok, other=float("-inf")).to(tl.float32)
            acc = tl.where(v > acc, v, acc)
    tl.store(y_ptr + rows.to(tl.int64)[:, None] * OW + cols[None, :], acc.to(y_ptr.dtype.element_ty), mask=m_out)


@triton.jit
def _maxpool_rows_kernel(x_ptr, y_ptr, ROWS, OH, OW, H, W, KH: tl.constexpr, KW: tl.constexpr, SH,
                         SW: tl.constexpr, PH, PW, DH, DW: tl.constexpr, Q: tl.constexpr, SWP: tl.constexpr,
                         BC: tl.constexpr, RP: tl.constexpr):
    """Window-row loads: for each input row of the window, Q contiguous [BC, SW] runs (output column ow reads
    x[.., (ow + q)·SW − PW + s], s < SW), so a warp's lanes read consecutive addresses; the taps are the run
    elements at offset q·SW + s = j·DW (j < KW), the others masked out of the max. Tiles are [BC, RP, SWP]
    (columns first: Triton orders equally contiguous dims by index, so the lanes run along the columns)."""
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    m_out = (cols < OW)[:, None] & (rows < ROWS)[None, :]
    nc = rows // OH
    oh = rows % OH
    s = tl.arange(0, SWP)
    acc = tl.full([BC, RP], float("-inf"), tl.float32)
    for i in tl.static_range(KH):
        ih = oh * SH - PH + i * DH
        row_ok = m_out & ((ih >= 0) & (ih < H))[None, :]
        base = (nc.to(tl.int64) * H + ih) * W
        for q in tl.static_range(Q):
            tap = q * SW + s
            iw = (cols * SW + (q * SW) - PW)[:, None] + s[None, :]
            col_ok = (iw >= 0) & (iw < W) & ((s < SW) & (tap % DW == 0) & (tap // DW < KW))[None, :]
            ok = row_ok[:, :, None] & col_ok[:, None, :]
            v = tl.load(x_ptr + base[None, :, None] + iw[:, None, :], mask=ok, other=float("-inf")).to(tl.float32)
            vm = tl.max(v, 2)
            acc = tl.where(vm > acc, vm, acc)
    out = rows.to(tl.int64)[None, :] * OW + cols[:, None]
    tl.store(y_ptr + out, acc.to(y_ptr.dtype.element_ty), mask=m_out)


@triton.jit
def _xent_rows_kernel(x_ptr, t_ptr, loss_ptr, valid_ptr, R, C, IGNORE, BC: tl.constexpr, RP: tl.constexpr):
    rows = tl.program_id(0) * RP + tl.arange(0, RP)
    row_ok = rows < R
    base = rows.to(tl.int64) * C
    mv = tl.full([RP, BC], float("-inf"), tl.float32)
    sv = tl.zeros([RP, BC], tl.float32)
    for c0 in range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        m = row_ok[:, None] & (cols < C)[None, :]
        x = tl.load(x_ptr + base[:, None] + cols[None, :], mask=m, other=float("-inf")).to(tl.float32)
        mn = tl.maximum(mv, x)
        safe = tl.where(mn == float("-inf"), 0.0, mn)
        sv = sv * tl.exp(mv - safe) + tl.exp(x - safe)
        mv = mn
    mx = tl.max(mv, 1)
    safe = tl.where(mx == float("-inf"), 0.0, mx)
    lse = safe + tl.log(tl.sum(sv * tl.exp(mv - safe[:, None]), 1))
    t = tl.load(t_ptr + rows, mask=row_ok, other=IGNORE)
    valid = row_ok & (t != IGNORE)
    picked = tl.load(x_ptr + base + tl.where(valid, t, 0), mask=valid, other=0.0).to(tl.float32)
    tl.store(loss_ptr + rows, tl.where(valid, lse - picked, 0.0), mask=row_ok)
    tl.store(valid_ptr + rows, valid.to(tl.float32), mask=row_ok)


@triton.jit
def _mean_kernel(loss_ptr, valid_ptr, out_ptr, R, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    cnt = tl.zeros([BLOCK], tl.float32)
    for r0 in range(0, R, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        acc += tl.load(loss_ptr + r, mask=r < R, other=0.0)
        cnt += tl.load(valid_ptr + r, mask=r < R, other=0.0)
    tl.store(out_ptr, tl.sum(acc, 0) / tl.sum(cnt, 0))


def _pair(v, name: str) -> tuple[int, int]:
    t = tuple(v) if isinstance(v, (list, tuple)) else (v, v)
    if len(t) != 2 or not all(isinstance(k, int) for k in t):
        raise InvalidInput(name, v, "an int or a pair of ints")
    return int(t[0]), int(t[1])


def out_size(h: int, w: int, kernel, stride, padding, dilation) -> tuple[int, int]:
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (_pair(kernel, "kernel_size"), _pair(stride, "stride"),
                                              _pair(padding, "padding"), _pair(dilation, "dilation"))
    return (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1


def _x4(x: torch.Tensor, what: str) -> torch.Tensor:
    if x.dim() != 4 or x.dtype not in FLOATS:
        raise InvalidInput(f"{what} x", (tuple(x.shape), str(x.dtype)), "an fp32 / bf16 / fp16 [N, C, H, W] tensor")
    return x if x.is_contiguous() else x.contiguous()


def unfold2d(x: torch.Tensor, kernel_size, *, config: Mapping[str, int], dilation=1, padding=0, stride=1):
    x = _x4(x, "unfold")
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (_pair(kernel_size, "kernel_size"), _pair(stride, "stride"),
                                              _pair(padding, "padding"), _pair(dilation, "dilation"))
    oh, ow = out_size(h, w, kernel_size, stride, padding, dilation)
    rows, L = n * c * kh * kw, oh * ow
    y = torch.empty(n, c * kh * kw, L, device=x.device, dtype=x.dtype)
    if y.numel():
        bc, rp = int(config["BC"]), int(config["RP"])
        _unfold_kernel[(triton.cdiv(rows, rp), triton.cdiv(L, bc))](x, y, rows, L, c, h, w, ow, kh, kw, sh, sw, ph,
                                                                    pw, dh, dw, BC=bc, RP=rp,
                                                                    num_warps=int(config["W"]))
    return y


def max_pool2d(x: torch.Tensor, kernel_size, *, config: Mapping[str, int], stride=None, padding=0, dilation=1):
    x = _x4(x, "max_pool2d")
    n, c, h, w = x.shape
    stride = kernel_size if stride is None or stride == [] else stride
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (_pair(kernel_size, "kernel_size"), _pair(stride, "stride"),
                                              _pair(padding, "padding"), _pair(dilation, "dilation"))
    oh, ow = out_size(h, w, kernel_size, stride, padding, dilation)
    y = torch.empty(n, c, oh, ow, device=x.device, dtype=x.dtype)
    if y.numel() and int(config.get("GL", 0)):
        bc, rp = int(config["BC"]), int(config["RP"])
        rows = n * c * oh
        q = pool_row_taps((kh, kw), sw, dw)[0]
        swp = 1 << max(0, sw - 1).bit_length()
        _maxpool_rows_kernel[(triton.cdiv(rows, rp), triton.cdiv(ow, bc))](x, y, rows, oh, ow, h, w, kh, kw, sh, sw,
                                                                           ph, pw, dh, dw, Q=q, SWP=swp, BC=bc, RP=rp,
                                                                           num_warps=int(config["W"]))
    elif y.numel():
        bc, rp = int(config["BC"]), int(config["RP"])
        rows = n * c * oh
        _maxpool_kernel[(triton.cdiv(rows, rp), triton.cdiv(ow, bc))](x, y, rows, oh, ow, h, w, kh, kw, sh, sw, ph,
                                                                      pw, dh, dw, BC=bc, RP=rp,
                                                                      num_warps=int(config["W"]))
    return y


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, config: Mapping[str, int],
                  ignore_index: int = -100) -> torch.Tensor:
    """F.cross_entropy(logits, targets) (reduction 'mean', no weights, no smoothing): a 0-dim fp32 tensor."""
    if logits.dim() != 2 or logits.dtype != torch.float32 or targets.shape != logits.shape[:1] \
            or targets.dtype != torch.int64:
        raise InvalidInput("cross_entropy inputs", (tuple(logits.shape), tuple(targets.shape)),
                           "fp32 logits [N, C] and int64 targets [N]")
    x = logits if logits.stride(-1) == 1 and logits.stride(0) == logits.shape[1] else logits.contiguous()
    t = targets.contiguous()
    r, c = x.shape
    loss = torch.empty(2, r, device=x.device, dtype=torch.float32)
    rp = int(config["RP"])
    _xent_rows_kernel[(triton.cdiv(r, rp),)](x, t, loss[0], loss[1], r, c, int(ignore_index), BC=int(config["BC"]),
                                             RP=rp, num_warps=int(config["W"]))
    out = torch.empty((), device=x.device, dtype=torch.float32)
    _mean_kernel[(1,)](loss[0], loss[1], out, r, BLOCK=1024, num_warps=4)
    return out
