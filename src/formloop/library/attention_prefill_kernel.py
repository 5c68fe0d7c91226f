"""The Triton program family of attention-prefill: causal (or full) grouped-query attention over L
tokens, flash-attention style (the scores never leave the SM).

Decision → program: one program per (sequence, query head, block of Br query rows), launched
longest first (causal blocks near the end of the sequence read the most keys). GQ picks the launch
order: 1 = the G query heads of one key/value head run back to back (their K/V stay in the L2),
0 = all heads of one query block run together. Program (b, h, blk) with r0 = blk·Br walks the keys
of head h // G in tiles of Bc: phase 1 over [0, r0) unmasked (every key is before every row of the
block when Bc divides Br), phase 2 over [r0, min(L, r0 + Br)) masked at k <= q (the walk the proofs
name CausalWalk); without the causal mask one phase walks [0, L) masked at L. Each step is the
online-softmax update (SoftmaxArithmetic) with exp2 and log2(e)/√D folded into the scores.
S is num_stages, W num_warps. TM = 1 moves the q, K and V tiles with the copy engine (TMA tensor
descriptors over the [rows, D] view of each tensor; rows past a head's end belong to the next
head or are zero-filled, and the masks exclude them), TM = 0 uses pointer loads.

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
from formloop.library.attention_online import online_step
from formloop.library.attention_cases import TOLERANCE, TORCH_DTYPES, RowScaled, qkv, reference
from formloop.library.attention_launch import ThinLaunch, device_key, operand_key
from formloop.library.attention_workload import check_shape
from formloop.library.gemm_dot import store_cast

LOG2E = 1.4426950408889634
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@dataclass(frozen=True)
class PrefillConfig:
    """Br query rows and Bc keys per tile, S stages, W warps, GQ launch order, TM load path."""

    Br: int = 128
    Bc: int = 64
    S: int = 3
    W: int = 8
    GQ: int = 1
    TM: int = 1

    @classmethod
    def from_assignment(cls, assignment: Mapping[str, Real]) -> "PrefillConfig":
        return cls(**{k: int(v) for k, v in assignment.items() if k in cls.__dataclass_fields__})

    def __post_init__(self) -> None:
        for name in ("Br", "Bc", "W"):
            v = getattr(self, name)
            if v < (16 if name != "W" else 1) or v & (v - 1):
                raise InvalidInput(name, v, "a power of two" + (" >= 16" if name != "W" else ""))
        if self.Br % self.Bc:
            raise InvalidInput("Bc", self.Bc, f"a divisor of Br={self.Br} (the causal phases meet at a tile edge)")
        if self.S < 1:
            raise InvalidInput("S", self.S, "an integer >= 1")
        for name in ("GQ", "TM"):
            if getattr(self, name) not in (0, 1):
                raise InvalidInput(name, getattr(self, name), (0, 1))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@triton.jit
def _load_rows(src, ptr_off, row0, rows, d, mask, TM: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
    """A [BLOCK, D] tile: by descriptor at row row0 (TM), else by pointers with a row mask."""
    if TM:
        return src.load([row0, 0])
    else:
        return tl.load(src + ptr_off + rows[:, None] * D + d[None, :], mask=mask[:, None], other=0.0)


@triton.jit
def _attend(q, k_src, v_src, kv_off, kv_row0, m_i, l_i, acc, lo, hi, q_rows, L, qk_scale,
            CAUSAL_MASK: tl.constexpr, LENGTH_MASK: tl.constexpr,
            BC: tl.constexpr, D: tl.constexpr, TM: tl.constexpr, WIDEN: tl.constexpr):
    """Online-softmax steps over the key tiles starting at lo, lo+Bc, … < hi; scores in fp32 scaled
    by log2(e)/√D so that exp2 is the softmax's exponential."""
    cols = tl.arange(0, BC)
    d = tl.arange(0, D)
    for start in range(lo, hi, BC):
        keys = start + cols
        k = _load_rows(k_src, kv_off, kv_row0 + start, keys, d, keys < L, TM, D, BC)
        v = _load_rows(v_src, kv_off, kv_row0 + start, keys, d, keys < L, TM, D, BC)
        if WIDEN:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k))
        if CAUSAL_MASK:
            s = tl.where(keys[None, :] <= q_rows[:, None], s, float("-inf"))
        if LENGTH_MASK:
            s = tl.where((keys < L)[None, :], s, float("-inf"))
        m_i, l_i, acc = online_step(s, v, m_i, l_i, acc, qk_scale, WIDEN)
    return m_i, l_i, acc


@triton.jit(do_not_specialize=["L", "BH", "Hq", "Hkv"])
def _prefill_kernel(q_src, k_src, v_src, o_ptr, L, BH, Hq, Hkv, qk_scale,
                    G: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr,
                    GQ: tl.constexpr, TM: tl.constexpr, WIDEN: tl.constexpr):
    pid = tl.program_id(0)
    nb = tl.cdiv(L, BR)
    if GQ:  # heads of one KV group back to back, each head's blocks longest first
        bh = pid // nb
        blk = nb - 1 - pid % nb
    else:  # every head of the longest block first
        bh = pid % BH
        blk = nb - 1 - pid // BH
    b = bh // Hq
    h = bh % Hq
    a = h // G
    r0 = blk * BR
    rows = r0 + tl.arange(0, BR)
    d = tl.arange(0, D)
    q_off = bh.to(tl.int64) * L * D
    kv_off = (b * Hkv + a).to(tl.int64) * L * D
    q = _load_rows(q_src, q_off, bh * L + r0, rows, d, rows < L, TM, D, BR)
    if WIDEN:
        q = q.to(tl.float32)
    m_i = tl.full((BR,), float("-inf"), tl.float32)
    l_i = tl.zeros((BR,), tl.float32)
    acc = tl.zeros((BR, D), tl.float32)
    kv_row0 = (b * Hkv + a) * L
    if CAUSAL:
        m_i, l_i, acc = _attend(q, k_src, v_src, kv_off, kv_row0, m_i, l_i, acc, 0, r0, rows, L, qk_scale,
                                False, False, BC, D, TM, WIDEN)
        m_i, l_i, acc = _attend(q, k_src, v_src, kv_off, kv_row0, m_i, l_i, acc, r0, tl.minimum(L, r0 + BR), rows,
                                L, qk_scale, True, True, BC, D, TM, WIDEN)
    else:
        m_i, l_i, acc = _attend(q, k_src, v_src, kv_off, kv_row0, m_i, l_i, acc, 0, L, rows, L, qk_scale,
                                False, True, BC, D, TM, WIDEN)
    out = acc / l_i[:, None]
    tl.store(o_ptr + q_off + rows[:, None] * D + d[None, :], store_cast(out, o_ptr), mask=(rows < L)[:, None])


@dataclass(frozen=True)
class PrefillPlan:
    """One instance: a config bound to a shape and dtype (plan once, run many)."""

    config: PrefillConfig
    B: int
    Hq: int
    Hkv: int
    D: int
    L: int
    dtype: str = "bf16"
    causal: int = 1

    @classmethod
    def of(cls, config: PrefillConfig, wl: Mapping[str, int], dtype: str) -> "PrefillPlan":
        return cls(config, int(wl["B"]), int(wl["Hq"]), int(wl["Hkv"]), int(wl["D"]), int(wl["L"]), dtype,
                   int(wl.get("causal", 1)))

    def __post_init__(self) -> None:
        object.__setattr__(self, "_thin", {})  # device -> ThinLaunch (see run)
        check_shape({"B": self.B, "Hq": self.Hq, "Hkv": self.Hkv, "D": self.D, "L": self.L})
        if self.dtype not in TORCH_DTYPES:
            raise InvalidInput("dtype", self.dtype, sorted(TORCH_DTYPES))
        if self.causal not in (0, 1):
            raise InvalidInput("causal", self.causal, (0, 1))

    @property
    def grid(self) -> tuple[int]:
        return (self.B * self.Hq * -(-self.L // self.config.Br),)

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
        """out = attention(q, K, V): q and out [B, Hq, L, D], K and V [B, Hkv, L, D], all contiguous."""
        self._check(q, k, v, out)
        self._run(self.grid, [q, k, v], out)

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
        """`launch` through the plan's thin launcher for q's device (attention_launch): operands are
        validated and the kernel bound once per set of base pointers, shapes and strides."""
        device = q.device
        thin = self._thin.get(device)
        if thin is None:
            thin = self._thin.setdefault(device_key(device), ThinLaunch(device, INTERPRETED))
        key = operand_key(q, k, v, out)
        if thin.try_bound(key):
            return

        def calls():
            self._check(q, k, v, out)
            return [self._call(self.grid, [q, k, v], out)]

        thin.run(key, calls, lambda: self.launch(q, k, v, out))

    def thin_launcher(self, device) -> "ThinLaunch | None":
        return self._thin.get(device_key(device))

    def _check(self, q, k, v, out) -> None:
        want = {"q": (q, self.Hq), "k": (k, self.Hkv), "v": (v, self.Hkv), "out": (out, self.Hq)}
        for name, (x, heads) in want.items():
            if tuple(x.shape) != (self.B, heads, self.L, self.D) or not x.is_contiguous():
                raise InvalidInput(f"{name} tensor", tuple(x.shape),
                                   f"contiguous [{self.B}, {heads}, {self.L}, {self.D}]")

    def _call(self, grid, srcs, out, warmup: bool = False) -> tuple:
        """(jit function, grid, positional arguments, constexprs and options) of one launch."""
        cfg = self.config
        if cfg.TM:
            from triton.tools.tensor_descriptor import TensorDescriptor

            if warmup:  # descriptors carry only dtype and block shape into the compile key
                from triton.runtime.jit import MockTensor

                mock = MockTensor(srcs[0], [16, self.D])
                srcs = [TensorDescriptor(mock, [16, self.D], [self.D, 1], [block, self.D])
                        for block in (cfg.Br, cfg.Bc, cfg.Bc)]
            else:
                srcs = [TensorDescriptor.from_tensor(x.view(-1, self.D), [block, self.D])
                        for x, block in zip(srcs, (cfg.Br, cfg.Bc, cfg.Bc))]
        args = (*srcs, out, self.L, self.B * self.Hq, self.Hq, self.Hkv, LOG2E / math.sqrt(self.D))
        meta = dict(G=self.Hq // self.Hkv, BR=cfg.Br, BC=cfg.Bc, D=self.D, CAUSAL=bool(self.causal), GQ=bool(cfg.GQ),
                    TM=bool(cfg.TM), WIDEN=INTERPRETED and not warmup, num_warps=cfg.W, num_stages=cfg.S)
        return _prefill_kernel, grid, args, meta

    def _run(self, grid, srcs, out, warmup: bool = False) -> None:
        fn, grid, args, meta = self._call(grid, srcs, out, warmup)
        if warmup:
            fn.warmup(*args, grid=grid, **meta)
        else:
            fn[grid](*args, **meta)

    def warmup(self) -> None:
        """Compile without launching (fills Triton's cache; used by parallel pre-compilation)."""
        t = TORCH_DTYPES[self.dtype]
        self._run((1,), [t, t, t], t, warmup=True)


@dataclass
class PrefillCase:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor


class TritonPrefill(RowScaled):
    """The generated instance as the evaluator sees it (formloop.evaluate.Runnable); checked row by row
    (attention_cases.RowScaled)."""

    tier_source = "triton"

    def __init__(self, plan: PrefillPlan, kind: str = "random"):
        self.plan, self.kind = plan, kind
        self.name = f"triton prefill {plan.config.as_dict()}"
        self.tolerance = TOLERANCE[plan.dtype]

    def new_case(self, device, generator: torch.Generator) -> PrefillCase:
        p = self.plan
        q, k, v = qkv(p.B, p.Hq, p.Hkv, p.L, p.L, p.D, p.dtype, device, generator, self.kind)
        out = torch.full_like(q, float("nan"))
        return PrefillCase(q, k, v, out)

    def launch(self, case: PrefillCase) -> None:
        self.plan.run(case.q, case.k, case.v, case.out)

    def raw_output(self, case: PrefillCase) -> torch.Tensor:
        return case.out

    def raw_reference(self, case: PrefillCase) -> torch.Tensor:
        return reference(case.q, case.k, case.v, causal=bool(self.plan.causal), dtype=torch.float32)

    def poison(self, case: PrefillCase) -> None:
        case.out.fill_(float("nan"))

    @property
    def case_bytes(self) -> int:
        p = self.plan
        return 2 * (2 * p.B * p.Hq * p.L * p.D + 2 * p.B * p.Hkv * p.L * p.D)
