"""Rotary position embedding in the rotate-half (neox / HF) form over rows of the head dim ("rope"): one read of
x, one write, in one Triton launch.

out = x · cos + rotate_half(x) · sin, rotate_half(x) = cat(−x[D/2:], x[:D/2]), over x viewed as [R, D] (R rows
of the head dim D, contiguous). Row r reads the table row p(r) = (r // P) mod Q of cos and sin ([Q, D] views
of the broadcast tables, any row stride): the tables are broadcast over P consecutive rows (the heads) and
repeat every P·Q rows (the batch). General tables: the two halves of cos (and of sin) may differ. Math in
fp32, one rounding on store; output dtype = x's dtype. (qk-norm-rope-kv fuses RoPE into the Qwen3 prologue
with HF's half tables [P, D/2] and a norm; this family takes any full [Q, D] cos/sin, as a model passes them.)

Decisions: RP rows per program (an [RP, HB] tile of pairs, HB = D/2 rounded up to a power of two, the tail
masked), W warps per program.
Walls: C1 the fp32 tiles a thread holds (the two halves of x, cos and sin of each half: LIVE = 6 per pair)
fit `regs` per thread; C2 no idle warp (RP·HB > 32·(W−1)); C3 no more rows per program than R's power of
two (or 1); C4 the expected registers (LIVE per pair + 32 addresses) fit one program's share of the register
file.
Cost (µs, memory-bound): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp). T_mem: the SOL
bytes (x read once, out written once, the Q table rows of cos and sin once: they stay in the L2) at
min(bw·eta_bw, pull); pull is Little's law over the programs in flight: each holds its x tile for one DRAM
latency plus its own issue time. T_comp: waves × that issue time (t_block + t_elem per pair element a
thread holds × OPS / 4, padded lanes included)."""
from __future__ import annotations

import functools
from collections.abc import Mapping

from formloop.dtypes import dtype_bytes
from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param
from formloop.hw.chips import get_chip
from formloop.library import elementwise as ew
from formloop.library import register_template
from formloop.library import rowwise as rw
from formloop.library.gemm_tiling_gpu import proof_chip
from formloop.solve import solve_milp
from formloop.template import Constraint, Template
from formloop.verify.certificate import ProofPlan
from formloop.verify.index import IndexAxis

NAME = "rope"
DTYPES = ("fp32", "bf16", "fp16")
LIVE = 6      # fp32 values per pair a thread holds: x's two halves, cos and sin of each half
OPS = 12      # per pair: 6 loads (x lo/hi, cos lo/hi, sin lo/hi), 4 multiply-adds, 2 stores
MAX_D = 8192  # one row's pairs fit one program's registers at 16 warps (C1, C4 at RP = 1)
US = 1e6

RP = decision("RP", (1, 2, 4, 8, 16, 32, 64), doc="rows (of the head dim) per program")
W = decision("W", (4, 1, 2, 8, 16), doc="warps per program (num_warps)")
R = param("R", doc="rows (numel / D)")
HB = param("HB", doc="pairs per row rounded up to a power of two (the tile's width)")
D = param("D", doc="head dim (even)")
Q = param("Q", doc="distinct table rows of cos and sin")
e = param("e", doc="bytes per element of x, out, cos and sin")
warps_sm, regs, regs_sm, n_sm, bw = rw.warps_sm, rw.regs, rw.regs_sm, rw.n_sm, rw.bw
eta_bw, lat_m, t_elem, t_launch, alpha, t_block = rw.eta_bw, rw.lat_m, rw.t_elem, rw.t_launch, rw.alpha, ew.t_block
CHIP_PARAMS = (warps_sm, regs, regs_sm, n_sm, bw, eta_bw, lat_m, t_elem, t_block, t_launch, alpha)


def sol_bytes(rows, d, q, elem):
    """x read once, out written once, the distinct cos and sin rows once (expressions or numbers)."""
    return 2 * rows * d * elem + 2 * q * d * elem


threads = 32 * W
per_thread = ceildiv(RP * HB, threads)
expect = LIVE * per_thread + 32
programs = ceildiv(R, RP)
_, active, waves = rw.resident(programs, W, expect)
bytes_ = sol_bytes(R, D, Q, e)
t_prog = t_block + t_elem * per_thread * OPS / 4   # one program's issue time, s
pull = active * RP * D * e / (lat_m + t_prog)
T_mem = bytes_ / minimum(bw * eta_bw, pull) * US
T_comp = waves * t_prog * US
COST = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US


@register_template(NAME)
def rope(dtype: str = "fp32", calibration: Mapping[str, float] | None = None, calibration_id: str = "priors",
         pre: str = "exact") -> Template:
    """Rotate-half RoPE over rows of the head dim for x, cos, sin of `dtype`."""
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    if pre != "exact":
        raise InvalidInput("contract (--pre)", pre, ["exact"])
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=(RP, W),
        params=(R, HB, D, Q, e, *CHIP_PARAMS),
        scope=(Constraint("rates_positive", bw > 0, "scope", "the chip moves bytes"),
               Constraint("pairs", (2 * HB >= D) & (HB < D), "scope", "HB is D/2 rounded up to a power of two"),
               Constraint("head_dim", D <= MAX_D, "scope", f"a head dim of at most {MAX_D}"),
               Constraint("int32_index", R * D <= ew.MAX_ELEMS, "scope", "numel <= 2^31-1")),
        constraints=(
            Constraint("C1", LIVE * per_thread <= regs, "capacity", "the fp32 pair tiles fit the registers"),
            Constraint("C2", RP * HB > 32 * (W - 1), "capacity", "every warp holds at least one pair"),
            Constraint("C3", (RP < 2 * R) | RP.eq(1), "layout", "no more rows per program than R's power of two"),
            Constraint("C4", expect <= regs_sm / threads, "capacity",
                       "the expected registers fit one program's share of the register file"),
        ),
        preconditions=(Constraint("cover", RP * ceildiv(R, RP) >= R, "layout", "the row tiles cover the rows"),),
        cost=COST,
        unit="us",
        terms={"T_mem_us": T_mem, "T_comp_us": T_comp, "sol_bytes": bytes_, "programs": programs,
               "per_thread": per_thread},
        tie_break=("T_comp_us", "per_thread"),
        bind_chip=lambda chip: chip_params(chip, calibration),
        program=lambda assignment, wl: program(assignment, dtype),
        obligations=lambda template: proof_plan(template, dtype),
        options={"dtype": dtype, "calibration": calibration_id},
        descriptor={"algorithm": NAME, "reuse": "none (streaming)", "placement": "one program per RP rows",
                    "resources": ("registers",), "program": "triton",
                    "shape": "R,D,Q", "chip": proof_chip().name},
    )


def chip_params(chip, calibration: Mapping[str, float] | None = None) -> dict[str, float]:
    """The elementwise family's chip values and priors (t_block included): a streaming pass like it."""
    names = {p.name for p in CHIP_PARAMS}
    return {k: v for k, v in ew.chip_params(chip, calibration).items() if k in names}


def pow2(n: int) -> int:
    """The least power of two >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def pairs_block(d: int) -> int:
    return pow2(d // 2)


def workload(rows: int, d: int, table_rows: int, dtype: str = "fp32") -> dict[str, int]:
    if d < 2 or d % 2 or d > MAX_D:
        raise InvalidInput("rope head dim", d, f"an even number from 2 to {MAX_D}")
    return {"R": int(rows), "HB": pairs_block(d), "D": int(d), "Q": int(table_rows), "e": dtype_bytes(dtype)}


def program(assignment: Mapping[str, int], dtype: str):
    from formloop.library.rope_kernel import RopeConfig, RopeProgram  # noqa: PLC0415 (triton, torch)

    return RopeProgram(RopeConfig.from_assignment(assignment), dtype)


@functools.lru_cache(maxsize=256)
def solved_design(rows: int, d: int, table_rows: int, dtype: str = "fp32", chip: str = "h200") -> dict[str, int]:
    """The MILP's design (RP, W) for one workload."""
    t = rope(dtype)
    sol = solve_milp(t.formulate(workload(rows, d, table_rows, dtype), get_chip(chip)))
    return {k: int(v) for k, v in sol.assignment.items()}


def predicted(rows: int, d: int, table_rows: int, dtype: str = "fp32", chip: str = "h200") -> dict[str, float]:
    """The model's terms for the MILP's design (µs, model) and the memory floor (SOL bytes at the copy bandwidth)."""
    t = rope(dtype)
    c = get_chip(chip)
    values = t.bind(workload(rows, d, table_rows, dtype), c)
    design = solved_design(rows, d, table_rows, dtype, chip)
    terms = t.evaluate_terms(design, values)
    floor = float(sol_bytes(rows, d, table_rows, dtype_bytes(dtype))) / c.bandwidth * US
    return {**design, **terms, "floor_us": floor}


def proof_plan(template: Template, dtype: str) -> ProofPlan:
    """Coverage, exact-once and no-phantom of the row tiles over R rows (every RP)."""
    i = param("i", lower=None)
    axis = IndexAxis("R", R, RP, ceildiv(R, RP), RP, i < R, floordiv(i, RP), i)
    return rw.index_proof_plan(template, chip_params(proof_chip()), ((axis, RP),),
                               "the walls read the proof chip's registers and warps; R, D, Q symbolic",
                               e=dtype_bytes(dtype))
