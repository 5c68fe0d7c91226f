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
T_mem the workload's bytes at min(bw·eta_bw·run_eff, bytes in flight / latency), T_comp waves × (t_start +
rounds·lat_m + steps × (t_iter + t_elem · K · elements per thread)). run_eff prices DRAM runs: every tile row
(norms: BC·4 bytes of a row per step; colreduce: RP·4 bytes per reduced row) is a separate stream, delivered at
run / (run + 40 B) of the streaming rate (1 for gathers). rounds: a gather's element issues K loads (the window's
taps); a thread keeps IN_FLIGHT of them in flight, so a tile costs ceil(K · elements per thread / IN_FLIGHT)
dependent memory latencies (1 elsewhere). norm-stats also writes its partials (count, mean, M2: 12 B per row
chunk) that the combine reads back: R·SPLIT·24 B more at the streaming rate."""
from __future__ import annotations

import functools
from collections.abc import Mapping

from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param
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
LIVE = {"norm-stats": 3, "norm-apply": 4.25, "scan": 12, "colreduce": 6, "gather": 8}
US = 1e6
RUN_OVERHEAD = 40  # bytes: the DRAM cost of starting a strided run, as bytes of streaming (colreduce, norms)
# fp32 loads a gather thread keeps in flight before it must wait (registers beyond its live tiles; the 3x3 pool's
# 16-output, 16-warp tile compiled to 122 registers for sm_90: not all 144 tap loads can be outstanding)
IN_FLIGHT = 32
# L1 sectors (32 B) one SM returns per second (H200 prior: 4 per clock at 1.98 GHz). A per-tap gather load puts
# every lane on its own sector (Triton lays the lanes along the tile's rows: no axis is contiguous, sm_90 TTGIR);
# a window-row load's 32 lanes read 128 contiguous bytes: 5 sectors (4, +1 unaligned)
L1_SECTORS_S = 4 * 1.98e9
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
warps_sm, regs, regs_sm, n_sm, bw = rw.warps_sm, rw.regs, rw.regs_sm, rw.n_sm, rw.bw
eta_bw, lat_m, t_elem, t_iter, t_start, t_launch, alpha = (rw.eta_bw, rw.lat_m, rw.t_elem, rw.t_iter, rw.t_start,
                                                           rw.t_launch, rw.alpha)
CALIBRATED = ("eta_bw", "lat_m", "t_elem", "t_iter", "t_start", "t_launch", "alpha")


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
    # reads 4 input elements per output: 20 B), the streaming kinds 4 B
    pull = active * RP * BC * (Bt / (R * C) if kind == "gather" else 4) / lat_m
    # every tile row is its own DRAM stream: a norm reads BC·4 contiguous bytes of each of its RP rows per step,
    # colreduce RP·4 bytes of each reduced row, D2·4 apart. DRAM delivers a run at run / (run + RUN_OVERHEAD) of
    # the streaming rate (prior: colreduce's 128 B runs measured 0.60 of the datasheet bandwidth on the H200,
    # contiguous streams ~0.78)
    run = {"colreduce": RP * 4, "norm-stats": BC * 4, "norm-apply": BC * 4}.get(kind)
    run_eff = run / (run + RUN_OVERHEAD) if run is not None else 1
    rate = bw * eta_bw * run_eff
    T_mem = (Bt + (R * SPLIT * PARTIAL_BYTES if kind == "norm-stats" else 0)) / minimum(rate, pull) * US
    if kind in FILLED:   # SM fill: a looping program holds its slot for the whole walk; a part-filled last wave
        T_mem = T_mem * (waves * n_sm * occupancy / programs)   # streams at its programs' share of the rate
    # a gather's K taps per element: IN_FLIGHT loads per thread outstanding at once, the rest wait a latency
    loads = K + (KR - K) * GL if kind == "gather" else K
    rounds = ceildiv(loads * per_thread, IN_FLIGHT) if kind == "gather" else 1
    # the L1's sector rate: a per-tap gather reads a sector per lane and tap, a window-row one 5 per 32 elements
    sectors = R * C * (K + (KR * 5 / 32 - K) * GL) if kind == "gather" else 0
    T_l1 = sectors / (n_sm * L1_SECTORS_S) * US
    # (the latency rounds of resident programs overlap the L1's work: the slower of the two)
    T_comp = maximum(waves * (t_start + rounds * lat_m + steps * (t_iter + t_elem * loads * per_thread)) * US, T_l1)
    T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US
    return {"T": T, "T_mem_us": T_mem, "T_comp_us": T_comp, "programs": programs, "per_thread": per_thread,
            "waves": waves, **({"rounds": rounds, "T_l1_us": T_l1, "live": live} if kind == "gather" else {})}


def template_name(kind: str) -> str:
    return PREFIX + kind


def make(kind: str, calibration: Mapping[str, float] | None = None, calibration_id: str = "priors",
         pre: str = "exact") -> Template:
    """The vecops template of `kind` (fp32 data; the workload's bytes carry the element size)."""
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
        params=(R, C, Bt, K, KR, warps_sm, regs, regs_sm, n_sm, bw, *effs),
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


def workload(rows: int, cols: int, nbytes: int, taps: int = 1, row_taps: int = 0) -> dict[str, int]:
    """taps: loads per output element (a gather's window); row_taps: the elements per output a window-row
    gather reads (pool_row_taps; 0 where there is no such kernel)."""
    if rows < 1 or cols < 1 or nbytes < 0 or taps < 1 or row_taps < 0:
        raise InvalidInput("vecops workload (rows, cols, bytes, taps, row_taps)", (rows, cols, nbytes, taps, row_taps),
                           "rows, cols, taps >= 1, bytes, row_taps >= 0")
    return {"R": int(rows), "C": int(cols), "Bt": int(nbytes), "K": int(taps), "KR": int(row_taps)}


def pool_row_taps(kernel: tuple[int, int], stride: int, dilation: int) -> tuple[int, int]:
    """(Q, KH·Q·SW): a window-row max pool's runs per input row and elements read per output."""
    kh, kw = kernel
    q = -(-((kw - 1) * dilation + 1) // stride)
    return q, kh * q * stride


@functools.lru_cache(maxsize=512)
def solved_design(kind: str, rows: int, cols: int, nbytes: int, chip: str = "h200", taps: int = 1,
                  row_taps: int = 0) -> dict[str, int]:
    """The MILP's design (BC, RP, W, SPLIT, GL) for one workload (taps, row_taps: a gather's loads, workload)."""
    sol = solve_milp(make(kind).formulate(workload(rows, cols, nbytes, taps, row_taps), get_chip(chip)))
    return {k: int(v) for k, v in sol.assignment.items()}


def proof_plan(template: Template, calibration: Mapping[str, float] | None = None) -> ProofPlan:
    """Coverage, exact-once, no-phantom of the column tiles (every BC) and row tiles (every RP)."""
    j, i = param("j", lower=None), param("i", lower=None)
    axes = ((IndexAxis("C", C, BC, ceildiv(C, BC), BC, j < C, floordiv(j, BC), j), BC),
            (IndexAxis("R", R, RP, ceildiv(R, RP), RP, i < R, floordiv(i, RP), i), RP))
    return rw.index_proof_plan(template, rw.chip_params(proof_chip(), calibration), axes,
                               "the walls read the proof chip's registers and warps; R, C symbolic")
