"""Grouped-query decode attention on a Hopper chip ("attention-decode"): split-KV, GQA heads packed
onto the tensor cores, contiguous or paged KV cache, one launch.

One query token per sequence and head reads the whole KV cache, so decode is memory-bound at long
histories and launch/latency-bound at short ones; it wants a split reduction (seed 000, §2.2).

Decisions:
  Bn  keys per tile (BLOCK_N); a tile of K and one of V are staged per step
  KS  splits of the key range: ⌈L/Bn⌉ tiles cut into KS runs of ⌈tiles/KS⌉ consecutive tiles, one
      program each (more programs fill more SMs; every split costs a partial to merge)
  QP  query heads packed per program: QP of the G = Hq/Hkv heads that share a key/value head are the
      rows of one tensor-core dot (padded to 16), so their K/V tiles are read once per program
  S   pipeline stages (num_stages): tiles prefetched S−1 ahead, a slot refilled after its last read
      (P = S−1, beta = 1: the seed's lifetime rule holds for every S)
  W   warps per program (num_warps)
  MG  merge: 1 = in the same launch (each split writes its (max, sum, accumulator) partial and counts
      itself in; the last to arrive folds the KS partials in split order and writes the output),
      0 = a second kernel folds them, 2 = that second kernel is a programmatic dependent launch: scheduled
      while the splits run, it waits (griddepcontrol) until they completed, so only the fold is exposed
  TM  load path: 1 = the copy engine moves whole K/V tiles (TMA), 0 = pointer loads (cp.async)
Walls: C1 shared memory max(S−1, 1)·2·Bn·D·e + (16·D + 16·Bn)·e + 2 KiB ≤ Ms; C2 registers for the
fp32 rows of the accumulator and the scores ≤ regs·32·W; C3 QP divides G; C4 at least half the splits get a tile
(trailing splits past the last tile may be empty: their partial leaves the merge unchanged, and they let a ragged
length such as a decode step's history + 1 keep one tile per split); C5 one split merges in place (MG = 1 when
KS = 1); C6 a TMA tile lies inside one page (page a multiple of Bn).

Cost (µs): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp) + T_merge.
T_mem: the KV bytes read once from DRAM at min(bw·eta_bw, active programs' pull), an SM pulling
what its S−1 prefetched tiles hold per DRAM latency (Little's law), so few programs or shallow
pipelines cannot reach the copy bandwidth; and no faster than the L2 feeds the SMs, which stream
the KV G/QP times (once per head pack).
T_comp: waves of programs (occupancy from shared memory and warps) × (start cost with the first
load's latency + tiles per split × step): a step is the latency a pipeline of S stages leaves
exposed, or the work of the programs sharing the SM (the two dots at eta_mma of the tensor rate,
the softmax elements per thread, a fixed cost, load issue on the pointer path, the block-table
lookups of a paged cache).
T_merge: the partials read back from the L2 plus a fixed cost, plus a launch for MG = 0 (a dependent
launch's wait for MG = 2) or, for MG = 1,
the last arriver's fold (per packed head, split and warp). T_fill: the first tile of every program
arrives at its share of the bandwidth before the first step (pipeline fill).
The efficiency terms (CALIBRATED) start at priors and are fitted to H200 measurements by
formloop.evaluate.calibrate (benchmarks/attention.py writes the fit)."""
from __future__ import annotations

from collections.abc import Mapping

from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param, where
from formloop.hw.chips import Chip
from formloop.library import attention_program, register_template
from formloop.library.attention_workload import DTYPE_BYTES, HEAD_DIMS, workload  # noqa: F401 (re-exported)
from formloop.library.gemm_tiling_gpu import CONTRACT_CHIPS, proof_chip
from formloop.template import Constraint, Template, with_calibration

NAME = "attention-decode"
US = 1e6

Bn = decision("Bn", (16, 32, 64, 128, 256), doc="keys per tile (BLOCK_N)")
KS = decision("KS", (1, 2, 4, 8, 12, 16, 24, 32, 48, 64), doc="splits of the key range (split-KV)")
QP = decision("QP", (4, 1, 2, 8, 16), doc="query heads of one GQA group packed into one program")
S = decision("S", (3, 4, 2, 6), doc="pipeline stages (num_stages): 6 keeps a split's first 5 tiles in flight")
W = decision("W", (4, 8), doc="warps per program (num_warps)")
MG = decision("MG", (1, 0, 2), doc="merge of the split partials: 1 = in-launch (last arriver), 0 = second kernel, "
                                  "2 = second kernel launched as a programmatic dependent (PDL)")
TM = decision("TM", (1, 0), doc="load path: 1 = TMA descriptors (copy engine), 0 = pointer loads (cp.async)")

B = param("B", doc="batch (sequences)")
Hq = param("Hq", doc="query heads")
Hkv = param("Hkv", doc="key/value heads")
D = param("D", doc="head dimension")
L = param("L", doc="KV length (cached keys per sequence)")
e = param("e", doc="bytes per element of Q, K, V and O")
page = param("page", lower=0, doc="tokens per page of a paged KV cache (0: contiguous)")
Ms = param("Ms", kind="chip", doc="shared memory a program may use, bytes")
Ms_sm = param("Ms_sm", kind="chip", doc="shared memory per SM, bytes")
warps_sm = param("warps_sm", kind="chip", doc="resident warps per SM")
regs = param("regs", kind="chip", doc="fp32 registers per thread for the accumulator and score rows")
n_sm = param("n_sm", kind="chip", doc="streaming multiprocessors")
bw = param("bw", kind="chip", integer=False, lower=None, doc="DRAM bandwidth (measured copy), bytes/s")
flops = param("flops", kind="chip", integer=False, lower=None, doc="tensor rate for the data type, FLOP/s")


def _eff(name: str, doc: str):
    return param(name, kind="chip", integer=False, lower=0, doc=doc)


eta_bw = _eff("eta_bw", "achieved fraction of the copy bandwidth when enough bytes are in flight")
lat_m = _eff("lat_m", "DRAM latency an SM's loads in flight must cover, s")
eta_mma = _eff("eta_mma", "achieved fraction of the tensor rate by the 16-row decode dots")
t_elem = _eff("t_elem", "softmax cost per score element a thread holds, s")
t_iter = _eff("t_iter", "fixed cost of one tile step, s")
t_start = _eff("t_start", "fixed cost of one program (query load, epilogue), s")
t_launch = _eff("t_launch", "cost of one kernel launch inside a CUDA graph, s")
t_merge = _eff("t_merge", "fixed cost of the merge (arrival atomic, L2 round trip), s")
t_launch2 = _eff("t_launch2", "extra cost of the second (merge) kernel, s")
t_pdl = _eff("t_pdl", "extra cost of the second kernel launched as a programmatic dependent (MG = 2), s")
bw_l2 = _eff("bw_l2", "bytes/s one SM reads partials back from the L2")
t_page = _eff("t_page", "cost of the block-table lookups of one tile (paged cache), s")
t_issue = _eff("t_issue", "cost of issuing one 16-byte load per thread (pointer path), s")
alpha = _eff("alpha", "fraction of the shorter of T_mem, T_comp that is not hidden")
t_fold = _eff("t_fold", "in-launch merge cost per packed head, split and warp (MG = 1), s")
fill = _eff("fill", "fraction of one tile's transfer at a program's share of the bandwidth left exposed")

CALIBRATED = ("eta_bw", "lat_m", "eta_mma", "t_elem", "t_iter", "t_start", "t_launch", "t_merge", "t_launch2",
              "bw_l2", "t_page", "t_issue", "alpha", "t_fold", "fill", "t_pdl")
# Fitted on the h200 DATASHEET chip (the chip every solve reads) to 291 H200 points: round 14's benchmarks/attention.py
# run (standalone, L = 512…32768; L = 3000 and 12000 held out) and round 13's designs timed in the Qwen3 layer's
# context (L = 513…8193); rms log error 0.124 -> 0.090 from round 14's first refit, which had only the in-context
# points and picked 1.3-1.6x slower designs beyond 8192 keys: `benchmarks/attention_priors_fit.py --attention
# RUN/attention.json --layer RUN/qwen3_layer.json ... --family attention-decode --hold 3000,12000` (RESULTS round 14).
PRIORS = {"eta_bw": 0.802, "lat_m": 1.66e-06, "eta_mma": 0.207, "t_elem": 9.88e-11, "t_iter": 7.32e-07,
          "t_start": 6.7e-08, "t_launch": 1.11e-06, "t_merge": 6.17e-07, "t_launch2": 2.23e-06,
          "bw_l2": 43.6e9, "t_page": 1.01e-07, "t_issue": 4.43e-09, "alpha": 1.4e-12, "t_fold": 1.23e-08,
          "fill": 0.993, "t_pdl": 2.11e-06}
# t_pdl (the dependent-launch merge, MG = 2) is fitted from the MG = 2 designs among those points.
# lat_m >= 0.5 us: DRAM latency under load on Hopper (a smaller fit lets tiny unpipelined tiles look streaming)
BOUNDS = {"eta_bw": (0.3, 1.02), "eta_mma": (0.02, 1.0), "alpha": (0.0, 1.0), "lat_m": (0.5e-6, 5e-6),
          "fill": (0.0, 2.0)}
REGS = 160  # fp32 registers per thread left for accumulator and score rows (255 minus addresses and state)
REG_RESERVE = 255 - REGS  # registers a thread keeps for addresses and state: a chip that caps a thread (maxnreg on
# an emulated chip) below REGS + REG_RESERVE leaves the rows that much less (C2 reads it)


def register_budget(chip: Chip) -> int:
    """fp32 registers a thread may give the accumulator and score rows on `chip`."""
    return max(0, min(REGS, chip.registers_per_thread - REG_RESERVE))

G = floordiv(Hq, Hkv)
BH = maximum(QP, 16)  # rows of the dots: tl.dot needs 16
tiles = ceildiv(L, Bn)
per_split = ceildiv(tiles, KS)
filled = ceildiv(tiles, per_split)  # the splits that get a tile; the KS − filled after them are empty
programs = B * Hkv * floordiv(G, QP) * KS
tile_bytes = 2 * Bn * D * e
# Triton 3.6 on sm_90 keeps S−1 tiles of K and V in flight (one without a pipeline), the query, the
# score tile for the layout change into the second dot and 2 KiB of scratch (read from compile reports).
smem_bytes = maximum(S - 1, 1) * tile_bytes + 16 * D * e + BH * Bn * e + 2048
# At least 1 so that the cost stays finite on designs C1 rejects (the solver tabulates every menu point).
occupancy = maximum(1, minimum(floordiv(Ms_sm, smem_bytes), floordiv(warps_sm, W), 32))
# the programs that read keys (an empty trailing split only stores its neutral partial); >= 1: finite on designs
# C3 rejects
active = maximum(1, minimum(B * Hkv * floordiv(G, QP) * filled, n_sm * occupancy))
waves = ceildiv(programs, n_sm * occupancy)
kv_bytes = 2 * B * Hkv * L * D * e
io_bytes = 2 * B * Hq * D * e
# Triton 3.6 does not multi-buffer loads whose address depends on a block-table load in the same
# step (compile reports: one stage of K/V for a paged cache), so a paged cache runs unpipelined.
pipelined = (S > 1) & page.eq(0)
# Little's law: an SM's loads in flight (the S−1 prefetched tiles; half a tile on average without a
# pipeline) per DRAM latency bound what few programs can pull.
pull = where(pipelined, S - 1, 0.5) * tile_bytes / lat_m
T_dram = (kv_bytes + io_bytes) / minimum(bw * eta_bw, active * pull)
# Every program streams its tiles from the L2 into the SM: G/QP programs per key/value head.
T_l2 = kv_bytes * floordiv(G, QP) / (minimum(active, n_sm) * bw_l2)
T_mem = maximum(T_dram, T_l2) * US
# One program's chain of tile steps; the programs resident on one SM share its issue slots.
sharing = minimum(occupancy, ceildiv(programs, n_sm))
t_work = (4 * BH * Bn * D / (flops * eta_mma / n_sm) + t_elem * BH * Bn / (32 * W) + t_iter + where(page > 0, t_page, 0)
          + where(TM.eq(0), tile_bytes / (16 * 32 * W) * t_issue, 0))
t_step = where(pipelined, maximum(sharing * t_work, lat_m / maximum(S - 1, 1)), sharing * t_work + lat_m)
T_comp = waves * (t_start + lat_m + per_split * t_step) * US
part_bytes = QP * (D + 2) * 4
# The in-launch fold grows with the packed heads, the splits and the warps of the last arriver (the
# H200 run of 2026-12-01 11:00: W = 8 with MG = 1 cost ~0.085 us per QP·KS over a second kernel).
T_merge = where(KS > 1, t_merge + KS * part_bytes / bw_l2
                + where(MG.eq(0), t_launch2, where(MG.eq(2), t_pdl, t_fold * QP * KS * W)), 0) * US
# The pipeline's first tiles arrive at one program's share of the bandwidth before any step starts.
T_fill = fill * tile_bytes * active / (bw * eta_bw) * US
T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + T_merge + T_fill + t_launch * US

FIRST_SPLIT_NONEMPTY = L >= 1  # split 0 starts at key 0: the precondition split-first-nonempty assumes
TILE_IN_PAGE = TM.eq(0) | page.eq(0) | page.eq(Bn * floordiv(page, Bn))
LIFETIME = S >= 1  # P = S−1, beta = 1 under Triton's pipeliner: P <= S−2+beta for every S >= 1


def chip_params(chip: Chip, dtype: str, calibration: Mapping[str, float] | None = None) -> dict[str, float]:
    """Chip values for the template; the Triton families share one set of contract chips
    (gemm_tiling_gpu.CONTRACT_CHIPS: Hopper, TMA copies and 227 KiB of shared memory)."""
    if chip.name not in CONTRACT_CHIPS:
        raise InvalidInput("chip", chip.name, CONTRACT_CHIPS, fix="the Triton family's contract assumes Hopper")
    values = {"Ms": chip.smem_per_block, "Ms_sm": chip.smem_per_sm, "warps_sm": chip.warps_per_sm,
              "regs": register_budget(chip),
              "n_sm": chip.sm_count, "bw": chip.bandwidth, "flops": chip.peak(dtype), **PRIORS}
    return with_calibration(values, calibration, CALIBRATED)


@register_template(NAME)
def attention_decode(dtype: str = "bf16", calibration: Mapping[str, float] | None = None,
                     calibration_id: str = "priors", pre: str = "exact") -> Template:
    """The decode family; `calibration` overrides the efficiency priors. `pre` is accepted for the
    generic prove command: this template has one contract (exact)."""
    if dtype not in DTYPE_BYTES:
        raise InvalidInput("dtype", dtype, sorted(DTYPE_BYTES))
    if pre != "exact":
        raise InvalidInput("contract (--pre)", pre, ["exact"])
    heads_ok = Hq.eq(Hkv * G)
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=(Bn, KS, QP, S, W, MG, TM),
        params=(B, Hq, Hkv, D, L, e, page, Ms, Ms_sm, warps_sm, regs, n_sm, bw, flops, eta_bw, lat_m, eta_mma, t_elem,
                t_iter, t_start, t_launch, t_merge, t_launch2, bw_l2, t_page, t_issue, alpha, t_fold, fill, t_pdl),
        scope=(
            Constraint("rates_positive", (bw > 0) & (flops > 0), "scope", "the chip moves bytes and computes"),
            Constraint("head_dim", D.eq(16) | D.eq(32) | D.eq(64) | D.eq(128) | D.eq(256), "scope",
                       f"the head dimension is one of {HEAD_DIMS}"),
            Constraint("gqa_group", heads_ok, "scope", "Hq is a multiple of Hkv"),
        ),
        constraints=(
            Constraint("C1", smem_bytes <= Ms, "capacity", "the S stages of K and V tiles and the query fit"),
            Constraint("C2", BH * (D + 2 * Bn) <= regs * 32 * W, "capacity",
                       "fp32 accumulator and score rows fit the warps' registers"),
            Constraint("C3", G.eq(QP * floordiv(G, QP)), "layout", "QP divides the GQA group"),
            Constraint("C4", 2 * filled >= KS, "schedule", "at least half the splits get a tile"),
            Constraint("C5", (KS > 1) | MG.eq(1), "schedule", "a single split writes its output itself"),
            Constraint("C6", TILE_IN_PAGE, "layout", "a copy-engine tile lies inside one page"),
        ),
        preconditions=(
            Constraint("first_split_nonempty", FIRST_SPLIT_NONEMPTY, "schedule",
                       "split 0 holds a key: the merge's largest max is finite (empty splits weigh 0)"),
            Constraint("packing", G.eq(QP * floordiv(G, QP)), "layout", "the packed heads tile the group"),
            Constraint("tile_in_page", TILE_IN_PAGE, "layout", "a TMA tile's keys share one page"),
            Constraint("lifetime", LIFETIME, "schedule", "a slot is refilled only after its last read"),
        ),
        cost=T,
        unit="us",
        terms={"T_mem_us": T_mem, "T_comp_us": T_comp, "T_merge_us": T_merge, "T_fill_us": T_fill,
               "smem_bytes": smem_bytes, "programs": programs},
        tie_break=("T_comp_us", "smem_bytes"),
        bind_chip=lambda chip: chip_params(chip, dtype, calibration),
        program=lambda assignment, wl: program(assignment, wl, dtype),
        obligations=lambda template: attention_program.decode_plan(template, chip_params(proof_chip(), dtype,
                                                                                         calibration)),
        options={"dtype": dtype, "calibration": calibration_id},
        descriptor={"algorithm": "attention-decode", "reuse": "K/V tiles shared by the packed query heads",
                    "placement": "one program per (sequence, KV head, head pack, split)",
                    "resources": ("smem", "registers", "tensor-cores"), "calibrated": CALIBRATED, "bounds": BOUNDS,
                    "program": "triton", "shape": "B,Hq,Hkv,D,L", "chip": proof_chip().name},
    )


def program(assignment: Mapping[str, int], wl: Mapping[str, int], dtype: str):
    """The instance as a Triton program (imports triton/torch only here)."""
    from formloop.library.attention_decode_kernel import (  # noqa: PLC0415 (imports triton, torch)
        DecodeConfig, DecodePlan, TritonDecode,
    )

    return TritonDecode(DecodePlan.of(DecodeConfig.from_assignment(assignment), wl, dtype))


def bound_class(terms: Mapping[str, float]) -> str:
    return "memory" if terms["T_mem_us"] >= terms["T_comp_us"] else "latency/compute"
