"""The Triton program family of attention-decode: split-KV grouped-query decode, one launch.

Decision → program: grid (B·Hkv·G/QP, KS). Program (b, a, g) runs query heads a·G + g·QP + r,
r < QP (the rows of its dots, padded to 16), over split j of the keys: tiles of Bn keys in
[lo, hi), lo = j·per·Bn, hi = min(L, lo + per·Bn), per = ⌈⌈L/Bn⌉/KS⌉ (the walk the proofs name
SplitWalk), masked at hi. Each tile step: scores = q·Kᵀ (tensor cores, fp32), scaled by
log2(e)/√D so exp2 is the exponential; the running max m, sum l and accumulator o follow the
online-softmax update the proofs name SoftmaxArithmetic. S is num_stages (loads S−1 tiles ahead),
W num_warps. A paged cache [pages, Hkv, page, D] is read through the block table:
key k of sequence b lives at slot table[b, k // page]·page + k % page. TM picks the load path:
1 = the copy engine moves whole [Bn, D] tiles (TMA descriptors over the [rows, D] view of the
cache; rows past a split's end belong to the next head or are zero-filled, and the mask excludes
them; a paged tile must lie inside one page), 0 = pointer loads with masks (cp.async).

KS = 1 normalizes and stores directly. KS > 1: every split stores its (m, l, o) partial (float32);
with MG = 1 it then counts itself in on its program's counter (one acquire-release atomic after a
block barrier) and the split that arrives last folds the KS partials (all loaded at once, folded in
closed form against the largest max, so the result does not depend on arrival order), stores the
output and resets the counter for the next launch; with MG = 0 a second kernel folds them. Both
folds are one jit function.

This module imports triton and torch; set TRITON_INTERPRET=1 before importing it to run the
kernels in Triton's interpreter on the CPU."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from numbers import Real

import torch
import triton
import triton.language as tl

from formloop.errors import InvalidInput
from formloop.library.attention_cases import (
    TOLERANCE, TORCH_DTYPES, RowScaled, check_block_table, paged, qkv, reference,
)
from formloop.library.attention_workload import check_page, check_shape

LOG2E = 1.4426950408889634
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # widen 16-bit dot operands (see gemm_tiling_kernel)


@dataclass(frozen=True)
class DecodeConfig:
    """Bn keys per tile, KS splits, QP heads per program, S stages, W warps, MG merge (1 in-launch),
    TM load path (1 copy engine, 0 pointers)."""

    Bn: int = 64
    KS: int = 1
    QP: int = 4
    S: int = 3
    W: int = 4
    MG: int = 1
    TM: int = 0

    @classmethod
    def from_assignment(cls, assignment: Mapping[str, Real]) -> "DecodeConfig":
        return cls(**{k: int(v) for k, v in assignment.items() if k in cls.__dataclass_fields__})

    def __post_init__(self) -> None:
        for name, lo in (("Bn", 16), ("KS", 1), ("QP", 1), ("S", 1), ("W", 1)):
            v = getattr(self, name)
            if v < lo:
                raise InvalidInput(name, v, f"an integer >= {lo}")
        for name in ("Bn", "QP", "W"):
            v = getattr(self, name)
            if v & (v - 1):
                raise InvalidInput(name, v, "a power of two")
        for name in ("MG", "TM"):
            if getattr(self, name) not in (0, 1):
                raise InvalidInput(name, getattr(self, name), (0, 1))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def kv_split(L: int, Bn: int, KS: int) -> list[tuple[int, int]]:
    """The [lo, hi) key range of each split, exactly as the kernel computes it."""
    per = -(-(-(-L // Bn)) // KS)
    return [(min(L, j * per * Bn), min(L, j * per * Bn + per * Bn)) for j in range(KS)]


@triton.jit
def _fold_partials(ws_ptr, o_ptr, row0, KS, out_base, s_oh, QP: tl.constexpr, KSP: tl.constexpr, D: tl.constexpr):
    """Fold the KS partials of rows row0..row0+QP and store each row's output at out_base + r·s_oh.
    Partial (m, l, o) of row r, split j lives at ((row0 + r)·KS + j)·(D + 2): o[0..D), m, l. All KS
    partials of a row are loaded at once (one L2 round trip, not KS dependent ones) and folded in
    closed form against the largest max M: O = Σ_j 2^(m_j − M)·o_j, L = Σ_j 2^(m_j − M)·l_j, out = O / L
    (the merge-step chain of softmax_merge applied with its final max; every m_j is finite because
    every split has a key, C4). The result does not depend on the order the splits arrived in. When
    QP·KSP ≤ 64 the QP rows' partials (contiguous records) are loaded together and folded as
    [QP, KSP, D]: one L2 round trip instead of QP."""
    d = tl.arange(0, D)
    if QP > 1 and QP * KSP <= 64:  # every row's partials in one load: one L2 round trip for the pack
        i = tl.arange(0, QP * KSP)
        jj = i % KSP
        ok = jj < KS
        base = ws_ptr + ((row0 + i // KSP) * KS + jj) * (D + 2)
        m = tl.reshape(tl.load(base + D, mask=ok, other=float("-inf"), cache_modifier=".cg"), (QP, KSP))
        lsum = tl.reshape(tl.load(base + D + 1, mask=ok, other=0.0, cache_modifier=".cg"), (QP, KSP))
        o = tl.reshape(tl.load(base[:, None] + d[None, :], mask=ok[:, None], other=0.0, cache_modifier=".cg"),
                       (QP, KSP, D))
        w = tl.exp2(m - tl.max(m, 1)[:, None])  # 0 on the padding past KS
        out = tl.sum(o * w[:, :, None], 1) / tl.sum(lsum * w, 1)[:, None]
        r = tl.arange(0, QP)
        tl.store(o_ptr + out_base + r[:, None] * s_oh + d[None, :], out.to(o_ptr.dtype.element_ty))
    else:
        j = tl.arange(0, KSP)
        ok = j < KS
        for r in tl.static_range(QP):
            base = ws_ptr + ((row0 + r) * KS + j) * (D + 2)
            m = tl.load(base + D, mask=ok, other=float("-inf"), cache_modifier=".cg")
            lsum = tl.load(base + D + 1, mask=ok, other=0.0, cache_modifier=".cg")
            o = tl.load(base[:, None] + d[None, :], mask=ok[:, None], other=0.0, cache_modifier=".cg")
            w = tl.exp2(m - tl.max(m, 0))  # 0 on the padding past KS
            out = tl.sum(o * w[:, None], 0) / tl.sum(lsum * w, 0)
            tl.store(o_ptr + out_base + r * s_oh + d, out.to(o_ptr.dtype.element_ty))


@triton.jit(do_not_specialize=["L", "per_split", "KS", "Hkv"])
def _decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, ws_ptr, cnt_ptr, table_ptr,
                   L, per_split, KS, Hkv, qk_scale,
                   s_qb, s_qh, s_ob, s_oh, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_tb,
                   G: tl.constexpr, QP: tl.constexpr, BH: tl.constexpr, BN: tl.constexpr, D: tl.constexpr,
                   PAGE: tl.constexpr, SPLIT: tl.constexpr, IN_LAUNCH: tl.constexpr, TM: tl.constexpr,
                   KSP: tl.constexpr, WIDEN: tl.constexpr):
    pid = tl.program_id(0)
    j = tl.program_id(1)
    g = pid % (G // QP)
    a = (pid // (G // QP)) % Hkv
    b = (pid // ((G // QP) * Hkv)).to(tl.int64)
    rows = tl.arange(0, BH)
    d = tl.arange(0, D)
    ok = rows < QP
    heads = a * G + g * QP + rows
    q = tl.load(q_ptr + b * s_qb + heads[:, None] * s_qh + d[None, :], mask=ok[:, None], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)
    lo = j * per_split * BN
    hi = tl.minimum(L, lo + per_split * BN)
    m_i = tl.full((BH,), float("-inf"), tl.float32)
    l_i = tl.zeros((BH,), tl.float32)
    acc = tl.zeros((BH, D), tl.float32)
    cols = tl.arange(0, BN)
    for start in range(lo, hi, BN):
        keys = start + cols
        in_split = keys < hi
        if TM:  # one copy-engine tile: rows of the [rows, D] view (a tile lies inside one page)
            if PAGE > 0:
                slot = tl.load(table_ptr + b * s_tb + start // PAGE)
                row = ((slot * Hkv + a) * PAGE + start % PAGE).to(tl.int32)
            else:
                row = ((b * Hkv + a) * L + start).to(tl.int32)
            k = k_ptr.load([row, 0])
            v = v_ptr.load([row, 0])
        else:
            if PAGE > 0:
                slot = tl.load(table_ptr + b * s_tb + keys // PAGE, mask=in_split, other=0)
                k_rows = slot.to(tl.int64) * s_kb + (keys % PAGE) * s_kn
                v_rows = slot.to(tl.int64) * s_vb + (keys % PAGE) * s_vn
            else:
                k_rows = b * s_kb + keys * s_kn
                v_rows = b * s_vb + keys * s_vn
            k = tl.load(k_ptr + a * s_kh + k_rows[:, None] + d[None, :], mask=in_split[:, None], other=0.0)
            v = tl.load(v_ptr + a * s_vh + v_rows[:, None] + d[None, :], mask=in_split[:, None], other=0.0)
        if WIDEN:
            k = k.to(tl.float32)
        s = tl.where(in_split[None, :], tl.dot(q, tl.trans(k)), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)  # scores scaled by log2(e)/√D: exp2 is the exp
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if WIDEN:
            acc = tl.dot(p, v.to(tl.float32), acc * alpha[:, None])
        else:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    if SPLIT:
        part = ws_ptr + ((b * Hkv * G + heads) * KS + j) * (D + 2)
        tl.store(part[:, None] + d[None, :], acc, mask=ok[:, None])
        tl.store(part + D, m_i, mask=ok)
        tl.store(part + D + 1, l_i, mask=ok)
        if IN_LAUNCH:
            tl.debug_barrier()
            if tl.atomic_add(cnt_ptr + pid, 1, sem="acq_rel", scope="gpu") == KS - 1:
                _fold_partials(ws_ptr, o_ptr, b * Hkv * G + a * G + g * QP, KS, b * s_ob + (a * G + g * QP) * s_oh,
                               s_oh, QP, KSP, D)
                tl.atomic_xchg(cnt_ptr + pid, 0, sem="relaxed", scope="gpu")
    else:
        out = acc / l_i[:, None]
        tl.store(o_ptr + b * s_ob + heads[:, None] * s_oh + d[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=ok[:, None])


@triton.jit(do_not_specialize=["KS", "Hkv"])
def _merge_kernel(o_ptr, ws_ptr, KS, Hkv, s_ob, s_oh,
                  G: tl.constexpr, QP: tl.constexpr, KSP: tl.constexpr, D: tl.constexpr):
    pid = tl.program_id(0)
    g = pid % (G // QP)
    a = (pid // (G // QP)) % Hkv
    b = (pid // ((G // QP) * Hkv)).to(tl.int64)
    _fold_partials(ws_ptr, o_ptr, b * Hkv * G + a * G + g * QP, KS, b * s_ob + (a * G + g * QP) * s_oh, s_oh,
                   QP, KSP, D)


@dataclass(frozen=True)
class DecodePlan:
    """One instance: a config bound to a shape, dtype and cache layout (plan once, run many)."""

    config: DecodeConfig
    B: int
    Hq: int
    Hkv: int
    D: int
    L: int
    dtype: str = "bf16"
    page: int = 0

    @classmethod
    def of(cls, config: DecodeConfig, wl: Mapping[str, int], dtype: str) -> "DecodePlan":
        return cls(config, int(wl["B"]), int(wl["Hq"]), int(wl["Hkv"]), int(wl["D"]), int(wl["L"]), dtype,
                   int(wl.get("page", 0)))

    def __post_init__(self) -> None:
        check_shape({"B": self.B, "Hq": self.Hq, "Hkv": self.Hkv, "D": self.D, "L": self.L})
        check_page(self.page)
        if self.dtype not in TORCH_DTYPES:
            raise InvalidInput("dtype", self.dtype, sorted(TORCH_DTYPES))
        if (self.Hq // self.Hkv) % self.config.QP:
            raise InvalidInput("QP", self.config.QP, f"a divisor of the GQA group Hq/Hkv={self.Hq // self.Hkv}")
        if self.config.TM and self.page % self.config.Bn:
            raise InvalidInput("page size", self.page, f"a multiple of Bn={self.config.Bn} on the TMA path (TM=1): a "
                                                       f"tile must lie inside one page", fix="use TM=0")
        ranges = kv_split(self.L, self.config.Bn, self.config.KS)
        if ranges[-1][0] >= self.L:
            raise InvalidInput("KS", self.config.KS, f"at most {self._max_splits()} splits at L={self.L}, "
                                                     f"Bn={self.config.Bn} (every split needs a tile)")

    def _max_splits(self) -> int:
        return max(ks for ks in range(1, -(-self.L // self.config.Bn) + 1)
                   if kv_split(self.L, self.config.Bn, ks)[-1][0] < self.L)

    @property
    def grid(self) -> tuple[int, int]:
        return self.B * self.Hkv * (self.Hq // self.Hkv) // self.config.QP, self.config.KS

    @property
    def pages_per_seq(self) -> int:
        return -(-self.L // self.page) if self.page else 0

    def new_workspace(self, device) -> torch.Tensor | None:
        """float32 partials (B·Hq·KS rows of D + 2) and the per-program counters (zeroed once; the
        kernel leaves them at zero), as one buffer."""
        if self.config.KS == 1:
            return None
        n = self.B * self.Hq * self.config.KS * (self.D + 2)
        ws = torch.empty(n + (-n) % 4 + self.grid[0], device=device, dtype=torch.float32)
        ws[n + (-n) % 4:].view(torch.int32).zero_()
        return ws

    def partials(self, ws: torch.Tensor) -> torch.Tensor:
        return ws[: self.B * self.Hq * self.config.KS * (self.D + 2)]

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
               workspace: torch.Tensor | None = None, table: torch.Tensor | None = None) -> None:
        """out[B, Hq, D] = attention of q[B, Hq, D] over K, V: [B, Hkv, L, D] (contiguous rows of D)
        or, paged, [pages, Hkv, page, D] with `table` [B, ⌈L/page⌉] naming each sequence's pages."""
        cfg, G = self.config, self.Hq // self.Hkv
        if tuple(q.shape) != (self.B, self.Hq, self.D) or tuple(out.shape) != (self.B, self.Hq, self.D):
            raise InvalidInput("q/out shape", (tuple(q.shape), tuple(out.shape)), f"[{self.B}, {self.Hq}, {self.D}]")
        for x in (q, k, v, out):
            if x.stride(-1) != 1:
                raise InvalidInput("layout", x.stride(), "unit stride along the head dimension")
        if self.config.TM and not (k.is_contiguous() and v.is_contiguous()):
            raise InvalidInput("K/V layout", (k.stride(), v.stride()), "contiguous caches on the TMA path (TM=1)")
        if self.page:
            if table is None:
                raise InvalidInput("block table", None, "a [B, ⌈L/page⌉] int32 tensor for a paged cache")
            if tuple(k.shape[1:]) != (self.Hkv, self.page, self.D) or k.shape != v.shape:
                raise InvalidInput("paged cache shape", tuple(k.shape), f"[pages, {self.Hkv}, {self.page}, {self.D}]")
            if not (k.is_cuda and torch.cuda.is_current_stream_capturing()):  # a graph replays a checked table
                check_block_table(table, k.shape[0], self.pages_per_seq)
            s_tb = table.stride(0)
        else:
            if tuple(k.shape) != (self.B, self.Hkv, self.L, self.D) or k.shape != v.shape:
                raise InvalidInput("K/V shape", tuple(k.shape), f"[{self.B}, {self.Hkv}, {self.L}, {self.D}]")
            table, s_tb = q, 0
        split = cfg.KS > 1
        if split:
            n = self.B * self.Hq * cfg.KS * (self.D + 2)
            if workspace is None or workspace.numel() != n + (-n) % 4 + self.grid[0]:
                raise InvalidInput("workspace", None if workspace is None else workspace.numel(),
                                   "the float32 buffer of DecodePlan.new_workspace")
            ws, cnt = workspace, workspace[n + (-n) % 4:].view(torch.int32)
        else:
            ws, cnt = out, out
        self._run(grid=self.grid, tensors=(q, k, v, out, ws, cnt, table),
                  strides=(q.stride(0), q.stride(1), out.stride(0), out.stride(1), k.stride(0), k.stride(1),
                           k.stride(2), v.stride(0), v.stride(1), v.stride(2), s_tb))

    def _run(self, grid, tensors, strides, warmup: bool = False) -> None:
        cfg, G = self.config, self.Hq // self.Hkv
        split = cfg.KS > 1
        per = -(-(-(-self.L // cfg.Bn)) // cfg.KS)
        meta = dict(G=G, QP=cfg.QP, BH=max(16, cfg.QP), BN=cfg.Bn, D=self.D, PAGE=self.page, SPLIT=split,
                    IN_LAUNCH=bool(cfg.MG), TM=bool(cfg.TM), KSP=triton.next_power_of_2(cfg.KS),
                    WIDEN=INTERPRETED and not warmup, num_warps=cfg.W,
                    num_stages=cfg.S)
        if cfg.TM:  # K and V as [rows, D] tensors for the copy engine; a descriptor's key is dtype and block
            from triton.tools.tensor_descriptor import TensorDescriptor

            if warmup:
                from triton.runtime.jit import MockTensor

                mock = MockTensor(tensors[1], [16, self.D])
                kv = [TensorDescriptor(mock, [16, self.D], [self.D, 1], [cfg.Bn, self.D])] * 2
            else:
                kv = [TensorDescriptor.from_tensor(x.view(-1, self.D), [cfg.Bn, self.D]) for x in tensors[1:3]]
            tensors = (tensors[0], *kv, *tensors[3:])
        args = (*tensors, self.L, per, cfg.KS, self.Hkv, LOG2E / math.sqrt(self.D), *strides)
        out, ws = tensors[3], tensors[4]
        merge_meta = dict(G=G, QP=cfg.QP, KSP=triton.next_power_of_2(cfg.KS), D=self.D, num_warps=4)
        if warmup:
            _decode_kernel.warmup(*args, grid=grid, **meta)
            if split and not cfg.MG:
                _merge_kernel.warmup(out, ws, cfg.KS, self.Hkv, strides[2], strides[3], grid=(grid[0],), **merge_meta)
            return
        _decode_kernel[grid](*args, **meta)
        if split and not cfg.MG:
            _merge_kernel[(grid[0],)](out, ws, cfg.KS, self.Hkv, strides[2], strides[3], **merge_meta)

    def warmup(self) -> None:
        """Compile without launching (fills Triton's cache; used by parallel pre-compilation). The
        arguments carry the strides of the layouts new cases use, so the compile keys match."""
        t = TORCH_DTYPES[self.dtype]
        H, D = self.Hq, self.D
        if self.page:
            kv = (self.Hkv * self.page * D, self.page * D, D)
        else:
            kv = (self.Hkv * self.L * D, self.L * D, D)
        split = self.config.KS > 1
        tensors = (t, t, t, t, torch.float32 if split else t, torch.int32 if split else t,
                   torch.int32 if self.page else t)
        self._run(grid=(1, 1), tensors=tensors, strides=(H * D, D, H * D, D, *kv, *kv, self.pages_per_seq if
                                                                                   self.page else 0), warmup=True)


@dataclass
class DecodeCase:
    """One set of operands: q, the KV cache (contiguous or paged with its table), a poisoned output."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor
    workspace: torch.Tensor | None = None
    table: torch.Tensor | None = None
    k_ref: torch.Tensor | None = None  # contiguous K, V for the reference when the cache is paged
    v_ref: torch.Tensor | None = None


class TritonDecode(RowScaled):
    """The generated instance as the evaluator sees it (formloop.evaluate.Runnable); checked row by row
    (attention_cases.RowScaled)."""

    tier_source = "triton"

    def __init__(self, plan: DecodePlan, kind: str = "random"):
        self.plan, self.kind = plan, kind
        self.name = f"triton decode {plan.config.as_dict()}"
        self.tolerance = TOLERANCE[plan.dtype]

    def new_case(self, device, generator: torch.Generator) -> DecodeCase:
        p = self.plan
        q, k, v = qkv(p.B, p.Hq, p.Hkv, 1, p.L, p.D, p.dtype, device, generator, self.kind)
        q = q[:, :, 0, :].contiguous()
        out = torch.full((p.B, p.Hq, p.D), float("nan"), device=device, dtype=TORCH_DTYPES[p.dtype])
        case = DecodeCase(q, k, v, out, p.new_workspace(device))
        if p.page:
            case.k_ref, case.v_ref = k, v
            case.k, case.v, case.table = paged(k, v, p.page, generator)
        return case

    def launch(self, case: DecodeCase) -> None:
        self.plan.launch(case.q, case.k, case.v, case.out, case.workspace, case.table)

    def raw_output(self, case: DecodeCase) -> torch.Tensor:
        return case.out

    def raw_reference(self, case: DecodeCase) -> torch.Tensor:
        k, v = (case.k_ref, case.v_ref) if case.table is not None else (case.k, case.v)
        return reference(case.q[:, :, None, :], k, v, dtype=torch.float64)[:, :, 0, :]

    def poison(self, case: DecodeCase) -> None:
        case.out.fill_(float("nan"))
        if case.workspace is not None:
            self.plan.partials(case.workspace).fill_(float("nan"))

    @property
    def case_bytes(self) -> int:
        p = self.plan
        e = torch.empty((), dtype=TORCH_DTYPES[p.dtype]).element_size()
        ws = 0 if p.config.KS == 1 else 4 * p.B * p.Hq * p.config.KS * (p.D + 2)
        return e * (2 * p.B * p.Hq * p.D + 2 * p.B * p.Hkv * p.L * p.D) + ws
