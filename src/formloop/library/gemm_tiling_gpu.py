"""The tiling template's GPU contract ("gemm-tiling-gpu"): the Triton family on a Hopper chip.

The same decision core as `gemm-tiling` (Tm, Tn, Tk, S) plus the kernel's own decisions: W warps,
KS splits of the k range (split-K, with its own reduction obligation) and G tile rows per swizzle
group. P and beta are not free here: Triton's pipeliner prefetches S−1 k-tiles ahead and refills a
slot only after the tensor-core read of it completed, i.e. P = S−1, beta = 1, so the seed's
lifetime rule P ≤ S−2+beta holds for every S.

SC picks the schedule: 0 data-parallel (one block per tile and split), 1 persistent (min(tiles, n_sm)
programs loop over the tiles in the swizzled order), 2 stream-K (the tiles' k-steps cut into n_sm
even runs, shared tiles fixed up by a last-arriver merge; gemm_tiling_sched_kernel). C6 keeps both
to the copy-engine path without split-K.

L picks the load path: 1 = the copy engine (TMA tensor descriptors; edges zero-filled on read and
clipped on write), 0 = pointer loads with masks (any layout).

Walls (chip resources on the right-hand side):
  C1 smem     S·(Tm+Tn)·Tk·e ≤ Ms      (227 KiB per block; the slot size Triton 3.6 allocates on the
                                         wgmma path, read from its compile reports)
  C2 acc      256 ≤ Tm·Tn ≤ acc_regs·32·W   (fp32 accumulators per thread fit the register file;
                                         acc_regs = min(128, registers per thread − 64): a thread's
                                         cap, e.g. maxnreg on an emulated chip, less 64 for addresses,
                                         fragments and pipeline state. On the H200 Triton 3.6 failed to
                                         compile 128 accumulators a thread under maxnreg=128;
                                         tf32x3 also holds the hi and lo parts of the A and B tiles:
                                         Tm·Tn + 2·(Tm+Tn)·Tk, else 128x256x32 on 8 warps spills
                                         936 B on sm_90, tests/test_tf32x3_compile.py)
  C3 warps    Tm·Tn ≥ 64·W              (each thread holds at least two accumulators)
  C4 split    (KS−1)·⌈⌈K/Tk⌉/KS⌉ < ⌈K/Tk⌉   (every split gets at least one k-tile)
  C5 layout   L = 0 or K·e and N·e are multiples of 16 bytes (TMA row pitch)
  C6 sched    SC = 0 or (KS = 1 and L = 1)
  C7 smem     C1 with the output staging tile Tm·Tn·e on top when SC > 0 (the slots stay live across tiles)

Cost (µs): a per-SM pipeline model against DRAM, plus launch costs. One block's k-step takes
max(tensor time, L2→SM feed time, lat / (S−2)) + a fixed step cost (+ load issue on the pointer
path); S ≤ 2 exposes the latency. Blocks run in waves of n_sm; DRAM traffic counts A and B once per
wave that needs them (the wave's footprint follows the swizzle G), or once in all when the operand
stays in a quarter of the L2, plus C, plus the split-K partials when they do not stay in the L2.
Rows of a tile narrower than 128 bytes fetch DRAM less efficiently (d32, d64), and an SM pulls at
most its prefetched bytes per DRAM latency (lat_m), so small grids and shallow pipelines cannot
reach the chip's bandwidth.
Split-K reduces in the same launch: the last split of each tile reads the KS partials back from
the L2 (t_fix: the arrival atomic and the extra pass); the L2 writes the partials back to DRAM.
The prefetch covers the L2 latency, plus DRAM's in the measure that the shape is memory-bound.
T = max(T_mem, T_comp) + alpha·min(T_mem, T_comp) + t_launch: the shorter side is hidden but for
a fraction alpha. The efficiency terms (CALIBRATED) start at priors and are
fitted to measurements by `formloop.evaluate.calibrate`.
"""
from __future__ import annotations

from collections.abc import Mapping

from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param, substitute, where
from formloop.hw.chips import Chip, get_chip
from formloop.library import gemm_tiling_index as index
from formloop.library import gemm_tiling_sched_index as sched_index
from formloop.library import register_template
from formloop.library.gemm_tiling import DTYPE_BYTES, workload  # noqa: F401  (workload re-exported)
from formloop.template import Constraint, Template, with_calibration
from formloop.verify.certificate import ProofPlan
from formloop.verify.outcome import ObligationResult

NAME = "gemm-tiling-gpu"
DTYPES = ("bf16", "fp16", "tf32", "tf32x3", "fp32")
# The chips whose specs this contract is written for (TMA copies, 227 KiB of shared memory a block).
CONTRACT_CHIPS = ("h200", "h100")
CONTRACT = "gpu (Triton family)"  # how a report names a contract of the Triton families on these chips
US = 1e6

Tm = decision("Tm", (16, 32, 64, 128, 256), doc="rows of the output tile a block computes (BLOCK_M)")
Tn = decision("Tn", (16, 32, 64, 128, 256), doc="columns of the output tile a block computes (BLOCK_N)")
Tk = decision("Tk", (32, 64, 128), doc="depth of one k-tile staged in shared memory (BLOCK_K)")
S = decision("S", (5, 4, 3, 2, 1), doc="pipeline stages (num_stages): shared-memory slots")
W = decision("W", (4, 8), doc="warps per block (num_warps)")
KS = decision("KS", (1, 2, 4, 8), doc="split-K: contiguous k ranges reduced by separate blocks")
G = decision("G", (8, 1), doc="tile rows per swizzle group (grouped-M launch order)")
L = decision("L", (1, 0), doc="load path: 1 = tensor-memory copies (TMA descriptors), 0 = pointer loads (cp.async)")
SC = decision("SC", (0, 1, 2), doc="schedule: 0 = data-parallel (one block per tile and split), 1 = persistent "
              "(n_sm programs loop over the tiles), 2 = stream-K (n_sm programs share the tiles' k-steps evenly)")

M = param("M", doc="rows of A and C")
N = param("N", doc="columns of B and C")
K = param("K", doc="reduction extent")
e = param("e", doc="bytes per element of A and B")
Ms = param("Ms", kind="chip", doc="shared memory a block may use, bytes")
acc_regs = param("acc_regs", kind="chip", doc="fp32 accumulator registers a thread may hold")
n_sm = param("n_sm", kind="chip", doc="streaming multiprocessors")
bw = param("bw", kind="chip", integer=False, lower=None, doc="DRAM bandwidth (measured copy), bytes/s")
flops = param("flops", kind="chip", integer=False, lower=None, doc="tensor rate for the data type, FLOP/s")
l2 = param("l2", kind="chip", doc="L2 cache, bytes")


def _eff(name: str, doc: str):
    return param(name, kind="chip", integer=False, lower=0, doc=doc)


eta_mma = _eff("eta_mma", "achieved fraction of the tensor rate, wgmma tiles (Tm >= 64)")
eta_sync = _eff("eta_sync", "achieved fraction of the tensor rate, mma.sync tiles (Tm < 64)")
bw_sm = _eff("bw_sm", "bytes/s one SM pulls from L2 into shared memory")
lat = _eff("lat", "load latency a prefetch must cover, s")
t_iter = _eff("t_iter", "fixed cost of one k-step, s")
t_sync = _eff("t_sync", "extra cost of one k-step on the mma.sync path (Tm < 64), s")
t_issue = _eff("t_issue", "cost of issuing one 16-byte load per thread (pointer path), s")
t_tile = _eff("t_tile", "fixed cost of one block (prologue, epilogue), s")
t_epi = _eff("t_epi", "epilogue cost per accumulator a thread holds, s")
n0 = _eff("n0", "tile width at which the tensor instructions run at half efficiency")
f_n16 = _eff("f_n16", "feed efficiency of B tiles 16 columns wide (relative to 128 and wider)")
f_n32 = _eff("f_n32", "feed efficiency of B tiles 32 columns wide")
f_n64 = _eff("f_n64", "feed efficiency of B tiles 64 columns wide")
eta_bw = _eff("eta_bw", "achieved fraction of the copy bandwidth")
alpha = _eff("alpha", "fraction of DRAM time that compute does not hide")
t_launch = _eff("t_launch", "cost of one kernel launch inside a CUDA graph, s")
d32 = _eff("d32", "DRAM efficiency of tile rows 32 bytes wide (relative to 128 and wider)")
d64 = _eff("d64", "DRAM efficiency of tile rows 64 bytes wide")
lat_m = _eff("lat_m", "DRAM latency an SM's loads in flight must cover (its pull = bytes in flight / lat_m), s")
t_fix = _eff("t_fix", "split-K: the last split's arrival atomic and reduction start, s")
lat_d = _eff("lat_d", "extra load latency when the tiles come from DRAM rather than the L2, s")
# The schedules' own terms (schedules=True only: the data-parallel family's params and hash are unchanged).
h_sk = _eff("h_sk", "stream-K: fraction of its scattered wave's extra operand re-reads the L2 catches")
eta_sk = _eff("eta_sk", "stream-K: achieved fraction of a data-parallel k-step's rate in a run's mainloop")
t_sk = _eff("t_sk", "stream-K: a run's fix-up fixed cost (partial store, arrival atomic, merge issue), s")

CALIBRATED = ("eta_mma", "eta_sync", "n0", "f_n16", "f_n32", "f_n64", "bw_sm", "lat", "t_iter", "t_sync", "t_issue",
              "t_tile", "t_epi", "eta_bw", "alpha", "t_launch", "d32", "d64", "lat_m", "t_fix", "lat_d")
SCHED_CALIBRATED = ("h_sk", "eta_sk", "t_sk")
SCHED_PRIORS = {"h_sk": 0.5, "eta_sk": 1.0, "t_sk": 1e-6}
PRIORS = {"lat_d": 0.6e-6, "d32": 0.5, "d64": 0.8, "lat_m": 1e-6, "t_fix": 1e-6, "eta_mma": 0.8, "eta_sync": 0.35,
          "n0": 32.0, "f_n16": 0.25, "f_n32": 0.5, "f_n64": 0.8, "bw_sm": 120e9, "lat": 0.5e-6, "t_iter": 20e-9,
          "t_sync": 50e-9, "t_issue": 1e-9, "t_tile": 1.0e-6, "t_epi": 1e-9, "eta_bw": 0.9, "alpha": 0.3,
          "t_launch": 2.5e-6}
# Physical ranges the fit stays inside (the rest: 1/100..100x the prior).
# eta_bw stays at or below the measured streaming read (a GEMM cannot beat it); round 1 let it
# reach 1.34 to make up for A re-reads the L2 absorbs, and then rated pure streams too fast.
BOUNDS = {"eta_mma": (0.05, 1.2), "eta_sync": (0.05, 1.2), "eta_bw": (0.3, 1.02), "d32": (0.1, 1.0),
          "d64": (0.1, 1.0), "lat_m": (0.1e-6, 5e-6), "t_fix": (1e-8, 1e-5), "lat_d": (0.02e-6, 3e-6),
          "f_n16": (0.02, 1.0),
          "f_n32": (0.02, 1.0), "f_n64": (0.02, 1.0), "lat": (0.05e-6, 3e-6),
          "alpha": (0.0, 1.0), "n0": (1.0, 256.0), "h_sk": (0.01, 1.0), "eta_sk": (0.2, 1.0), "t_sk": (1e-8, 2e-5)}
ACC_REGS = 128      # accumulators a thread may hold at the full register file (255 a thread)
ACC_HEADROOM = 64   # registers a thread needs besides its accumulators (the cap's wall: acc <= cap - this)

npm = ceildiv(M, Tm)
npn = ceildiv(N, Tn)
k_tiles = ceildiv(K, Tk)
n_iter = ceildiv(k_tiles, KS)
blocks = npm * npn * KS
waves = ceildiv(blocks, n_sm)
# Triton 3.6's TMA path with 4-byte operands also stages the output tile in shared memory
# (OutOfResources seen on the H200 for 128x256x32 fp32 at S = 3 and 4); counted conservatively.
# So does a persistent or stream-K program (SC > 0): its pipeline slots stay live across tiles, so the
# output tile's staging buffer comes on top (262176 bytes at 128x256x64, S = 4, bf16, compiled for sm_90).
smem_bytes = S * (Tm + Tn) * Tk * e + where((e > 2) & L.eq(1), Tm * Tn * e, 0)
smem_sc = S * (Tm + Tn) * Tk * e + where(((e > 2) & L.eq(1)) | (SC > 0), Tm * Tn * e, 0)

# One wave's footprint in tiles: G rows at a time (or more when a row is shorter than a wave).
wave_tiles = ceildiv(n_sm, KS)
rows_w = minimum(npm, maximum(G, ceildiv(wave_tiles, npn)))
cols_w = minimum(npn, ceildiv(wave_tiles, rows_w))
# An operand that fits in a quarter of the L2 is fetched from DRAM once; re-reads hit the L2.
reads_a = where(M * K * e * 4 <= l2, 1, ceildiv(npn, cols_w))
reads_b = where(K * N * e * 4 <= l2, 1, ceildiv(npm, rows_w))


def _row_eff(row_bytes):
    return where(row_bytes <= 32, d32, where(row_bytes <= 64, d64, 1))


# Split-K partials: the last split reads them back from the L2, but the L2 writes back: every
# partial written reaches DRAM once (read back from DRAM too only if they spill the L2).
ws_bytes = where(KS > 1, KS * M * N * 4, 0)
bytes_dram = (M * K * e * reads_a / _row_eff(Tk * e) + K * N * e * reads_b / _row_eff(Tn * e) + M * N * e
              + ws_bytes + where(ws_bytes * 2 > l2, ws_bytes, 0))
# Tensor time of one k-step; narrow tiles issue more, smaller tensor instructions (n0).
# With 8 warps and fewer than 128 rows the two warpgroups split the columns: half-width instructions.
Tn_wg = where((W > 4) & (Tm < 128), Tn / 2, Tn)
t_mma = 2 * Tm * Tn * Tk / (flops * where(Tm >= 64, eta_mma, eta_sync) / n_sm) * (Tn_wg + n0) / Tn_wg
# Narrow B tiles (short rows) feed slower than their bytes suggest: one efficiency per width.
f_n = where(Tn.eq(16), f_n16, where(Tn.eq(32), f_n32, where(Tn.eq(64), f_n64, 1)))
t_feed = (Tm * Tk * e + Tk * Tn * e / f_n) / bw_sm
# The latency a prefetch must cover: the L2's, plus DRAM's in the measure that the problem streams
# from DRAM (its SOL memory time over its SOL tensor time, capped at 1; a shape property, so the
# term reads no more decisions than before).
dram_share = minimum(1, (M * K + K * N + M * N) * e / bw / (2 * M * N * K / flops))
lat_eff = lat + lat_d * dram_share
# Triton keeps one tensor-core group in flight, so a slot is refilled one step late: S stages hide
# the load latency over S-2 steps; with S = 2 it is exposed once per step, with S = 1 nothing overlaps.
t_core = where(S.eq(1), t_mma + t_feed + lat_eff,
               where(S.eq(2), maximum(t_mma, t_feed) + lat_eff,
                     maximum(t_mma, t_feed, lat_eff / maximum(S - 2, 1)))) + t_iter + where(Tm < 64, t_sync, 0)
# The pointer path (L = 0) issues every 16-byte load from the W warps; the copy engine (L = 1) does not.
t_loads = (Tm + Tn) * Tk * e / (16 * 32 * W) * t_issue
t_block = t_tile + Tm * Tn / (32 * W) * t_epi
# Split-K: every split writes its float32 partial, the last one reads KS of them back (L2 → SM).
t_split = where(KS > 1, Tm * Tn * 4 * (KS + 1) / bw_sm + t_fix, 0)
T_dp = waves * n_iter * t_core + waves * n_iter * (1 - L) * t_loads + waves * (t_block + t_split)
# Persistent (SC = 1): min(tiles, n_sm) programs walk the tiles in the same swizzled order; the
# same ⌈tiles/n_sm⌉ quantization as data-parallel, but a program's fixed cost is paid once and each
# further tile costs its epilogue and the pipeline's refill (the S−1 prefetches restart: one latency).
tiles = npm * npn
tiles_pp = ceildiv(tiles, n_sm)
t_epi_tile = Tm * Tn / (32 * W) * t_epi
T_pers = tiles_pp * (k_tiles * t_core + t_epi_tile) + (tiles_pp - 1) * lat_eff + t_tile
# Stream-K (SC = 2): the tiles·⌈K/Tk⌉ k-steps are cut into n_sm even runs (no wave quantization);
# a run crosses at most ⌈tiles/n_sm⌉ tile boundaries, each segment restarts the pipeline (one
# latency) and ends in an epilogue. A run's first and last segments are partial tiles: its first
# writes a float32 partial to the workspace; its last is the tile's last arriver (the next run wrote
# its part at its start), which reads both partials back and stores the tile at the end of the run:
# the fix-up is serial on every run's critical path (four tile passes L2 ↔ SM, t_sk: the arrival
# atomic, the barrier and the merge's issue). eta_sk: the fraction of a data-parallel k-step's rate
# the run's mainloop reaches (dynamic k bounds, tiles crossed mid-run).
sk_steps = ceildiv(tiles * k_tiles, n_sm)
t_sk_fix = Tm * Tn * 4 * 4 / bw_sm + t_sk
T_sk = sk_steps * t_core / eta_sk + (tiles_pp + 1) * (t_epi_tile + lat_eff) + t_tile + t_sk_fix
# C6 makes KS = 1 and L = 1 under SC ≠ 0, so each schedule's time is data-parallel's plus a
# correction that reads few decisions (a table small enough for the MILP); exact on feasible points.
DP1 = {"KS": 1, "L": 1}
T_comp = T_dp * US  # data-parallel: what the families built on this one (gemm-epilogue, the DSL) read
T_comp_sc = (T_dp + where(SC.eq(1), T_pers - substitute(T_dp, DP1), 0)
             + where(SC.eq(2), T_sk - substitute(T_dp, DP1), 0)) * US

# An SM pulls from DRAM at most what its S−1 prefetched k-tiles hold per latency (Little's law);
# fewer blocks than SMs, or shallow pipelines of small tiles, cannot reach the chip's bandwidth.
pull_sm = maximum(S - 1, 1) * (Tm + Tn) * Tk * e / lat_m
T_mem_dp = bytes_dram / minimum(bw * eta_bw, minimum(blocks, n_sm) * pull_sm) * US
# Stream-K runs min(tiles·⌈K/Tk⌉, n_sm) programs that each pull (skinny shapes reach the chip's
# bandwidth), and its partials (two a program, float32) reach DRAM through the L2's write-back.
# Its programs start ⌈tiles/n_sm⌉ tiles apart in the swizzled order, so the tiles in flight at one
# time do not share a swizzle group's rows and columns: each wave touches min(npm, n_sm) row panels
# of A and min(npn, n_sm) column panels of B (an operand in a quarter of the L2 is read once), at
# most a panel per tile. h_sk: the fraction of those extra re-reads the L2 still catches (the runs
# drift apart in k, so panels shared across runs rarely meet in the L2).
reads_a_sk = where(M * K * e * 4 <= l2, 1, minimum(npn, tiles_pp * minimum(npm, n_sm) / npm))
reads_b_sk = where(K * N * e * 4 <= l2, 1, minimum(npm, tiles_pp * minimum(npn, n_sm) / npn))
ops_dp = substitute(M * K * e * reads_a / _row_eff(Tk * e) + K * N * e * reads_b / _row_eff(Tn * e), DP1)
ops_sk = M * K * e * reads_a_sk / _row_eff(Tk * e) + K * N * e * reads_b_sk / _row_eff(Tn * e)
bytes_sk = (substitute(bytes_dram, DP1) + (1 - h_sk) * maximum(ops_sk - ops_dp, 0)
            + 2 * n_sm * Tm * Tn * 4)
T_mem_sk = bytes_sk / minimum(bw * eta_bw, minimum(tiles * k_tiles, n_sm) * pull_sm) * US
T_mem = T_mem_dp
T_mem_sc = T_mem_dp + where(SC.eq(2), T_mem_sk - substitute(T_mem_dp, DP1), 0)
T_split = t_split * waves * US
T_split_sc = (where(SC.eq(0), t_split * waves, 0) + where(SC.eq(2), t_sk_fix, 0)) * US
# The shorter of the two is hidden but for a fraction alpha: max + alpha·min, written as
# (1−alpha)·max + alpha·sum so the MILP keeps a convex max (alpha ≤ 1).
T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US
T_sc = (1 - alpha) * maximum(T_mem_sc, T_comp_sc) + alpha * (T_mem_sc + T_comp_sc) + t_launch * US
ROWS_ALIGNED = (K * e).eq(16 * floordiv(K * e, 16)) & (N * e).eq(16 * floordiv(N * e, 16))

LIFETIME = S >= 1  # P = S−1, beta = 1 under Triton's pipeliner: P ≤ S−2+beta for every S ≥ 1


def held_values(dtype: str):
    """fp32 values a block holds in registers: its accumulators, and for tf32x3 the hi and lo parts
    of its A and B tiles (the other types' expression is unchanged: content hashes stay)."""
    return Tm * Tn + 2 * (Tm + Tn) * Tk if dtype == "tf32x3" else Tm * Tn


def acc_budget(chip: Chip) -> int:
    """fp32 accumulators a thread may hold on `chip`: ACC_REGS, less where the chip caps a thread's
    registers below ACC_REGS + ACC_HEADROOM."""
    return max(0, min(ACC_REGS, chip.registers_per_thread - ACC_HEADROOM))


def chip_params(chip: Chip, dtype: str, calibration: Mapping[str, float] | None = None) -> dict[str, float]:
    """Chip values for the template: capacities, measured (or datasheet) rates, efficiency terms."""
    if chip.name not in CONTRACT_CHIPS:
        raise InvalidInput("chip", chip.name, CONTRACT_CHIPS,
                           fix="the Triton family's contract assumes Hopper: TMA copies and 227 KiB of shared memory")
    precision = {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "tf32x3": "tf32x3", "fp32": "fp32"}[dtype]
    values = {"Ms": chip.smem_per_block, "acc_regs": acc_budget(chip), "n_sm": chip.sm_count,
              "bw": chip.bandwidth, "flops": chip.peak(precision), "l2": chip.l2_bytes, **PRIORS, **SCHED_PRIORS}
    return with_calibration(values, calibration, CALIBRATED + SCHED_CALIBRATED)


@register_template(NAME)
def gemm_tiling_gpu(dtype: str = "bf16", calibration: Mapping[str, float] | None = None,
                    calibration_id: str = "priors", schedules: bool = False) -> Template:
    """The Triton GEMM family on a Hopper chip; `calibration` overrides the efficiency priors.
    `schedules` adds the schedule decision SC (persistent, stream-K; C6, C7 and their cost terms). It is
    off by default, so the template (hash, stored proofs, recorded picks) stays the data-parallel family's.
    With it the MILP is solved one schedule at a time (descriptor milp_split, formloop.solve.split): about
    1.3-2x the time of the family without it (about 5x as one MILP)."""
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    if schedules not in (True, False):
        raise InvalidInput("schedules", schedules, (True, False))
    sched = (Constraint("C6", SC.eq(0) | (KS.eq(1) & L.eq(1)), "schedule",
                        "persistent and stream-K programs are copy-engine kernels without split-K"),
             Constraint("C7", smem_sc <= Ms, "capacity",
                        "a persistent or stream-K program's slots and its output staging tile fit in shared memory"))
    terms = {"T_comp_us": T_comp_sc, "T_mem_us": T_mem_sc, "T_split_us": T_split_sc, "smem_bytes": smem_sc} \
        if schedules else {"T_comp_us": T_comp, "T_mem_us": T_mem, "T_split_us": T_split, "smem_bytes": smem_bytes}
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=(Tm, Tn, Tk, S, W, KS, G, L) + ((SC,) if schedules else ()),
        params=(M, N, K, e, Ms, acc_regs, n_sm, bw, flops, l2, eta_mma, eta_sync, n0, f_n16, f_n32, f_n64, bw_sm, lat,
                t_iter, t_sync, t_issue, t_tile,
                t_epi, eta_bw, alpha, t_launch, d32, d64, lat_m, t_fix, lat_d)
        + ((h_sk, eta_sk, t_sk) if schedules else ()),
        scope=(
            Constraint("rates_positive", (bw > 0) & (flops > 0), "scope", "the chip moves bytes and computes"),
        ),
        constraints=(
            Constraint("C1", smem_bytes <= Ms, "capacity", "the S slots fit in shared memory"),
            Constraint("C2", (Tm * Tn >= 256) & (held_values(dtype) <= acc_regs * 32 * W), "capacity",
                       "the fp32 accumulator tile fits the warps' registers"),
            Constraint("C3", Tm * Tn >= 64 * W, "capacity", "every thread holds at least two accumulators"),
            Constraint("C4", (KS - 1) * n_iter < k_tiles, "schedule", "every split gets at least one k-tile"),
            Constraint("C5", L.eq(0) | ROWS_ALIGNED, "layout", "the copy engine needs 16-byte aligned row pitches"),
        ) + (sched if schedules else ()),
        preconditions=(Constraint("lifetime", LIFETIME, "schedule",
                                  "a slot is refilled only after its last read (P = S-1, beta = 1)"),),
        cost=T_sc if schedules else T,
        unit="us",
        terms=terms,
        tie_break=("T_comp_us",),  # then menu order: deeper pipelines, TMA and G = 8 first
        bind_chip=lambda chip: chip_params(chip, dtype, calibration),
        program=lambda assignment, workload: program(assignment, workload, dtype),
        obligations=lambda template: proof_plan(template, dtype, calibration, schedules),
        options={"dtype": dtype, "calibration": calibration_id, **({"schedules": True} if schedules else {})},
        descriptor={"algorithm": "gemm",
                    "reuse": "tensor-core tiles staged by TMA or cp.async pipelines, split-K partial sums",
                    "placement": "grouped-M swizzled blocks, KS blocks per output tile",
                    "resources": ("smem", "registers", "tma", "tensor-cores"), "bounds": BOUNDS,
                    "calibrated": CALIBRATED + (SCHED_CALIBRATED if schedules else ()), "program": "triton",
                    "implicit": {} if schedules else {"SC": 0},  # the schedule a design without SC runs
                    **({"milp_split": "SC"} if schedules else {}),  # one MILP a schedule (solve.split)
                    "base": "gemm-tiling", "chip": proof_chip().name},
    )


def proof_chip() -> Chip:
    """The chip the proof fixes by default (its walls read Ms and the register budget)."""
    return get_chip("h200")


def program(assignment: Mapping[str, int], workload: Mapping[str, int], dtype: str):
    """The instance as a Triton program (imports triton/torch only here)."""
    from formloop.library.gemm_tiling_instance import TritonGemm  # noqa: PLC0415 (imports triton, torch)
    from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig  # noqa: PLC0415

    return TritonGemm(GemmPlan(TileConfig.from_assignment(assignment), int(workload["M"]), int(workload["N"]),
                               int(workload["K"]), dtype))


def proof_plan(template: Template, dtype: str, calibration: Mapping[str, float] | None = None,
               schedules: bool = False) -> ProofPlan:
    """The verifier's plan: chip parameters fixed to the proof chip's contract unless the proof keeps
    them symbolic (the walls read Ms and the register budget), M, N, K symbolic; the family's own
    index obligations as the checks."""
    chip_values = chip_params(proof_chip(), dtype, calibration)
    fixed = {p.name: chip_values[p.name] for p in template.params if p.payload.kind == "chip"}
    fixed["e"] = DTYPE_BYTES[dtype]
    return ProofPlan(
        fixed=fixed,
        fixed_reason=f"the walls read the {proof_chip().name} contract's shared memory and register budget and the "
                     "element size; they are fixed so K1/K3 stay decidable unless the proof is asked to keep chip "
                     "parameters symbolic; M, N, K stay symbolic",
        bounds={"index extents": "every M, N, K >= 1, one query per menu value"},
        checks=(lambda run: obligations(run.timeout_s),)
        + ((lambda run: sched_index.obligations(timeout_s=run.timeout_s)),) * bool(schedules),
    )


def obligations(timeout_s: float = 10.0) -> list[ObligationResult]:
    """The index obligations of the kernel family (declared in `gemm_tiling_index`), proved for
    every M, N, K >= 1 (Z3).

    split_k_partition: the KS ranges [k_lo, k_hi) the kernel computes cover [0, K) exactly once,
      so summing the KS partial tiles is the full reduction (the split-K reduction obligation).
    coverage / exact-once / no-phantom on M and N: every output element (i, j) is stored by exactly
      one tile and its store mask holds; no store lands outside C.
    swizzle_bijective: the grouped-M launch order maps the programs one-to-one onto the tiles.
    The schedules' obligations (SC = 1, 2: every tile and every (tile, k-step) computed by exactly
    one program, the stream-K fix-up summing every partial once) are the proof plan's second check
    (`gemm_tiling_sched_index.obligations`); families built on this one keep the data-parallel kernel."""
    out = [index.split_k_partition(tk, ks, timeout_s=timeout_s) for tk in Tk.decision.menu for ks in KS.decision.menu]
    for axis, tiles in zip(index.OUTPUT_AXES, (Tm.decision.menu, Tn.decision.menu)):
        for t in tiles:
            out += index.tile_cover(axis, t, timeout_s=timeout_s)
    out += [index.swizzle_bijective(g, timeout_s=timeout_s) for g in G.decision.menu]
    return out


def bound_class(terms: Mapping[str, float]) -> str:
    return "memory" if terms["T_mem_us"] >= terms["T_comp_us"] else "compute"
