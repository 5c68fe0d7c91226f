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
T_mem the workload's bytes at min(bw·eta_bw·run_eff, bytes in flight / latency) (run_eff: colreduce's strided
runs of RP·4 bytes, run / (run + 40 B); 1 elsewhere), T_comp waves × (t_start + lat_m +
steps × (t_iter + t_elem · elements per thread))."""
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
# fp32 values a tile element keeps live per thread (with its addresses and temporaries): set so that the designs C1
# admits compile without spills on sm_90 (tests/test_vecops_compile.py; the scan needs room for its tree).
LIVE = {"norm-stats": 3, "norm-apply": 3, "scan": 12, "colreduce": 6, "gather": 8}
US = 1e6
RUN_OVERHEAD = 40  # bytes: the DRAM cost of starting a strided run, as bytes of streaming (colreduce)

BC = decision("BC", (16, 32, 64, 128, 256, 512, 1024, 2048, 4096), doc="columns per tile")
RP = decision("RP", (1, 2, 4, 8, 16, 32, 64, 128), doc="rows per tile")
W = decision("W", (4, 1, 2, 8, 16), doc="warps per program (num_warps)")
SPLIT = decision("SPLIT", (1, 2, 4, 8, 16, 32, 64), doc="programs per row (chunks of the walked extent)")

R = param("R", doc="rows (the parallel extent)")
C = param("C", doc="columns (the walked extent)")
Bt = param("Bt", doc="DRAM bytes the kernel must move")
warps_sm, regs, regs_sm, n_sm, bw = rw.warps_sm, rw.regs, rw.regs_sm, rw.n_sm, rw.bw
eta_bw, lat_m, t_elem, t_iter, t_start, t_launch, alpha = (rw.eta_bw, rw.lat_m, rw.t_elem, rw.t_iter, rw.t_start,
                                                           rw.t_launch, rw.alpha)
CALIBRATED = ("eta_bw", "lat_m", "t_elem", "t_iter", "t_start", "t_launch", "alpha")


def _terms(kind: str):
    threads = 32 * W
    per_thread = ceildiv(RP * BC, threads)
    if kind in LOOPED:
        programs = ceildiv(R, RP) * SPLIT
        steps = ceildiv(ceildiv(C, SPLIT), BC)
    else:
        programs = ceildiv(R, RP) * ceildiv(C, BC)
        steps = 1
    occupancy = maximum(1, minimum(floordiv(warps_sm, W), floordiv(regs_sm, threads * (LIVE[kind] * per_thread + 32)),
                                   32))
    active = maximum(1, minimum(programs, n_sm * occupancy))
    waves = ceildiv(programs, n_sm * occupancy)
    pull = active * RP * BC * 4 / lat_m
    # colreduce reads runs of RP·4 contiguous bytes D2·4 apart: DRAM delivers a run at run / (run + RUN_OVERHEAD)
    # of the streaming rate (prior: 128 B runs measured 0.60 of the datasheet bandwidth on the H200, contiguous
    # streams ~0.78)
    run_eff = RP * 4 / (RP * 4 + RUN_OVERHEAD) if kind == "colreduce" else 1
    T_mem = Bt / minimum(bw * eta_bw * run_eff, pull) * US
    T_comp = waves * (t_start + lat_m + steps * (t_iter + t_elem * per_thread)) * US
    T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US
    return {"T": T, "T_mem_us": T_mem, "T_comp_us": T_comp, "programs": programs, "per_thread": per_thread}


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
        decisions=(BC, RP, W, SPLIT),
        params=(R, C, Bt, warps_sm, regs, regs_sm, n_sm, bw, *effs),
        scope=(Constraint("rates_positive", bw > 0, "scope", "the chip moves bytes"),),
        constraints=(
            Constraint("C1", LIVE[kind] * t["per_thread"] <= regs, "capacity", "the live fp32 tiles fit the registers"),
            Constraint("C2", RP * BC > 32 * (W - 1), "capacity", "every warp holds at least one element"),
            Constraint("C3", ((BC < 2 * C) | BC.eq(BC.decision.menu[0])) & ((RP < 2 * R) | RP.eq(1)), "layout",
                       "tiles no wider / taller than the extents' powers of two"),
            Constraint("C4", split_ok, "layout", "chunks only where the kind combines them, no more than tiles"),
            Constraint("C5", coalesced, "layout", "the contiguous tile side is >= 128 elements (or the whole extent)"),
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


def workload(rows: int, cols: int, nbytes: int) -> dict[str, int]:
    if rows < 1 or cols < 1 or nbytes < 0:
        raise InvalidInput("vecops workload (rows, cols, bytes)", (rows, cols, nbytes), "rows, cols >= 1, bytes >= 0")
    return {"R": int(rows), "C": int(cols), "Bt": int(nbytes)}


@functools.lru_cache(maxsize=512)
def solved_design(kind: str, rows: int, cols: int, nbytes: int, chip: str = "h200") -> dict[str, int]:
    """The MILP's design (BC, RP, W, SPLIT) for one workload."""
    sol = solve_milp(make(kind).formulate(workload(rows, cols, nbytes), get_chip(chip)))
    return {k: int(v) for k, v in sol.assignment.items()}


def proof_plan(template: Template, calibration: Mapping[str, float] | None = None) -> ProofPlan:
    """Coverage, exact-once, no-phantom of the column tiles (every BC) and row tiles (every RP)."""
    j, i = param("j", lower=None), param("i", lower=None)
    axes = ((IndexAxis("C", C, BC, ceildiv(C, BC), BC, j < C, floordiv(j, BC), j), BC),
            (IndexAxis("R", R, RP, ceildiv(R, RP), RP, i < R, floordiv(i, RP), i), RP))
    return rw.index_proof_plan(template, rw.chip_params(proof_chip(), calibration), axes,
                               "the walls read the proof chip's registers and warps; R, C symbolic")
