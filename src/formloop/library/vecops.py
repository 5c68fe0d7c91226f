"""Streaming vector kernels beyond one row per program ("vecops-<kind>"): split-statistics norms (group,
instance and batch norm), a row scan (cumsum), a strided-dim arg-reduction and index-computed gathers
(unfold, max pooling). Kernels: formloop.library.vecops_kernel.

Every kind walks a 2D view [R, C] in [RP, BC] tiles; SPLIT cuts the walked extent C into SPLIT chunks that
run as separate programs (a long reduction spread over the chip; the statistics are combined afterwards):
  norm-stats  x [rows = N·C, HW]: partial (count, mean, M2) per row chunk      bytes: x once
  norm-apply  x [N·C, HW] -> y = (x − mean)·rstd·w + b per row's statistic       bytes: x, y
  scan        x [R, C] -> inclusive prefix sum along C (a carry: SPLIT = 1)    bytes: x, y
  colreduce   argmax/argmin of [B, D1, D2] over D1: R = B·D2 outputs (RP of them contiguous per tile),
              C = D1 walked BC at a time (SPLIT = 1)                            bytes: x, indices
  gather      an output [R, C] whose elements are computed from input indices (no loop: a tile per program,
              SPLIT = 1); the workload gives the bytes (unfold: x and y; max pool: the windows and y)
Decisions: BC columns per tile, RP rows per tile, W warps, SPLIT chunks of the walked extent.
Walls: C1 the live fp32 tiles fit `regs` per thread; C2 no idle warp; C3 tiles no wider / taller than the
extent's power of two; C4 SPLIT only for the norm kinds and no more chunks than tiles; C5 coalesced: the
contiguous side of a tile holds >= 128 elements (32 for colreduce's output columns) or the whole extent.
Cost (µs, memory-bound, rowwise's priors): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp),
T_mem the workload's bytes at min(bw·eta_bw·run_eff, bytes in flight / latency), T_comp the slowest of T_lat =
waves × (t_start + rounds·lat_m + steps × (t_iter + t_elem · K · elements per thread)) and, for gathers and
colreduce, the SM's issue rate (T_issue: warps × the tile's sm_90 instruction count) and a gather's L1 line rate
(T_l1). run_eff prices DRAM runs: every tile row (norms: BC·E bytes of a row per step, E the stored element's
bytes; colreduce: a warp's 32·E B per reduced row) is a separate stream, delivered at run / (run + 40 B) of the
streaming rate (1 for gathers). rounds: a gather's element issues K loads (the window's taps); a thread keeps
IN_FLIGHT of them in flight, so a tile costs ceil(K · elements per thread / IN_FLIGHT) dependent memory
latencies; colreduce's unpipelined loop one per step (COL_SLOW: an empirical factor for warps all along the
columns) plus log2(W) for the block's slowest warp; 1 elsewhere. T_l1: a per-tap max-pool load spans min(RP, 32)
tile rows, a 128-B line each, at one line per clock (the 128x64x16-warp pool measured 484 µs on the H200,
L1-bound). norm-stats also writes its partials (count, mean, M2: 12 B per row chunk) that the combine reads back:
R·SPLIT·24 B more at the streaming rate."""
from __future__ import annotations

import functools
from collections.abc import Mapping

from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param, where
from formloop.hw.chips import get_chip
from formloop.library import register_template
from formloop.library import rowwise as rw
from formloop.library.gemm_tiling_gpu import proof_chip
from formloop.solve import solve_milp
from formloop.template import Constraint, Template
from formloop.verify.certificate import ProofPlan
from formloop.verify.index import IndexAxis

PREFIX = "vecops-"
KINDS = ("norm-stats", "norm-apply", "scan", "colreduce", "gather")
SPLITTABLE = ("norm-stats", "norm-apply")
LOOPED = ("norm-stats", "norm-apply", "scan", "colreduce")
# kinds whose DRAM time sees the SM fill (the scan's ModelNew kernel takes its rows from the tile, not this walk)
FILLED = ("norm-stats", "norm-apply", "colreduce")
# fp32 values a tile element keeps live per thread (with its addresses and temporaries): set so that the designs C1
# admits compile without spills on sm_90 (tests/test_vecops_compile.py; the scan needs room for its tree; norm-apply
# compiled to 168 registers at 32 elements per thread, 78 at 16).
# colreduce: sm_90 builds of its kernel hold 64 / 108-128 / 219-250 registers at 16 / 32 / 64 elements per thread,
# no spills (fp32 and bf16, 1-4 warps; benchmarks/colreduce_variants.py --registers): 3 per element plus the 32 added.
LIVE = {"norm-stats": 3, "norm-apply": 4.25, "scan": 12, "colreduce": 3, "gather": 8}
US = 1e6
RUN_OVERHEAD = 40  # bytes: the DRAM cost of starting a strided run, as bytes of streaming (colreduce, norms)
# fp32 loads a gather thread keeps in flight before it must wait (sm_90 SASS of the 3x3 pool's per-tap kernel: a
# one-warp 2x64 tile issues all 36 of its loads before the first max; 4x64 and 8x64 tiles (72, 144 loads) keep
# 23 and 46 in flight, then one more per max)
IN_FLIGHT = 36
# L1 lines (128 B) one SM resolves per second: one per clock (H200, 1.98 GHz). An L1 request costs a wavefront per
# distinct line its lanes touch (NVIDIA: "if not all cache lines ... can be accessed in a single wavefront, multiple
# wavefronts are created ... serialized"); the rate is what the H200 showed for scattered lanes (measured 2026-12-01,
# benchmarks/vector_ops.py --set --menu: the 128x64 16-warp per-tap pool, a line per lane, 484 µs for 115.6 M lines;
# the 8x64 one-warp tile, 8-9 lines a request, 133 µs for 29-33 M lines: 0.9 and 0.8-0.9 lines per clock).
# Lines per warp request: the per-tap loads put min(RP, 32) lanes on as many tile rows (sm_90 TTGIR of the pool:
# threadsPerWarp [min(RP, 32), 32 / min(RP, 32)], order [0, 1]), each row's lanes on one run (+1: a run crossing a
# line); a window-row load's 32 lanes read 128 contiguous bytes: two lines (unaligned)
L1_LINES_S = 1.98e9
# warp instructions one SM issues per second (4 schedulers x 1.98 GHz) and the instructions a warp spends per load
# of a tile element (sm_90 SASS): the per-tap pool 76 + ~10 per load (256 at 18 loads, 456 at 36, 816 at 72, 1552
# at 144), the window-row pool ~19 (416-432 at 24, 928-992 at 48: the runs' masks and the max over each run),
# colreduce's loop 226 per 16 loads (14: 64-bit addresses, the compare and two selects of the running argmax)
ISSUE_S = 4 * 1.98e9
INSTR = {"gather": (76, 10, 0, 19), "colreduce": (0, 14, 0, 14)}   # per warp, per load: per-tap; window-row
# colreduce programs whose warps all lie along the output columns (Triton's warpsPerCTA [1, W]: 32·W >= RP) and W >= 2
# measured 2.3x slower than every other layout with the same per-warp code (sm_90 SASS: the loop bodies are
# identical, 16 loads per step; same resident warps): 16x64x2 6902 µs, 16x128x4 6882, 16x256x8 6885, 16x512x16
# 6850 against 16x32x1 2973 and 32x128x8 2939 (argmax over dim 1 of [128, 4096, 4095], measured 2026-12-01 on the
# H200, benchmarks/vector_ops.py --set --menu). The cause is not found (no pipelining, no barrier, int64 addresses
# in all): an empirical factor on the loop's per-step latency, fitted to those rows. Only at BC 16: 32x64x2 2491 µs
# and 32x128x4 2441 against 16x64x2 6398 (benchmarks/colreduce_variants.py, 2026-12-02; a split-D1 loop likewise).
COL_SLOW = 2.3
LIVE_ROWS = 18  # a window-row gather's live registers per output element (sm_90: 4 outputs/thread 67, 8 -> 168)
PARTIAL_BYTES = 24  # a norm-stats row chunk's (count, mean, M2) fp32, written once and read back by the combine

BC = decision("BC", (16, 32, 64, 128, 256, 512, 1024, 2048, 4096), doc="columns per tile")
RP = decision("RP", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512), doc="rows per tile")
W = decision("W", (4, 1, 2, 8, 16), doc="warps per program (num_warps)")
SPLIT = decision("SPLIT", (1, 2, 4, 8, 16, 32, 64), doc="programs per row (chunks of the walked extent)")
GL = decision("GL", (0, 1), doc="gather loads: 0 one load per tap, 1 window-row runs (max pool: contiguous lanes)")

R = param("R", doc="rows (the parallel extent)")
C = param("C", doc="columns (the walked extent)")
Bt = param("Bt", doc="DRAM bytes the kernel must move")
K = param("K", doc="loads per output element (a gather's window taps; 1 elsewhere)")
KR = param("KR", lower=0, doc="elements per output the window-row loads read (KH·Q·SW; 0: no window-row kernel)")
Eb = param("E", doc="bytes per stored element (4 fp32, 2 bf16 / fp16; the registers hold fp32 either way)")
warps_sm, regs, regs_sm, n_sm, bw = rw.warps_sm, rw.regs, rw.regs_sm, rw.n_sm, rw.bw
eta_bw, lat_m, t_elem, t_iter, t_start, t_launch, alpha = (rw.eta_bw, rw.lat_m, rw.t_elem, rw.t_iter, rw.t_start,
                                                           rw.t_launch, rw.alpha)
CALIBRATED = ("eta_bw", "lat_m", "t_elem", "t_iter", "t_start", "t_launch", "alpha")


def _log2(d):
    """log2 of a power-of-two decision (a table over its menu)."""
    out = 0
    for v in sorted(d.decision.menu, reverse=True):
        out = where(d.eq(v), v.bit_length() - 1, out)
    return out


def _col_run():
    """colreduce: the contiguous bytes a warp reads of each reduced row. Triton spreads a tile row's RP columns
    over min(W, RP/32) warps (32 lanes each, more columns per lane where the warp has them): RP/W columns when all
    warps lie along the row, else 32 (or RP, fewer than a warp's lanes)."""
    return where(RP >= 32 * W, RP / W, minimum(RP, 32)) * Eb


def _terms(kind: str):
    threads = 32 * W
    per_thread = ceildiv(RP * BC, threads)
    live = LIVE[kind] + (LIVE_ROWS - LIVE[kind]) * GL if kind == "gather" else LIVE[kind]
    if kind in LOOPED:
        programs = ceildiv(R, RP) * SPLIT
        steps = ceildiv(ceildiv(C, SPLIT), BC)
    else:
        programs = ceildiv(R, RP) * ceildiv(C, BC)
        steps = 1
    occupancy, active, waves = rw.resident(programs, W, live * per_thread + 32)
    # bytes a tile element has in flight: a gather's element pulls its share of the workload's bytes (a 3x3/2 pool
    # reads 4 input elements per output: 20 B), the streaming kinds an element (E: 4 B fp32, 2 B bf16)
    pull = active * RP * BC * (Bt / (R * C) if kind == "gather" else Eb) / lat_m
    # every tile row is its own DRAM stream: a norm reads BC·E contiguous bytes of each of its RP rows per step,
    # colreduce a warp's run of each reduced row (_col_run), D2·E apart (more warps across the tile do not lengthen
    # it: 16x32x1 measured 2973 µs, 32x128x8 2939 on the H200, 2026-12-01; one warp over 64 columns does: 16x64x1
    # 2242 against 16x32x1 2402, 2026-12-02). DRAM delivers a run at run / (run + RUN_OVERHEAD) of the streaming
    # rate (prior: colreduce's 128 B runs measured 0.60 of the datasheet bandwidth on the H200, contiguous ~0.78)
    run = {"colreduce": _col_run(), "norm-stats": BC * Eb, "norm-apply": BC * Eb}.get(kind)
    run_eff = run / (run + RUN_OVERHEAD) if run is not None else 1
    rate = bw * eta_bw * run_eff
    T_mem = (Bt + (R * SPLIT * PARTIAL_BYTES if kind == "norm-stats" else 0)) / minimum(rate, pull) * US
    if kind in FILLED:   # SM fill: a looping program holds its slot for the whole walk; a part-filled last wave
        T_mem = T_mem * (waves * n_sm * occupancy / programs)   # streams at its programs' share of the rate
    # a gather's K taps per element: IN_FLIGHT loads per thread outstanding at once, the rest wait a latency
    loads = K + (KR - K) * GL if kind == "gather" else K
    rounds = ceildiv(loads * per_thread, IN_FLIGHT) if kind == "gather" else 1
    extra = {}
    if kind == "gather":   # the L1's line rate: per-tap loads cost a line per tile row a warp spans, window rows 2
        # (unfold, KR = 0: its tile rows are a window row's consecutive taps, not separate input rows; not measured:
        # a sector per lane at 4 per clock, 8 cycles a request, as before)
        lines = where(KR >= 1, K * minimum(RP + 1, 32) * (1 - GL) + KR * 2 * GL, 8 * K)
        T_l1 = R * C * lines / 32 / (n_sm * L1_LINES_S) * US
        extra = {"rounds": rounds, "T_l1_us": T_l1, "live": live}
    if kind == "colreduce":   # the loop is not pipelined (no async copies in the sm_90 TTGIR at num_stages 3): every
        # step waits one DRAM round trip; warps all along the columns measured COL_SLOW times longer per step
        # and a program retires with its slowest warp: the W warps' walks drift apart, priced (a prior) one more
        # round trip per doubling of W (a 16-warp program 4: 256x32x16 measured 4759 µs, 128x32x8 3334, 16x32x1 2973)
        rounds = steps * where((RP >= 32 * W) & (W >= 2) & BC.eq(16), COL_SLOW, 1) + _log2(W)
    # the SM's issue rate: every warp runs the tile's straight-line code, per warp and per loaded element of its tile
    # (padding included; gathers and colreduce)
    if kind in INSTR:
        i0, i1, j0, j1 = INSTR[kind]
        per_warp, per_load = (i0 + (j0 - i0) * GL, i1 + (j1 - i1) * GL) if kind == "gather" else (i0, i1)
        padded = ceildiv(R, RP) * RP * (ceildiv(C, BC) * BC if kind == "gather" else SPLIT * steps * BC)
        T_issue = (programs * W * per_warp + padded * loads * per_load / 32) / (n_sm * ISSUE_S) * US
        extra = {**extra, "T_issue_us": T_issue}
    T_lat = waves * (t_start + rounds * lat_m + steps * (t_iter + t_elem * loads * per_thread)) * US
    # (the latency rounds of resident programs overlap the L1's and the schedulers' work: the slowest of the three)
    T_comp = maximum(T_lat, *[extra[k] for k in ("T_l1_us", "T_issue_us") if k in extra]) if extra else T_lat
    T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US
    return {"T": T, "T_mem_us": T_mem, "T_comp_us": T_comp, "programs": programs, "per_thread": per_thread,
            "waves": waves, **extra}


def template_name(kind: str) -> str:
    return PREFIX + kind


def make(kind: str, calibration: Mapping[str, float] | None = None, calibration_id: str = "priors",
         pre: str = "exact") -> Template:
    """The vecops template of `kind` (fp32 registers; the workload's bytes and E carry the storage's element size)."""
    if kind not in KINDS:
        raise InvalidInput("vecops kind", kind, KINDS)
    if pre != "exact":
        raise InvalidInput("contract (--pre)", pre, ["exact"])
    t = _terms(kind)
    split_ok = (SPLIT <= ceildiv(C, BC)) if kind in SPLITTABLE else SPLIT.eq(1)
    coalesced = ((RP >= 32) | (RP >= R)) if kind == "colreduce" else ((BC >= 128) | (BC >= C))
    effs = (eta_bw, lat_m, t_elem, t_iter, t_start, t_launch, alpha)
    return Template(
        name=template_name(kind),
        doc=f"vecops {kind} over [R, C] (Triton, [RP, BC] tiles, SPLIT programs per row)",
        decisions=(BC, RP, W, SPLIT, GL),
        params=(R, C, Bt, K, KR, Eb, warps_sm, regs, regs_sm, n_sm, bw, *effs),
        scope=(Constraint("rates_positive", bw > 0, "scope", "the chip moves bytes"),),
        constraints=(
            Constraint("C1", t.get("live", LIVE[kind]) * t["per_thread"] <= regs,
                       "capacity", "the live fp32 tiles fit the registers"),
            Constraint("C2", RP * BC > 32 * (W - 1), "capacity", "every warp holds at least one element"),
            Constraint("C3", ((BC < 2 * C) | BC.eq(BC.decision.menu[0])) & ((RP < 2 * R) | RP.eq(1)), "layout",
                       "tiles no wider / taller than the extents' powers of two"),
            Constraint("C4", split_ok, "layout", "chunks only where the kind combines them, no more than tiles"),
            Constraint("C5", coalesced, "layout", "the contiguous tile side is >= 128 elements (or the whole extent)"),
            Constraint("C6", ((KR >= 1) | GL.eq(0)) if kind == "gather" else GL.eq(0), "layout",
                       "window-row loads only for a gather that has them (max pool)"),
        ),
        preconditions=(Constraint("cover", BC * ceildiv(C, BC) >= C, "layout", "the column tiles cover a row"),),
        cost=t["T"],
        unit="us",
        terms={k: v for k, v in t.items() if k != "T"},
        tie_break=("T_comp_us", "per_thread"),
        bind_chip=lambda chip: {k: v for k, v in rw.chip_params(chip, calibration).items()
                                if k in {p.name for p in (warps_sm, regs, regs_sm, n_sm, bw, *effs)}},
        obligations=lambda template: proof_plan(template, calibration),
        options={"kind": kind, "calibration": calibration_id},
        descriptor={"algorithm": template_name(kind), "reuse": "none (streaming)",
                    "placement": "one program per RP x BC tile (x SPLIT chunks)", "resources": ("registers",),
                    "calibrated": CALIBRATED, "program": "triton", "shape": "R,C", "chip": proof_chip().name},
    )


def _register(kind: str) -> None:
    def factory(calibration: Mapping[str, float] | None = None, calibration_id: str = "priors",
                pre: str = "exact") -> Template:
        return make(kind, calibration, calibration_id, pre)
    factory.__doc__ = f"The vecops {kind} family (calibration)."
    register_template(template_name(kind))(factory)


for _kind in KINDS:
    _register(_kind)


def workload(rows: int, cols: int, nbytes: int, taps: int = 1, row_taps: int = 0, elem: int = 4) -> dict[str, int]:
    """taps: loads per output element (a gather's window); row_taps: the elements per output a window-row
    gather reads (pool_row_taps; 0 where there is no such kernel); elem: bytes per stored element."""
    if rows < 1 or cols < 1 or nbytes < 0 or taps < 1 or row_taps < 0 or elem not in (1, 2, 4, 8):
        raise InvalidInput("vecops workload (rows, cols, bytes, taps, row_taps, elem)",
                           (rows, cols, nbytes, taps, row_taps, elem),
                           "rows, cols, taps >= 1, bytes, row_taps >= 0, elem in 1, 2, 4, 8")
    return {"R": int(rows), "C": int(cols), "Bt": int(nbytes), "K": int(taps), "KR": int(row_taps), "E": int(elem)}


def pool_row_taps(kernel: tuple[int, int], stride: int, dilation: int) -> tuple[int, int]:
    """(Q, KH·Q·SW): a window-row max pool's runs per input row and elements read per output."""
    kh, kw = kernel
    q = -(-((kw - 1) * dilation + 1) // stride)
    return q, kh * q * stride


@functools.lru_cache(maxsize=512)
def solved_design(kind: str, rows: int, cols: int, nbytes: int, chip: str = "h200", taps: int = 1,
                  row_taps: int = 0, *, elem: int = 4) -> dict[str, int]:
    """The MILP's design (BC, RP, W, SPLIT, GL) for one workload (taps, row_taps, elem: workload's)."""
    sol = solve_milp(make(kind).formulate(workload(rows, cols, nbytes, taps, row_taps, elem), get_chip(chip)))
    return {k: int(v) for k, v in sol.assignment.items()}


def proof_plan(template: Template, calibration: Mapping[str, float] | None = None) -> ProofPlan:
    """Coverage, exact-once, no-phantom of the column tiles (every BC) and row tiles (every RP)."""
    j, i = param("j", lower=None), param("i", lower=None)
    axes = ((IndexAxis("C", C, BC, ceildiv(C, BC), BC, j < C, floordiv(j, BC), j), BC),
            (IndexAxis("R", R, RP, ceildiv(R, RP), RP, i < R, floordiv(i, RP), i), RP))
    return rw.index_proof_plan(template, rw.chip_params(proof_chip(), calibration), axes,
                               "the walls read the proof chip's registers and warps; R, C symbolic")
