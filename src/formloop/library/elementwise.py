"""Fused elementwise chains over a tensor viewed as [M, N] ("elementwise"): one read of x, the chain in
fp32 registers, one write, in one Triton launch.

The chain is gemm-epilogue's operation vocabulary (formloop.library.gemm_epilogue_ops: relu, gelu
(erf/tanh), silu, sigmoid, tanh, leaky_relu, hardtanh, clamp, softplus, mish, scale by a number or a
vector, bias (row: a vector over the last dim [N], col: one value per row [M]), add/mul of a tensor of
x's shape, cast), applied to x instead of an accumulator; the emitted epilogue is the same source
(gemm_epilogue_emit.epilogue_source). Row operations (softmax, logsumexp) and glu are refused here: they
are the rowwise family's. N is the last dim of x (the axis a row vector broadcasts along), M = numel/N.

Decisions: BN columns per tile and BM rows per tile (powers of two), W warps.
Walls: C1 the fp32 tiles the chain holds (x, and one more with a tensor operand) fit `regs` per thread;
C2 no idle warp; C3 a tile no wider than N's power of two; C4 no taller than M's (or 1).
Cost (µs): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp); T_mem the SOL bytes
(x, out, the chain's tensors once) at min(bw·eta_bw, programs in flight / latency); T_comp waves ×
(t_start + t_elem·ops per thread), padded lanes included."""
from __future__ import annotations

import functools
from collections.abc import Mapping

from formloop.dtypes import dtype_bytes
from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param
from formloop.hw.chips import get_chip
from formloop.library import register_template
from formloop.library import rowwise as rw
from formloop.library.gemm_epilogue_ops import VALUE_DTYPES, EpilogueOp, chain_facts, chain_issues, chain_text, \
    parse_chain_text
from formloop.library.gemm_tiling_gpu import proof_chip
from formloop.solve import solve_milp
from formloop.template import Constraint, Template
from formloop.verify.certificate import ProofPlan
from formloop.verify.index import IndexAxis

NAME = "elementwise"
REFUSED = ("softmax", "logsumexp", "glu")
MAX_ELEMS = 2**31 - 1  # the emitted epilogue indexes rows × row stride in 32-bit integers
US = 1e6

BN = decision("BN", (16, 32, 64, 128, 256, 512, 1024, 2048, 4096), doc="columns per tile")
BM = decision("BM", (1, 2, 4, 8, 16, 32, 64), doc="rows per tile")
W = decision("W", (4, 1, 2, 8, 16), doc="warps per program (num_warps)")

M = param("M", doc="rows (numel / N)")
N = param("N", doc="columns (x's last dim: a row vector broadcasts along it)")
e = param("e", doc="bytes per element of x")
warps_sm, regs, regs_sm, n_sm, bw = rw.warps_sm, rw.regs, rw.regs_sm, rw.n_sm, rw.bw
eta_bw, lat_m, t_elem, t_start, t_launch, alpha = rw.eta_bw, rw.lat_m, rw.t_elem, rw.t_start, rw.t_launch, rw.alpha
CALIBRATED = ("eta_bw", "lat_m", "t_elem", "t_start", "t_launch", "alpha")


def parse_chain(chain: str | tuple[EpilogueOp, ...]) -> tuple[EpilogueOp, ...]:
    """A chain as its canonical text ('silu >> scale(by=2.0) >> bias(axis=row,name=b)') or ops; refused
    when it holds a row operation or breaks a chain rule."""
    ops = parse_chain_text(chain) if isinstance(chain, str) else tuple(chain)
    for op in ops:
        if op.kind in REFUSED:
            raise InvalidInput("elementwise operation", op.kind, "an elementwise operation (not softmax, logsumexp "
                               "or glu: those are the rowwise family's or a GEMM epilogue's)")
    issues = chain_issues(ops, "fp32")
    issues = [i for i in issues if i.field != "cast"]  # the output dtype is the option `out`, checked below
    if issues:
        i = issues[0]
        raise InvalidInput(f"elementwise chain op {i.index} {i.field}", i.value, i.allowed)
    return ops


def _terms(ops: tuple[EpilogueOp, ...], dtype: str, out: str):
    eo = dtype_bytes(out)  # the output dtype is an option: a constant of the template
    facts = chain_facts(ops, default_dtype=dtype)
    threads = 32 * W
    per_thread = ceildiv(BM * BN, threads)
    live = 4 * (1 + facts.tiles)  # x (and a tensor operand) plus the chain's temporaries: no spills on sm_90
    programs = ceildiv(M, BM) * ceildiv(N, BN)
    occupancy = maximum(1, minimum(floordiv(warps_sm, W), floordiv(regs_sm, threads * (live * per_thread + 32)), 32))
    active = maximum(1, minimum(programs, n_sm * occupancy))
    waves = ceildiv(programs, n_sm * occupancy)
    bytes_ = M * N * (e + eo) + M * N * facts.tile_bytes + N * facts.vec_row_bytes + M * facts.vec_col_bytes
    pull = active * BM * BN * (e + facts.tile_bytes) / lat_m
    T_mem = bytes_ / minimum(bw * eta_bw, pull) * US
    T_comp = waves * (t_start + lat_m + t_elem * per_thread * max(facts.ops, 1.0) / 4) * US
    T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US
    return {"T": T, "T_mem_us": T_mem, "T_comp_us": T_comp, "sol_bytes": bytes_, "programs": programs,
            "per_thread": per_thread}, live


@register_template(NAME)
def elementwise(chain: str = "relu", dtype: str = "bf16", out: str = "", calibration: Mapping[str, float] | None = None,
                calibration_id: str = "priors", pre: str = "exact") -> Template:
    """The fused chain `chain` over x of `dtype`, written as `out` (default: x's dtype)."""
    for field, value in (("dtype", dtype), ("out", out or dtype)):
        if value not in VALUE_DTYPES:
            raise InvalidInput(field, value, VALUE_DTYPES)
    if pre != "exact":
        raise InvalidInput("contract (--pre)", pre, ["exact"])
    ops = parse_chain(chain)
    t, live = _terms(ops, dtype, out or dtype)
    return Template(
        name=NAME,
        doc="a fused elementwise chain over [M, N] (Triton, one program per BM x BN tile)",
        decisions=(BN, BM, W),
        params=(M, N, e, warps_sm, regs, regs_sm, n_sm, bw, eta_bw, lat_m, t_elem, t_start, t_launch, alpha),
        scope=(Constraint("rates_positive", bw > 0, "scope", "the chip moves bytes"),
               Constraint("int32_index", M * N <= MAX_ELEMS, "scope", "numel <= 2^31-1 (32-bit row offsets)")),
        constraints=(
            Constraint("C1", live * t["per_thread"] <= regs, "capacity", "the chain's fp32 tiles fit the registers"),
            Constraint("C2", BM * BN > 32 * (W - 1), "capacity", "every warp holds at least one element"),
            Constraint("C3", (BN < 2 * N) | BN.eq(BN.decision.menu[0]), "layout", "no wider than N's power of two"),
            Constraint("C4", (BM < 2 * M) | BM.eq(1), "layout", "no taller than M's power of two"),
        ),
        preconditions=(Constraint("cover", BN * ceildiv(N, BN) >= N, "layout", "the column tiles cover a row"),),
        cost=t["T"],
        unit="us",
        terms={k: v for k, v in t.items() if k != "T"},
        tie_break=("T_comp_us", "per_thread"),
        bind_chip=lambda chip: {k: v for k, v in rw.chip_params(chip, calibration).items()
                                if k in {p.name for p in (warps_sm, regs, regs_sm, n_sm, bw, *_effs())}},
        program=lambda assignment, wl: program(ops, assignment, dtype, out or dtype),
        obligations=lambda template: proof_plan(template, dtype, out or dtype),
        options={"chain": chain_text(ops), "dtype": dtype, "out": out or dtype, "calibration": calibration_id},
        descriptor={"algorithm": NAME, "reuse": "none (streaming)", "placement": "one program per BM x BN tile",
                    "resources": ("registers",), "calibrated": CALIBRATED, "program": "triton", "shape": "M,N",
                    "chip": proof_chip().name},
    )


def _effs():
    return (eta_bw, lat_m, t_elem, t_start, t_launch, alpha)


def workload(rows: int, cols: int, dtype: str = "bf16") -> dict[str, int]:
    return {"M": int(rows), "N": int(cols), "e": dtype_bytes(dtype)}


def program(ops, assignment: Mapping[str, int], dtype: str, out: str):
    from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig  # noqa: PLC0415 (triton, torch)

    return ElementwiseProgram(ops, EwConfig.from_assignment(assignment), dtype, out)


@functools.lru_cache(maxsize=512)
def solved_design(chain: str, rows: int, cols: int, dtype: str = "bf16", out: str = "", chip: str = "h200"
                  ) -> dict[str, int]:
    """The MILP's design (BN, BM, W) for one workload."""
    t = elementwise(chain, dtype, out)
    sol = solve_milp(t.formulate(workload(rows, cols, dtype), get_chip(chip)))
    return {k: int(v) for k, v in sol.assignment.items()}


def proof_plan(template: Template, dtype: str, out: str) -> ProofPlan:
    """Coverage, exact-once, no-phantom of the column tiles (every BN) and row tiles (every BM)."""
    j, i = param("j", lower=None), param("i", lower=None)
    axes = ((IndexAxis("N", N, BN, ceildiv(N, BN), BN, j < N, floordiv(j, BN), j), BN),
            (IndexAxis("M", M, BM, ceildiv(M, BM), BM, i < M, floordiv(i, BM), i), BM))
    return rw.index_proof_plan(template, rw.chip_params(proof_chip()), axes,
                               "the walls read the proof chip's registers and warps; M, N symbolic",
                               e=dtype_bytes(dtype))
