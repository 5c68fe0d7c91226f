"""Fused elementwise chains over a tensor viewed as [M, N] ("elementwise"): one read of x, the chain in
fp32 registers, one write, in one Triton launch.

The chain is gemm-epilogue's operation vocabulary (formloop.library.gemm_epilogue_ops: relu, gelu
(erf/tanh), silu, sigmoid, tanh, leaky_relu, hardtanh, clamp, softplus, mish, scale by a number or a
vector, bias (row: a vector over the last dim [N], col: one value per row [M]), add/mul of a tensor of
x's shape, cast), applied to x instead of an accumulator; the emitted epilogue is the same source
(gemm_epilogue_emit.epilogue_source). Row operations (softmax, logsumexp) and glu are refused here: they
are the rowwise family's. N is the last dim of x (the axis a row vector broadcasts along), M = numel/N.

isions: the layout F (0: a 2D walk of BM x BN tiles, masked on both dims with int64 row offsets;
1: the flat walk over the M·N contiguous elements in blocks of BF, masked only in the last block,
unmasked altogether when BF divides M·N (EVEN, a launch specialization)), BN columns per tile and BM
rows per tile (powers of two), BF elements per flat block, W warps, H the eviction hint of the flat
walk's loads and stores (0 none, 1 evict_first: streamed data is never read again).
Walls: C1 the fp32 values the chain holds (x, and one more with a tensor operand) fit `regs` per
thread; C2 no idle warp; C3 a tile no wider than N's power of two; C4 no taller than M's (or 1);
C5 the flat walk reads no broadcast vector (a row or column vector would need index division);
C6 a 2D design has the canonical BF = 1024, H = 0 (those decisions are the flat walk's), C7 a flat design
the canonical BN = 16, BM = 1; C8 coalesced: a 2D tile row holds >= 128 contiguous elements or the row;
C9 the expected registers fit a thread's share of the register file at one program per SM.
A flat design launched on an x whose rows are not contiguous runs the 2D walk with BN = min(N's power
of two, 1024), BM = BF / BN (same elements per program): the flat walk needs one contiguous span.
Cost (µs): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp). T_mem: the SOL bytes (x,
out, the chain's tensors once) at min(bw·eta_bw, pull); pull is Little's law over the programs in
flight: each holds its block's loads for one DRAM latency plus its own issue time (t_block + the
per-element work), so few large programs per SM and many small ones are both priced. T_comp: waves ×
that issue time, padded lanes included; the per-element work counts the chain's ops plus the index
work (2D: the int64 row offset and the 2D mask, 2 ops; flat: the 1D mask, 1 op, 0 when EVEN).
The hint is priced neutral (prior: no modelled gain; the measurement menu decides)."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from formloop.dtypes import dtype_bytes
from formloop.errors import InvalidInput
from formloop.expr import ceildiv, evaluate, decision, floordiv, maximum, minimum, mod, param, where
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
F = decision("F", (0, 1), doc="layout: 0 the 2D BM x BN tile walk, 1 the flat walk over M*N contiguous elements")
BF = decision("BF", (1024, 2048, 4096, 8192, 16384), doc="elements per block of the flat walk")
H = decision("H", (0, 1), doc="eviction hint of the flat walk: 0 none, 1 evict_first")
IDX_OPS_2D, IDX_OPS_FLAT = 2, 1  # index work per element: int64 row offset + 2D mask; the 1D mask

M = param("M", doc="rows (numel / N)")
N = param("N", doc="columns (x's last dim: a row vector broadcasts along it)")
e = param("e", doc="bytes per element of x")
warps_sm, regs, regs_sm, n_sm, bw = rw.warps_sm, rw.regs, rw.regs_sm, rw.n_sm, rw.bw
eta_bw, lat_m, t_elem, t_launch, alpha = rw.eta_bw, rw.lat_m, rw.t_elem, rw.t_launch, rw.alpha
t_block = param("t_block", kind="chip", integer=False, lower=0, doc="serial start cost of one streaming program, s")
CALIBRATED = ("eta_bw", "lat_m", "t_elem", "t_block", "t_launch", "alpha")
# prior: PyTorch's vectorized elementwise kernel (blocks of 512 fp32, 16 resident per SM: 32 KB in flight per SM)
# reaches ~3.8 TB/s on the H200, so a block's serial cost is small beside the ~1 µs DRAM latency
PRIORS = {"t_block": 0.1e-6}


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
    flat = F.eq(1)
    block = where(flat, BF, BM * BN)  # elements one program holds
    per_thread = ceildiv(block, threads)
    live = 4 * (1 + facts.tiles)  # x (and a tensor operand) plus the chain's temporaries: no spills on sm_90
    programs = where(flat, ceildiv(M * N, BF), ceildiv(M, BM) * ceildiv(N, BN))
    # resident programs: the expected registers ((x, the operand, one temporary) per element + addresses); the wall
    # C1 keeps the conservative `live` count against spills
    expect = (2 + facts.tiles) * per_thread + 32
    _, active, waves = rw.resident(programs, W, expect)
    bytes_ = M * N * (e + eo) + M * N * facts.tile_bytes + N * facts.vec_row_bytes + M * facts.vec_col_bytes
    idx = where(flat, where(mod(M * N, BF).eq(0), 0, IDX_OPS_FLAT), IDX_OPS_2D)
    t_prog = t_block + t_elem * per_thread * (max(facts.ops, 1.0) + idx) / 4  # one program's issue time, s
    pull = active * block * (e + facts.tile_bytes) / (lat_m + t_prog)
    T_mem = bytes_ / minimum(bw * eta_bw, pull) * US
    T_comp = waves * t_prog * US
    T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US
    return {"T": T, "T_mem_us": T_mem, "T_comp_us": T_comp, "sol_bytes": bytes_, "programs": programs,
            "per_thread": per_thread, "expect_regs": expect}, live


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
    facts = chain_facts(ops, default_dtype=dtype)
    vectors = bool(facts.vec_row_bytes or facts.vec_col_bytes)
    return Template(
        name=NAME,
        doc="a fused elementwise chain over [M, N] (Triton: BM x BN tiles, or flat blocks of BF elements)",
        decisions=(BN, BM, W, F, BF, H),
        params=(M, N, e, warps_sm, regs, regs_sm, n_sm, bw, eta_bw, lat_m, t_elem, t_block, t_launch, alpha),
        scope=(Constraint("rates_positive", bw > 0, "scope", "the chip moves bytes"),
               Constraint("int32_index", M * N <= MAX_ELEMS, "scope", "numel <= 2^31-1 (32-bit row offsets)")),
        constraints=(
            Constraint("C1", live * t["per_thread"] <= regs, "capacity", "the chain's fp32 tiles fit the registers"),
            Constraint("C2", where(F.eq(1), BF, BM * BN) > 32 * (W - 1), "capacity",
                       "every warp holds at least one element"),
            Constraint("C3", (BN < 2 * N) | BN.eq(BN.decision.menu[0]), "layout", "no wider than N's power of two"),
            Constraint("C4", (BM < 2 * M) | BM.eq(1), "layout", "no taller than M's power of two"),
            Constraint("C5", F.eq(0) if vectors else F >= 0, "layout", "the flat walk reads no broadcast vector"),
            Constraint("C6", F.eq(1) | (BF.eq(BF.decision.menu[0]) & H.eq(0)), "layout",
                       "a 2D design keeps the flat walk's decisions canonical"),
            Constraint("C7", F.eq(0) | (BN.eq(BN.decision.menu[0]) & BM.eq(1)), "layout",
                       "a flat design keeps the 2D walk's decisions canonical"),
            Constraint("C8", F.eq(1) | (BN >= 128) | (BN >= N), "layout",
                       "coalesced: a 2D tile's rows are >= 128 contiguous elements (or the whole row)"),
            Constraint("C9", t["expect_regs"] <= regs_sm / (32 * W), "capacity",
                       "the expected registers fit one program's share of the register file"),
        ),
        preconditions=(Constraint("cover", BN * ceildiv(N, BN) >= N, "layout", "the column tiles cover a row"),),
        cost=t["T"],
        unit="us",
        terms={k: v for k, v in t.items() if k != "T"},
        tie_break=("T_comp_us", "per_thread"),
        bind_chip=lambda chip: chip_params(chip, calibration),
        program=lambda assignment, wl: program(ops, assignment, dtype, out or dtype),
        obligations=lambda template: proof_plan(template, dtype, out or dtype),
        options={"chain": chain_text(ops), "dtype": dtype, "out": out or dtype, "calibration": calibration_id},
        descriptor={"algorithm": NAME, "reuse": "none (streaming)",
                    "placement": "one program per BM x BN tile (F=0) or per BF elements of the flat span (F=1)",
                    "resources": ("registers",), "calibrated": CALIBRATED, "program": "triton", "shape": "M,N",
                    "chip": proof_chip().name},
    )


def _effs():
    return (eta_bw, lat_m, t_elem, t_block, t_launch, alpha)


def chip_params(chip, calibration: Mapping[str, float] | None = None) -> dict[str, float]:
    """rowwise's chip values and priors this family reads, with its own t_block; `calibration` may set any
    CALIBRATED term."""
    calibration = dict(calibration or {})
    unknown = set(calibration) - set(CALIBRATED)
    if unknown:
        raise InvalidInput("calibration term", sorted(unknown), CALIBRATED)
    t_blk = float(calibration.pop("t_block", PRIORS["t_block"]))
    names = {p.name for p in (warps_sm, regs, regs_sm, n_sm, bw, *_effs())}
    return {**{k: v for k, v in rw.chip_params(chip, calibration).items() if k in names}, "t_block": t_blk}


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


L = param("L", doc="elements of the flat span (M·N)")
FLAT_EVEN = mod(L, BF).eq(0)  # the launch runs the unmasked body (EVEN) exactly when this holds


def flat_even(numel: int, block: int, condition=None) -> bool:
    """Whether the flat walk of `numel` elements in blocks of `block` launches unmasked: the same expression
    the proof reads (FLAT_EVEN), evaluated on numbers."""
    return bool(evaluate(FLAT_EVEN if condition is None else condition, {"L": int(numel), "BF": int(block)}))


def flat_axis(even=None) -> IndexAxis:
    """The flat walk as the kernel runs it: ⌈L/BF⌉ blocks, block b at b·BF; an access happens when it is
    inside the span (the masked body) or when the launch is EVEN (the unmasked body, no mask at all)."""
    k = param("k", lower=None)
    return IndexAxis("L", L, BF, ceildiv(L, BF), BF, (k < L) | (FLAT_EVEN if even is None else even),
                     floordiv(k, BF), k)


def proof_plan(template: Template, dtype: str, out: str, even=None) -> ProofPlan:
    """Coverage, exact-once, no-phantom of the column tiles (every BN), the row tiles (every BM) and the
    flat walk (every BF, masked and EVEN-unmasked); `even` replaces the EVEN condition (tests only)."""
    j, i = param("j", lower=None), param("i", lower=None)
    axes = ((IndexAxis("N", N, BN, ceildiv(N, BN), BN, j < N, floordiv(j, BN), j), BN),
            (IndexAxis("M", M, BM, ceildiv(M, BM), BM, i < M, floordiv(i, BM), i), BM),
            (flat_axis(even), BF))
    return rw.index_proof_plan(template, chip_params(proof_chip()), axes,
                               "the walls read the proof chip's registers and warps; M, N, L symbolic",
                               e=dtype_bytes(dtype))
