"""Inputs and the fp32 reference of the attention kernels (imports torch).

Input kinds (the acceptance suite of seed 000, Appendix B, run on every kernel):
  random         q, K, V normal(0, 1)
  zero           q = 0: every score is 0, the softmax is uniform, the output is the mean of V over
                 exactly the keys read (a key dropped or read twice shows)
  scaled         q·40: scores of several hundred, a softmax without the running max overflows
  tail-dominant  the last keys repeat the query (scaled): the row's max arrives in the last tile, so
                 a dropped tail or a missing rescale shows
The reference is softmax attention in float32 (or float64) from the same rounded inputs, grouped
query heads mapped to key/value head h // (Hq / Hkv), causal with top-left alignment."""
from __future__ import annotations

import math

import torch

from formloop.dtypes import ATTENTION_DTYPES, get_dtype, torch_dtype
from formloop.errors import InvalidInput

INPUT_KINDS = ("random", "zero", "scaled", "tail-dominant")
# Views of formloop.dtypes: storage, and ‖out − ref‖/‖ref‖ against the reference on the same inputs.
TORCH_DTYPES = {d: torch_dtype(d) for d in ATTENTION_DTYPES}
TOLERANCE = {d: get_dtype(d).attention_tolerance for d in ATTENTION_DTYPES}
SCALE_UP = 40.0
REF_ROWS = 1024  # query rows per block of the reference


def qkv(B: int, Hq: int, Hkv: int, Lq: int, L: int, D: int, dtype: str, device, generator: torch.Generator,
        kind: str = "random") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [B, Hq, Lq, D], K and V [B, Hkv, L, D] of input `kind`, rounded to `dtype`."""
    if kind not in INPUT_KINDS:
        raise InvalidInput("input kind", kind, INPUT_KINDS)
    t = TORCH_DTYPES[dtype]
    randn = lambda *shape: torch.randn(shape, device=device, dtype=torch.float32, generator=generator)  # noqa: E731
    q, k, v = randn(B, Hq, Lq, D), randn(B, Hkv, L, D), randn(B, Hkv, L, D)
    if kind == "zero":
        q.zero_()
    elif kind == "scaled":
        q.mul_(SCALE_UP)
    elif kind == "tail-dominant":
        tail = max(1, min(3, L // 4))
        group = Hq // Hkv
        for h in range(Hkv):  # the tail keys of head h point along the first query of its group
            k[:, h, L - tail:, :] = q[:, h * group, -1:, :].expand(-1, tail, -1)
        q.mul_(4.0)
    return q.to(t), k.to(t), v.to(t)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              dtype: torch.dtype = torch.float32, rows: int = REF_ROWS) -> torch.Tensor:
    """softmax(q·Kᵀ/√D)·V per head, K/V head h // G for query head h; causal: query i (counted from
    the first of the Lq queries, top-left) sees keys 0..i. Computed `rows` queries at a time (a
    causal block of queries [a, b) reads keys [0, b)), so the score block stays small at L = 8192."""
    B, Hq, Lq, D = q.shape
    Hkv, L = k.shape[1], k.shape[2]
    G = Hq // Hkv
    kx = k.to(dtype).repeat_interleave(G, dim=1)
    vx = v.to(dtype).repeat_interleave(G, dim=1)
    out = torch.empty(B, Hq, Lq, D, dtype=dtype, device=q.device)
    for a in range(0, Lq, rows):
        b = min(Lq, a + rows)
        keys = min(L, b) if causal else L
        s = torch.einsum("bhqd,bhkd->bhqk", q[:, :, a:b].to(dtype), kx[:, :, :keys]) / math.sqrt(D)
        if causal:
            keep = torch.arange(keys, device=q.device)[None, :] <= torch.arange(a, b, device=q.device)[:, None]
            s = s.masked_fill(~keep, float("-inf"))
        out[:, :, a:b] = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, dim=-1), vx[:, :, :keys])
    return out


class RowScaled:
    """output() and reference() of an attention runnable, each query row divided by the RMS of its
    reference row (formloop.evaluate.gpu.check then bounds the error of every row against that row's
    own scale). A causal output's rows differ in scale by √L (row 0 copies one value row, row i
    averages i + 1 of them), so one RMS over the whole output lets the rounding of the large early
    rows of a correct bf16 kernel pass the worst-element bound (10 × tolerance × RMS) only at short
    L: at L = 4096 a flash kernel rounding P to bf16 reaches 0.11 × RMS. Per row the bound is the
    same at every L. Subclasses provide raw_output(case) and raw_reference(case)."""

    def raw_output(self, case) -> torch.Tensor:
        raise NotImplementedError

    def raw_reference(self, case) -> torch.Tensor:
        raise NotImplementedError

    def _scaled_reference(self, case) -> tuple[torch.Tensor, torch.Tensor]:
        got = getattr(case, "row_scaled_reference", None)
        if got is None:  # the reference of one case's inputs, computed once
            ref = self.raw_reference(case)
            scale = ref.pow(2).mean(dim=-1, keepdim=True).sqrt().clamp_min(torch.finfo(ref.dtype).tiny)
            got = (ref / scale, scale)
            case.row_scaled_reference = got
        return got

    def reference(self, case) -> torch.Tensor:
        return self._scaled_reference(case)[0]

    def output(self, case) -> torch.Tensor:
        scale = self._scaled_reference(case)[1]
        return self.raw_output(case).to(scale.dtype) / scale


def paged(k: torch.Tensor, v: torch.Tensor, page: int, generator: torch.Generator, spare: int = 1):
    """The contiguous K, V [B, Hkv, L, D] stored in a paged cache [pages, Hkv, page, D] under a random
    block table [B, ⌈L/page⌉] (pages shuffled, `spare` unused pages): (k_cache, v_cache, table)."""
    B, Hkv, L, D = k.shape
    per_seq = -(-L // page)
    pages = B * per_seq + spare
    order = torch.randperm(pages, generator=torch.Generator().manual_seed(int(torch.randint(
        0, 2**31 - 1, (1,), generator=generator, device=generator.device).item())))[: B * per_seq]
    table = order.view(B, per_seq).to(torch.int32).to(k.device)
    caches = []
    for x in (k, v):
        cache = torch.zeros(pages, Hkv, page, D, dtype=x.dtype, device=x.device)
        padded = torch.zeros(B, Hkv, per_seq * page, D, dtype=x.dtype, device=x.device)
        padded[:, :, :L] = x
        blocks = padded.view(B, Hkv, per_seq, page, D).permute(0, 2, 1, 3, 4)  # [B, per_seq, Hkv, page, D]
        cache[table.long().view(-1)] = blocks.reshape(B * per_seq, Hkv, page, D)
        caches.append(cache)
    return caches[0], caches[1], table


def check_block_table(table: torch.Tensor, pages: int, needed: int) -> None:
    """A block table must name, for each sequence, `needed` pages of a cache of `pages` pages."""
    if table.dim() != 2 or table.shape[1] < needed:
        raise InvalidInput("block table shape", tuple(table.shape), f"[B, >= {needed}] (one entry per page of L)")
    if table.dtype not in (torch.int32, torch.int64):
        raise InvalidInput("block table dtype", table.dtype, ("int32", "int64"))
    used = table[:, :needed]
    lo, hi = int(used.min().item()), int(used.max().item())
    if lo < 0 or hi >= pages:
        bad = lo if lo < 0 else hi
        raise InvalidInput("block table entry", bad, f"a page of the cache, 0..{pages - 1}",
                           fix="the block table points outside the KV cache")
