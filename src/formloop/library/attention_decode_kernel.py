"""The Triton program family of attention-decode: split-KV grouped-query decode, one launch.

Decision → program: grid (B·Hkv·G/QP, KS). Program (b, a, g) runs query heads a·G + g·QP + r,
r < QP (the rows of its dots, padded to 16), over split j of the keys: tiles of Bn keys in
[lo, hi), lo = j·per·Bn, hi = min(L, lo + per·Bn), per = ⌈⌈L/Bn⌉/KS⌉ (the walk the proofs name
SplitWalk), masked at hi; trailing splits with lo >= L are empty and store a neutral partial.
Each tile step: scores = q·Kᵀ (tensor cores, fp32), scaled by log2(e)/√D so exp2 is the exponential;
the running max m, sum l and accumulator o follow the online-softmax update the proofs name
SoftmaxArithmetic. S is num_stages (loads S−1 tiles ahead),
W num_warps. A paged cache [pages, Hkv, page, D] is read through the block table:
key k of sequence b lives at slot table[b, k // page]·page + k % page. TM picks the load path:
1 = the copy engine moves whole [Bn, D] tiles (TMA descriptors over the [rows, D] view of the
cache; rows past a split's end belong to the next head or are zero-filled, and the mask excludes
them; a paged tile must lie inside one page), 0 = pointer loads with masks (cp.async).

KS = 1 normalizes and stores directly. KS > 1: every split stores its (m, l, o) partial (float32);
with MG = 1 it then counts itself in on its program's counter (one acquire-release atomic after a
block barrier) and the split that arrives last folds the KS partials (all loaded at once, folded in
closed form against the largest max, so the result does not depend on arrival order), stores the
output and resets the counter for the next launch; with MG = 0 a second kernel folds them, and with
MG = 2 that second kernel is a programmatic dependent launch (scheduled while the splits run, waiting
on griddepcontrol before it reads a partial: attention_decode_jit). All folds are one jit function.

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
from triton.tools.tensor_descriptor import TensorDescriptor

from formloop.errors import InvalidInput
from formloop.library.attention_cases import (
    TOLERANCE, TORCH_DTYPES, RowScaled, check_block_table, paged, qkv, reference,
)
from formloop.library.attention_decode_jit import _decode_kernel, _merge_kernel
from formloop.library.attention_decode_newtoken import N_TENSORS, NewToken, absent_args
from formloop.library.attention_launch import ThinLaunch, constexprs, device_key, operand_key
from formloop.library.attention_workload import check_page, check_shape

LOG2E = 1.4426950408889634
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # widen 16-bit dot operands (see gemm_tiling_kernel)


@dataclass(frozen=True)
class DecodeConfig:
    """Bn keys per tile, KS splits, QP heads per program, S stages, W warps, MG merge (1 in-launch, 0 second
    kernel, 2 second kernel launched dependent),
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
        if self.MG not in (0, 1, 2):
            raise InvalidInput("MG", self.MG, (0, 1, 2))
        if self.TM not in (0, 1):
            raise InvalidInput("TM", self.TM, (0, 1))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def kv_split(L: int, Bn: int, KS: int) -> list[tuple[int, int]]:
    """The [lo, hi) key range of each split, exactly as the kernel computes it."""
    per = -(-(-(-L // Bn)) // KS)
    return [(min(L, j * per * Bn), min(L, j * per * Bn + per * Bn)) for j in range(KS)]


def splits_fit(L: int, Bn: int, KS: int) -> bool:
    """The template's C4: at least half of the KS splits get a tile (the rest, trailing, are empty: their partial
    (max −inf, sum 0, accumulator 0) leaves the merge unchanged)."""
    return 2 * sum(lo < hi for lo, hi in kv_split(L, Bn, KS)) >= KS


def _spec_key(tensors, strides) -> tuple:
    """What Triton specializes a launch on, beyond the plan: each tensor's device, dtype and 16-byte
    alignment, the stride values (ints specialize on 1 and divisibility by 16) and the cache's shape
    (the copy engine's descriptor). Equal keys launch the same compiled kernel."""
    return (tensors[0].device, tuple(strides), tuple(tensors[1].shape),
            tuple((t.dtype, t.data_ptr() % 16) for t in tensors))


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
    # launched as a programmatic dependent of the kernel before it (a chain's, formloop.library.pdl): the split
    # kernel waits for it before reading q and the cache, and the merge kernel (MG 0, 2) lets the next be scheduled
    chain_pdl: bool = False
    # RoPE inside (the Qwen3 layer's RA): q raw, the new token's k and v raw (NewToken), written into the cache at L - 1
    rope: bool = False
    rope_eps: float = 1e-6
    maxnreg: int | None = None  # registers per thread cap (Triton's maxnreg): an emulated chip's register wall

    @classmethod
    def of(cls, config: DecodeConfig, wl: Mapping[str, int], dtype: str) -> "DecodePlan":
        return cls(config, int(wl["B"]), int(wl["Hq"]), int(wl["Hkv"]), int(wl["D"]), int(wl["L"]), dtype,
                   int(wl.get("page", 0)))

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", {})  # specialization key -> compiled kernels (see _run)
        object.__setattr__(self, "_thin", {})  # device -> ThinLaunch (see run)
        check_shape({"B": self.B, "Hq": self.Hq, "Hkv": self.Hkv, "D": self.D, "L": self.L})
        check_page(self.page)
        if self.maxnreg is not None and not 24 <= self.maxnreg <= 255:
            raise InvalidInput("maxnreg", self.maxnreg, "None or 24..255 registers per thread")
        if self.dtype not in TORCH_DTYPES:
            raise InvalidInput("dtype", self.dtype, sorted(TORCH_DTYPES))
        if (self.Hq // self.Hkv) % self.config.QP:
            raise InvalidInput("QP", self.config.QP, f"a divisor of the GQA group Hq/Hkv={self.Hq // self.Hkv}")
        if self.config.TM and self.page % self.config.Bn:
            raise InvalidInput("page size", self.page, f"a multiple of Bn={self.config.Bn} on the TMA path (TM=1): a "
                                                       f"tile must lie inside one page", fix="use TM=0")
        if not splits_fit(self.L, self.config.Bn, self.config.KS):
            fits = [ks for ks in range(1, 2 * -(-self.L // self.config.Bn) + 1)
                    if splits_fit(self.L, self.config.Bn, ks)]
            raise InvalidInput("KS", self.config.KS, f"a split count of which at least half get a tile at "
                                                     f"L={self.L}, Bn={self.config.Bn}: at most {max(fits)}")

    @property
    def head3(self) -> bool:
        """RoPE inside, contiguous cache, copy engine: descriptors [B·Hkv, L − 1, D] (attention_decode_jit)."""
        return bool(self.rope and self.config.TM and not self.page)

    @property
    def grid(self) -> tuple[int, int]:
        return self.B * self.Hkv * (self.Hq // self.Hkv) // self.config.QP, self.config.KS

    @property
    def pages_per_seq(self) -> int:
        return -(-self.L // self.page) if self.page else 0

    def new_workspace(self, device) -> torch.Tensor | None:
        """float32 partials (B·Hq·KS records of D + 4: o, m, l and 2 of padding, so records start on
        16 bytes and move in vector loads) and the per-program counters (zeroed once; the kernel
        leaves them at zero), as one buffer."""
        if self.config.KS == 1:
            return None
        n = self.B * self.Hq * self.config.KS * (self.D + 4)
        ws = torch.empty(n + (-n) % 4 + self.grid[0], device=device, dtype=torch.float32)
        ws[n + (-n) % 4:].view(torch.int32).zero_()
        return ws

    def partials(self, ws: torch.Tensor) -> torch.Tensor:
        return ws[: self.B * self.Hq * self.config.KS * (self.D + 4)]

    def launch(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
               workspace: torch.Tensor | None = None, table: torch.Tensor | None = None,
               new: NewToken | None = None) -> None:
        """out[B, Hq, D] = attention of q[B, Hq, D] over K, V: [B, Hkv, L, D] (contiguous rows of D)
        or, paged, [pages, Hkv, page, D] with `table` [B, ⌈L/page⌉] naming each sequence's pages.
        With `rope`: q raw, and `new` the new token (attention_decode_newtoken), written at L − 1."""
        self._run(self.grid, *self._operands(q, k, v, out, workspace, table, new))

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
            workspace: torch.Tensor | None = None, table: torch.Tensor | None = None,
            new: NewToken | None = None) -> None:
        """`launch` through the plan's thin launcher for q's device (attention_launch): operands are
        validated and the kernels bound once per set of base pointers, shapes and strides."""
        device = q.device
        thin = self._thin.get(device)
        if thin is None:
            thin = self._thin.setdefault(device_key(device), ThinLaunch(device, INTERPRETED))
        if table is not None and self.page and not (k.is_cuda and torch.cuda.is_current_stream_capturing()):
            check_block_table(table, k.shape[0], self.pages_per_seq)  # contents can change under one pointer
        key = operand_key(q, k, v, out, workspace, table, *(new.tensors() if new is not None else ()))
        if thin.try_bound(key):
            return

        def calls():
            return self._calls(self.grid, *self._operands(q, k, v, out, workspace, table, new))

        thin.run(key, calls, lambda: self.launch(q, k, v, out, workspace, table, new))

    def thin_launcher(self, device) -> "ThinLaunch | None":
        return self._thin.get(device_key(device))

    def _operands(self, q, k, v, out, workspace, table, new=None):
        """Validated (tensors, strides, new-token arguments) of one launch."""
        cfg = self.config
        if self.rope != (new is not None):
            raise InvalidInput("new token", None if new is None else "given",
                               "a NewToken exactly when the plan has RoPE inside (rope=True)")
        if new is not None:
            new.check(self.B, self.Hkv, self.D, self.L, q.dtype)
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
        if cfg.KS > 1:
            n = self.B * self.Hq * cfg.KS * (self.D + 4)
            if workspace is None or workspace.numel() != n + (-n) % 4 + self.grid[0]:
                raise InvalidInput("workspace", None if workspace is None else workspace.numel(),
                                   "the float32 buffer of DecodePlan.new_workspace")
            ws, cnt = workspace, workspace[n + (-n) % 4:].view(torch.int32)
        else:
            ws, cnt = out, out
        strides = (q.stride(0), q.stride(1), out.stride(0), out.stride(1), k.stride(0), k.stride(1), k.stride(2),
                   v.stride(0), v.stride(1), v.stride(2), s_tb)
        return (q, k, v, out, ws, cnt, table), strides, new.args(k, v) if new is not None else absent_args(q)

    def _calls(self, grid, tensors, strides, new_args, warmup: bool = False) -> list:
        """The kernels of one launch as (jit function, grid, positional arguments, constexprs and
        options): the split kernel and, for a second-kernel merge, the merge kernel."""
        cfg, G = self.config, self.Hq // self.Hkv
        split = cfg.KS > 1
        pdl = split and cfg.MG == 2 and not INTERPRETED  # the interpreter has no grid dependency control
        per = -(-(-(-self.L // cfg.Bn)) // cfg.KS)
        cap = {"maxnreg": self.maxnreg} if self.maxnreg is not None else {}  # an emulated chip's register wall
        meta = dict(G=G, QP=cfg.QP, BH=max(16, cfg.QP), BN=cfg.Bn, D=self.D, PAGE=self.page, SPLIT=split,
                    IN_LAUNCH=cfg.MG == 1, TM=bool(cfg.TM), KSP=triton.next_power_of_2(cfg.KS),
                    WIDEN=INTERPRETED and not warmup, PDL=pdl, WAIT=self.chain_pdl, num_warps=cfg.W,
                    num_stages=cfg.S, ROPE=self.rope, HEAD3=self.head3,
                    **({"launch_pdl": True} if self.chain_pdl else {}), **cap)
        if cfg.TM:  # K and V as [rows, D] tensors for the copy engine (HEAD3: [B·Hkv, L − 1, D]); a descriptor's
            # key is dtype, rank and block
            if warmup:
                from triton.runtime.jit import MockTensor

                if self.head3:
                    mock = MockTensor(tensors[1], [16, 16, self.D])
                    kv = [TensorDescriptor(mock, [16, 16, self.D], [16 * self.D, self.D, 1], [1, cfg.Bn, self.D])] * 2
                else:
                    mock = MockTensor(tensors[1], [16, self.D])
                    kv = [TensorDescriptor(mock, [16, self.D], [self.D, 1], [cfg.Bn, self.D])] * 2
            elif self.head3:  # the cache's first L − 1 keys of each head: the copy engine zero-fills past them
                heads, cached = self.B * self.Hkv, max(1, self.L - 1)
                kv = [TensorDescriptor(x, [heads, cached, self.D], [self.L * self.D, self.D, 1], [1, cfg.Bn, self.D])
                      for x in tensors[1:3]]
            else:
                kv = [TensorDescriptor.from_tensor(x.view(-1, self.D), [cfg.Bn, self.D]) for x in tensors[1:3]]
            tensors = (tensors[0], *kv, *tensors[3:])
        args = (*tensors, self.L, per, cfg.KS, self.Hkv, LOG2E / math.sqrt(self.D), *strides, *new_args, self.rope_eps)
        out = [(_decode_kernel, tuple(grid), args, meta)]
        if split and cfg.MG != 1:
            merge_args = (tensors[3], tensors[4], cfg.KS, self.Hkv, strides[2], strides[3])
            chain = self.chain_pdl
            merge_meta = dict(G=G, QP=cfg.QP, KSP=triton.next_power_of_2(cfg.KS), D=self.D, PDL=pdl or chain,
                              TRIGGER=chain, num_warps=4, **({"launch_pdl": True} if pdl or chain else {}), **cap)
            out.append((_merge_kernel, (grid[0],), merge_args, merge_meta))
        return out

    def _run(self, grid, tensors, strides, new_args, warmup: bool = False) -> None:
        """Launch (or, warmup, compile). The first launch of a specialization goes through Triton's
        jit dispatch; later ones replay its compiled kernels with the same argument list (fast_launch)."""
        calls = self._calls(grid, tensors, strides, new_args, warmup)
        if warmup:
            for fn, g, args, meta in calls:
                fn.warmup(*args, grid=g, **meta)
            return
        key = None if INTERPRETED else _spec_key((*tensors, *new_args[:N_TENSORS]), strides + new_args[N_TENSORS:])
        compiled = self._compiled.get(key) if key is not None else None
        if compiled is not None:
            for kernel, (fn, g, args, meta) in zip(compiled, calls):
                kernel[(*g, 1, 1)[:3]](*args, *constexprs(fn, args, meta))
            return
        kernels = [fn[g](*args, **meta) for fn, g, args, meta in calls]
        if key is not None and kernels[0] is not None and len(self._compiled) < 64:
            self._compiled[key] = tuple(kernels)

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
        # RoPE inside: the new k, v (bf16 rows of a QKV output), the norms' weights, the fp32 tables, the caches
        new_args = ((t, t, t, t, torch.float32, torch.float32, t, t, (H + 2 * self.Hkv) * D, D, D // 2) if self.rope
                    else (t,) * N_TENSORS + (0, 0, 0))
        self._run(grid=(1, 1), tensors=tensors, strides=(H * D, D, H * D, D, *kv, *kv, self.pages_per_seq if
                                                         self.page else 0), new_args=new_args, warmup=True)


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
        self.plan.run(case.q, case.k, case.v, case.out, case.workspace, case.table)

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
        ws = 0 if p.config.KS == 1 else 4 * p.B * p.Hq * p.config.KS * (p.D + 4)
        return e * (2 * p.B * p.Hq * p.D + 2 * p.B * p.Hkv * p.L * p.D) + ws
