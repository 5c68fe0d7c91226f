"""Causal grouped-query prefill attention on a Hopper chip ("attention-prefill"): flash-attention
tiles, causal phases, TMA or pointer loads.

Prefill of a long prompt is compute-bound and wants big tiles (seed 000, §2.2). A program holds Br
query rows of one head and walks the keys of its key/value head in tiles of Bc; causal blocks walk
the keys before the block unmasked and the diagonal band masked (k <= q), so the work is the
causal count of query-key pairs (formloop.sol.ops.causal_pairs) rounded up to whole tiles.

Decisions:
  Br  query rows per program (BLOCK_M)       Bc  keys per tile (BLOCK_N); Bc must divide Br
  S   pipeline stages (num_stages)            W   warps per program (num_warps)
  GQ  launch order: 1 = the G query heads of one key/value head back to back (K/V reuse in L2),
      0 = every head of the longest query block first (causal load balance)
  TM  load path: 1 = copy engine (TMA descriptors), 0 = pointer loads
Walls: C1 shared memory (Br + S·2·Bc)·D·e + 1 KiB ≤ Ms (Triton 3.6 sm_90 compile reports);
C2 fp32 accumulator and score rows Br·(D + Bc) ≤ regs·32·W; C3 Bc ≤ Br (with power-of-two menus:
Bc | Br, the precondition of the causal walk).

Cost (µs): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp).
T_comp: every SM's share of the tile steps of all heads, a step costing max(tensor time, L2→SM
feed, (tensor + softmax + fixed cost) / programs resident on the SM, load latency / (S−1)), plus
the causal mask on diagonal steps and load issue on the pointer path; no less than the longest
program alone; the group-major order leaves a tail of gamma × the longest program when there is
more than one wave.
T_mem: q, O and the K/V (re-read when the block-major order streams every head at once and the K/V
overflow half the L2) at bw·eta_bw."""
from __future__ import annotations

from collections.abc import Mapping

from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param, where
from formloop.hw.chips import Chip
from formloop.library import attention_program, register_template
from formloop.library.attention_decode import REGS
from formloop.library.attention_workload import DTYPE_BYTES, HEAD_DIMS
from formloop.library.attention_workload import workload as _workload
from formloop.library.gemm_tiling_gpu import CONTRACT_CHIPS, proof_chip
from formloop.template import Constraint, Template, with_calibration

NAME = "attention-prefill"
US = 1e6

Br = decision("Br", (128, 64), doc="query rows per program (BLOCK_M)")
Bc = decision("Bc", (64, 128, 32), doc="keys per tile (BLOCK_N)")
S = decision("S", (3, 2, 4, 1), doc="pipeline stages (num_stages)")
W = decision("W", (8, 4), doc="warps per program (num_warps)")
GQ = decision("GQ", (0, 1), doc="launch order: 1 = query heads of one KV head back to back, 0 = longest block first")
TM = decision("TM", (1, 0), doc="load path: 1 = TMA descriptors, 0 = pointer loads")

B = param("B", doc="batch (sequences)")
Hq = param("Hq", doc="query heads")
Hkv = param("Hkv", doc="key/value heads")
D = param("D", doc="head dimension")
L = param("L", doc="tokens (queries = keys)")
e = param("e", doc="bytes per element")
causal = param("causal", lower=0, doc="1: query i sees keys 0..i; 0: every key")
Ms = param("Ms", kind="chip", doc="shared memory a program may use, bytes")
Ms_sm = param("Ms_sm", kind="chip", doc="shared memory per SM, bytes")
warps_sm = param("warps_sm", kind="chip", doc="resident warps per SM")
regs = param("regs", kind="chip", doc="fp32 registers per thread for the accumulator and score rows")
n_sm = param("n_sm", kind="chip", doc="streaming multiprocessors")
bw = param("bw", kind="chip", integer=False, lower=None, doc="DRAM bandwidth (measured copy), bytes/s")
flops = param("flops", kind="chip", integer=False, lower=None, doc="tensor rate for the data type, FLOP/s")
l2 = param("l2", kind="chip", doc="L2 cache, bytes")


def _eff(name: str, doc: str):
    return param(name, kind="chip", integer=False, lower=0, doc=doc)


eta_mma = _eff("eta_mma", "achieved fraction of the tensor rate, 128-row tiles or 4 warps")
eta_small = _eff("eta_small", "achieved fraction of the tensor rate, 64-row tiles over 8 warps (half-width)")
bw_sm = _eff("bw_sm", "bytes/s one SM pulls from the L2 into shared memory")
t_soft = _eff("t_soft", "softmax cost per score element a thread holds, s")
t_iter = _eff("t_iter", "fixed cost of one tile step, s")
t_mask = _eff("t_mask", "extra cost of a masked (diagonal) tile step, s")
lat = _eff("lat", "latency of a K/V tile load from the L2 that the pipeline must cover, s")
t_issue = _eff("t_issue", "cost of issuing one 16-byte load per thread (pointer path), s")
t_prog = _eff("t_prog", "fixed cost of one program (q load, epilogue), s")
gamma = _eff("gamma", "tail of the group-major order, in longest programs")
eta_bw = _eff("eta_bw", "achieved fraction of the copy bandwidth")
alpha = _eff("alpha", "fraction of the shorter of T_mem, T_comp that is not hidden")
t_launch = _eff("t_launch", "cost of one kernel launch inside a CUDA graph, s")

CALIBRATED = ("eta_mma", "eta_small", "bw_sm", "t_soft", "t_iter", "t_mask", "lat", "t_issue", "t_prog", "gamma",
              "eta_bw", "alpha", "t_launch")
# Fitted on the h200 DATASHEET chip (the chip every solve reads) to the H200 run of 2026-12-03 (round 13 call 5:
# 51 prefill points at L = 512…8192, L = 3000 held out; rms log error 0.224 -> 0.083): `benchmarks/
# attention_priors_fit.py --prefill RUN/attention.json` (RESULTS.md round 14). The earlier priors, fitted against
# that run's measured ceilings, picked 128 x 128 tiles at 1024-4096 keys, 3-16 % slower than 64 x 64.
PRIORS = {"eta_mma": 0.576, "eta_small": 0.5, "bw_sm": 150e9, "t_soft": 2.72e-9, "t_iter": 50e-9, "t_mask": 1.12e-6,
          "lat": 0.525e-6, "t_issue": 31.1e-9, "t_prog": 1.11e-6, "gamma": 0.416, "eta_bw": 1.02, "alpha": 4.9e-8,
          "t_launch": 5.55e-6}
BOUNDS = {"eta_mma": (0.05, 1.05), "eta_small": (0.05, 1.05), "eta_bw": (0.3, 1.02), "alpha": (0.0, 1.0),
          "gamma": (0.0, 1.0)}

ratio = floordiv(Br, Bc)
nb = ceildiv(L, Br)
heads = B * Hq
programs = heads * nb
steps_plain = where(causal > 0, ratio * nb * (nb - 1) / 2, nb * ceildiv(L, Bc))
steps_diag = where(causal > 0, ratio * nb, 0)
smem_bytes = (Br + S * 2 * Bc) * D * e + 1024
regs_thread = minimum(255, 40 + Br * (D + Bc) / (32 * W))
occupancy = maximum(1, minimum(floordiv(Ms_sm, smem_bytes), floordiv(warps_sm, W),
                               floordiv(65536, regs_thread * 32 * W)))
t_mma = 4 * Br * Bc * D / (flops * where(W.eq(8) & (Br < 128), eta_small, eta_mma) / n_sm)
t_feed = 2 * Bc * D * e / bw_sm
t_own = t_mma + t_soft * Br * Bc / (32 * W) + t_iter + where(TM.eq(0), 2 * Bc * D * e / (16 * 32 * W) * t_issue, 0)
# Without a pipeline (S = 1) every step waits for its tiles; S stages cover the latency over S−1 steps.
t_own = t_own + where(S.eq(1), lat, 0)
t_sm_step = maximum(t_mma, t_feed, t_own / occupancy, lat / maximum(S - 1, 1))
T_work = heads * (steps_plain * t_sm_step + steps_diag * (t_sm_step + t_mask) + nb * t_prog / occupancy) / n_sm
t_longest = where(causal > 0, ratio * nb, nb * ceildiv(L, Bc)) * t_own + t_prog
T_comp = (maximum(T_work, t_longest) + where(GQ.eq(1) & (programs > n_sm * occupancy), gamma * t_longest, 0)) * US
kv_bytes = 2 * B * Hkv * L * D * e
T_mem = (2 * heads * L * D * e + kv_bytes * where(GQ.eq(0) & (kv_bytes * 2 > l2), 2, 1)) / (bw * eta_bw) * US
T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US

DIAG_ALIGNED = Br.eq(Bc * floordiv(Br, Bc))  # the causal walk's precondition: Bc divides Br


def chip_params(chip: Chip, dtype: str, calibration: Mapping[str, float] | None = None) -> dict[str, float]:
    if chip.name not in CONTRACT_CHIPS:
        raise InvalidInput("chip", chip.name, CONTRACT_CHIPS, fix="the Triton family's contract assumes Hopper")
    values = {"Ms": chip.smem_per_block, "Ms_sm": chip.smem_per_sm, "warps_sm": chip.warps_per_sm, "regs": REGS,
              "n_sm": chip.sm_count, "bw": chip.bandwidth, "flops": chip.peak(dtype), "l2": chip.l2_bytes, **PRIORS}
    return with_calibration(values, calibration, CALIBRATED)


def workload(shape, dtype: str = "bf16", causal: int = 1) -> dict[str, int]:
    return _workload(shape, dtype, causal=causal)


@register_template(NAME)
def attention_prefill(dtype: str = "bf16", calibration: Mapping[str, float] | None = None,
                      calibration_id: str = "priors", pre: str = "exact") -> Template:
    """The prefill family; `calibration` overrides the efficiency priors (one contract: exact)."""
    if dtype not in DTYPE_BYTES:
        raise InvalidInput("dtype", dtype, sorted(DTYPE_BYTES))
    if pre != "exact":
        raise InvalidInput("contract (--pre)", pre, ["exact"])
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=(Br, Bc, S, W, GQ, TM),
        params=(B, Hq, Hkv, D, L, e, causal, Ms, Ms_sm, warps_sm, regs, n_sm, bw, flops, l2, eta_mma, eta_small, bw_sm,
                t_soft, t_iter, t_mask, lat, t_issue, t_prog, gamma, eta_bw, alpha, t_launch),
        scope=(
            Constraint("rates_positive", (bw > 0) & (flops > 0), "scope", "the chip moves bytes and computes"),
            Constraint("head_dim", D.eq(16) | D.eq(32) | D.eq(64) | D.eq(128) | D.eq(256), "scope",
                       f"the head dimension is one of {HEAD_DIMS}"),
            Constraint("gqa_group", Hq.eq(Hkv * floordiv(Hq, Hkv)), "scope", "Hq is a multiple of Hkv"),
            Constraint("mask", causal <= 1, "scope", "causal is 0 or 1"),
        ),
        constraints=(
            Constraint("C1", smem_bytes <= Ms, "capacity", "the q tile and S stages of K and V fit"),
            Constraint("C2", Br * (D + Bc) <= regs * 32 * W, "capacity", "fp32 accumulator and score rows fit"),
            Constraint("C3", Bc <= Br, "schedule", "the causal phases meet at a tile edge"),
        ),
        preconditions=(
            Constraint("diag_aligned", DIAG_ALIGNED, "schedule", "Bc divides Br: phase 1 ends where the block starts"),
            Constraint("lifetime", S >= 1, "schedule", "a slot is refilled only after its last read (P = S-1)"),
        ),
        cost=T,
        unit="us",
        terms={"T_mem_us": T_mem, "T_comp_us": T_comp, "smem_bytes": smem_bytes, "programs": programs},
        tie_break=("T_comp_us", "smem_bytes"),
        bind_chip=lambda chip: chip_params(chip, dtype, calibration),
        program=lambda assignment, wl: program(assignment, wl, dtype),
        obligations=lambda template: attention_program.prefill_plan(template, chip_params(proof_chip(), dtype,
                                                                                           calibration)),
        options={"dtype": dtype, "calibration": calibration_id},
        descriptor={"algorithm": "attention-prefill", "reuse": "q tile resident, K/V tiles streamed",
                    "placement": "one program per (sequence, head, query block), longest first",
                    "resources": ("smem", "registers", "tma", "tensor-cores"), "calibrated": CALIBRATED,
                    "bounds": BOUNDS, "program": "triton", "shape": "B,Hq,Hkv,D,L", "chip": proof_chip().name},
    )


def program(assignment: Mapping[str, int], wl: Mapping[str, int], dtype: str):
    """The instance as a Triton program (imports triton/torch only here)."""
    from formloop.library.attention_prefill_kernel import (  # noqa: PLC0415 (imports triton, torch)
        PrefillConfig, PrefillPlan, TritonPrefill,
    )

    return TritonPrefill(PrefillPlan.of(PrefillConfig.from_assignment(assignment), wl, dtype))


def bound_class(terms: Mapping[str, float]) -> str:
    return "memory" if terms["T_mem_us"] >= terms["T_comp_us"] else "compute"
