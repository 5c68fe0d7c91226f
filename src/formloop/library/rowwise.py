"""Row-wise operators over a 2D view [R, C] with a contiguous last dim ("rowwise-<op>"): normalizations,
softmax, row reductions and arg-reductions, one Triton program per RP rows.

Ops (ROW_OPS): rmsnorm (weight, eps), rmsnorm-residual (residual = x + residual; y = rmsnorm(residual):
returns y and the updated residual, as Qwen3 does), layernorm (weight, bias, eps), softmax,
log-softmax, sum, mean, max, min, argmax, argmin (int64 index of the first extreme), logsumexp, and
groupnorm (a layernorm over rows of [N·G, C/G·HW] whose affine is per channel: instance norm is G = C).
Each op is its own template (own hash, own proof); they share decisions, walls and cost.

Decisions:
  BC  columns per tile (BLOCK, a power of two): BC >= C holds the row in registers (one read);
      BC < C loops over the row (norms and softmax read it twice, the second pass from the L2)
  RP  rows per program: an [RP, BC] tile; short rows want several per program
  W   warps per program (num_warps)
  S   pipeline stages of the column loop (num_stages; 1 when the row is one tile)
Walls: C1 registers: the live fp32 tiles (LIVE per op, LIVE_LOOP when looping) spread over 32·W threads
fit `regs` per thread;
C2 no idle warp: RP·BC >= 32·W; C3 the tile is no wider than the row rounded up to a power of two
(BC < 2C, or the narrowest tile); C4 rows per program <= R (or 1); C5 cross-warp scratch of the
reductions fits shared memory; C6 stages only with a loop (S = 1 when BC >= C); C7 the live tiles plus ~32
address registers fit the register file's share of a thread of one program (65536 / (32·W): 128 at
W = 16, where the 255 cap of C1 does not bind; sm_90 spilled the 1024 x 32 x 16-warp row sum and the
2048 x 16 x 16-warp looped softmax that C1 alone admitted); C8 (fp32 sum and mean) at most FP32_SUM_CHAIN
tile steps of sequential partials per lane, so that the candidate's rounding stays below the tolerance's order.

Cost (µs, memory-bound): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp).
T_mem: the op's DRAM bytes (SOL bytes: x read once, outputs written once, weights once) at
min(bw·eta_bw, active programs' pull): an SM pulls the tiles its programs have in flight
(RP·BC·e, times S−1 prefetched with a loop) per DRAM latency (Little's law); a looped second pass
re-reads the row from the L2 at bw_l2 while the rows in flight (active programs x RP rows) fit the
L2, else from DRAM (a third pass of bytes at the DRAM rate). T_comp: waves × (t_start + exposed
latency + steps × (t_iter + t_elem · elements per thread)), padded lanes included, so a tile much
wider than the row costs; the exposed latency is one DRAM round trip per pass over the row (per tile
step without a pipeline).
The efficiency terms are priors (CALIBRATED), to be fitted on the H200 like the attention family."""
from __future__ import annotations

import functools
from collections.abc import Mapping

from formloop.dtypes import dtype_bytes
from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param, where
from formloop.hw.chips import Chip, get_chip
from formloop.library import register_template
from formloop.library.gemm_tiling_gpu import CONTRACT_CHIPS, proof_chip
from formloop.solve import solve_milp
from formloop.template import Constraint, Template, with_calibration
from formloop.verify.certificate import ProofPlan
from formloop.verify.index import INDEX_OBLIGATIONS, IndexAxis, check_index

PREFIX = "rowwise-"
ROW_OPS = ("rmsnorm", "rmsnorm-residual", "layernorm", "groupnorm", "softmax", "log-softmax", "sum", "mean", "max",
           "min", "argmax", "argmin", "logsumexp")
NORMS = ("rmsnorm", "rmsnorm-residual", "layernorm", "groupnorm")
TWO_PASS = (*NORMS, "softmax", "log-softmax")  # ops that read the row again to write it
REDUCTIONS = ("sum", "mean", "max", "min", "argmax", "argmin", "logsumexp")
DTYPES = ("fp32", "bf16", "fp16")
INDEX_BYTES = 8
# fp32 tiles an op keeps live per element (x, and residual / weight / bias / running index / temporaries):
# set so that the designs C1 admits compile without spills on sm_90 (tests/test_vector_compile.py).
LIVE = {"rmsnorm": 2, "rmsnorm-residual": 3, "layernorm": 3, "groupnorm": 4, "softmax": 2, "log-softmax": 2,
        "sum": 2, "mean": 2, "max": 2, "min": 2, "argmax": 8, "argmin": 8, "logsumexp": 3}
# ... when the program loops over the row: the online max/sum keep two accumulator tiles beside x and the
# new max (softmax, log-softmax, logsumexp); the other ops' loops hold what their one-tile path holds
LIVE_LOOP = {**LIVE, "softmax": 4, "log-softmax": 4, "logsumexp": 5}
# C8: tile steps of an fp32 row sum's sequential partials. Each lane adds C/BC values in order, then a tree joins
# the lanes. KernelBench's row_sum (32768 x 32768, allclose 1e-4 against torch.sum, itself up to 1.2e-4 off the
# float64 sum) failed 8-11 rows per seed at 512 steps (BC 64), 0-1 at 128 (BC 256), 0 at 16 (BC 2048): 4 seeds on
# the H200, benchmarks/row_sum_error.py. (fp64 partials fail none but ran at 0.65-0.89x of torch.sum.)
FP32_SUM_CHAIN = 16
REGS = 128  # fp32 values per thread for the live tiles (255-register cap less addresses and state)
US = 1e6

BC = decision("BC", (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384), doc="columns per tile (BLOCK)")
RP = decision("RP", (1, 2, 4, 8, 16, 32), doc="rows per program")
W = decision("W", (4, 1, 2, 8, 16), doc="warps per program (num_warps)")
S = decision("S", (1, 2, 3, 4), doc="pipeline stages of the column loop (num_stages)")

R = param("R", doc="rows")
C = param("C", doc="columns (the reduced, contiguous last dim)")
e = param("e", doc="bytes per element of x and the outputs")
Ms = param("Ms", kind="chip", doc="shared memory a program may use, bytes")
warps_sm = param("warps_sm", kind="chip", doc="resident warps per SM")
regs = param("regs", kind="chip", doc="fp32 registers per thread for the live tiles")
regs_sm = param("regs_sm", kind="chip", doc="32-bit registers per SM")
n_sm = param("n_sm", kind="chip", doc="streaming multiprocessors")
bw = param("bw", kind="chip", integer=False, lower=None, doc="DRAM bandwidth (measured copy), bytes/s")
l2 = param("l2", kind="chip", doc="L2 cache bytes")


def _eff(name: str, doc: str):
    return param(name, kind="chip", integer=False, lower=0, doc=doc)


eta_bw = _eff("eta_bw", "achieved fraction of the copy bandwidth when enough bytes are in flight")
lat_m = _eff("lat_m", "DRAM latency an SM's loads in flight must cover, s")
bw_l2 = _eff("bw_l2", "bytes/s one SM re-reads a row from the L2 (second pass)")
t_elem = _eff("t_elem", "cost per tile element a thread holds, per step, s")
t_iter = _eff("t_iter", "fixed cost of one tile step (reductions across warps), s")
t_start = _eff("t_start", "fixed cost of one program, s")
t_launch = _eff("t_launch", "cost of one kernel launch inside a CUDA graph, s")
alpha = _eff("alpha", "fraction of the shorter of T_mem, T_comp that is not hidden")

CALIBRATED = ("eta_bw", "lat_m", "bw_l2", "t_elem", "t_iter", "t_start", "t_launch", "alpha")
PRIORS = {"eta_bw": 0.9, "lat_m": 1.0e-6, "bw_l2": 40e9, "t_elem": 2e-9, "t_iter": 150e-9, "t_start": 0.5e-6,
          "t_launch": 2.0e-6, "alpha": 0.3}


def sol_bytes(op: str, rows, cols, elem):
    """DRAM bytes the op cannot avoid (expressions or numbers): x once, outputs once, vectors once."""
    x = rows * cols * elem
    if op == "rmsnorm":
        return 2 * x + cols * elem
    if op == "rmsnorm-residual":
        return 4 * x + cols * elem  # x, residual in; y, residual out
    if op in ("layernorm", "groupnorm"):
        return 2 * x + 2 * cols * elem  # groupnorm: a bound (its affine vectors hold channels, not columns)
    if op in ("softmax", "log-softmax"):
        return 2 * x
    return x + rows * (INDEX_BYTES if op in ("argmax", "argmin") else elem)


def long_fp32_sum(op: str, dtype: str) -> bool:
    """fp32 row sums and means, which wall C8 keeps short (FP32_SUM_CHAIN)."""
    return op in ("sum", "mean") and dtype == "fp32"


def resident(programs, warps, regs_per_thread):
    """The streaming families' wave terms: (programs resident per SM (warps and the register file, at most
    32), programs active at once, waves). `regs_per_thread`: live values per thread plus ~32 registers of
    addresses. Expressions (or numbers) in, expressions out."""
    occupancy = maximum(1, minimum(floordiv(warps_sm, warps), floordiv(regs_sm, 32 * warps * regs_per_thread), 32))
    return occupancy, maximum(1, minimum(programs, n_sm * occupancy)), ceildiv(programs, n_sm * occupancy)


def _terms(op: str):
    tiles = ceildiv(C, BC)
    programs = ceildiv(R, RP)
    threads = 32 * W
    per_thread = ceildiv(RP * BC, threads)
    looped = tiles > 1
    _, active, waves = resident(programs, W, LIVE[op] * per_thread + 32)   # live tiles + addresses per thread
    bytes_ = sol_bytes(op, R, C, e)
    in_flight = RP * BC * e * where(looped, maximum(S - 1, 1), 1)
    pull = active * in_flight / lat_m
    T_dram = bytes_ / minimum(bw * eta_bw, pull)
    second = R * C * e if op in TWO_PASS else 0  # rmsnorm-residual re-reads the residual it stored
    # the second pass hits the L2 while the rows in flight fit it, else it is a second DRAM read
    fits = active * RP * C * e <= l2
    T_l2 = where(looped, where(fits, second / (minimum(active, n_sm) * bw_l2), second / minimum(bw * eta_bw, pull)), 0)
    T_mem = (T_dram + T_l2) * US
    passes = 2 if op in TWO_PASS else 1
    steps = where(looped, passes * tiles, 1)
    # exposed latency: one DRAM round trip per pass over the row when the loop prefetches (S > 1), one per
    # tile step without a pipeline; a row in one tile waits once
    exposed = where(looped, where(S > 1, passes, steps), 1) * lat_m
    T_comp = waves * (t_start + exposed + steps * (t_iter + t_elem * per_thread)) * US
    T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US
    scratch = 2 * RP * W * 4 * (2 if op in ("argmax", "argmin", "layernorm", "groupnorm") else 1)
    return {"T": T, "T_mem_us": T_mem, "T_comp_us": T_comp, "sol_bytes": bytes_, "programs": programs,
            "smem_bytes": scratch, "per_thread": per_thread}


def chip_params(chip: Chip, calibration: Mapping[str, float] | None = None) -> dict[str, float]:
    if chip.name not in CONTRACT_CHIPS:
        raise InvalidInput("chip", chip.name, CONTRACT_CHIPS, fix="the Triton family's contract assumes Hopper")
    values = {"Ms": chip.smem_per_block, "warps_sm": chip.warps_per_sm, "regs": REGS, "l2": chip.l2_bytes,
              "regs_sm": chip.registers_per_sm or 65536, "n_sm": chip.sm_count,
              "bw": chip.bandwidth, **PRIORS}
    return with_calibration(values, calibration, CALIBRATED)


def template_name(op: str) -> str:
    return PREFIX + op


def make(op: str, dtype: str = "bf16", calibration: Mapping[str, float] | None = None,
         calibration_id: str = "priors", pre: str = "exact") -> Template:
    """The rowwise template of `op` for inputs of `dtype`."""
    if op not in ROW_OPS:
        raise InvalidInput("rowwise op", op, ROW_OPS)
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    if pre != "exact":
        raise InvalidInput("contract (--pre)", pre, ["exact"])
    t = _terms(op)
    live = where(ceildiv(C, BC) > 1, LIVE_LOOP[op], LIVE[op])   # fp32 tiles per element (C1, C7)
    narrowest = BC.decision.menu[0]
    return Template(
        name=template_name(op),
        doc=f"row-wise {op} over [R, C] (Triton, one program per RP rows)",
        decisions=(BC, RP, W, S),
        params=(R, C, e, Ms, warps_sm, regs, regs_sm, n_sm, bw, l2, eta_bw, lat_m, bw_l2, t_elem, t_iter, t_start,
                t_launch, alpha),
        scope=(Constraint("rates_positive", bw > 0, "scope", "the chip moves bytes"),),
        constraints=(
            Constraint("C1", live * t["per_thread"] <= regs, "capacity",
                       "the live fp32 tiles fit the registers"),
            Constraint("C2", RP * BC > 32 * (W - 1), "capacity", "every warp holds at least one element"),
            Constraint("C3", (BC < 2 * C) | BC.eq(narrowest), "layout",
                       "the tile is no wider than the row's power of two"),
            Constraint("C4", (RP <= R) | RP.eq(1), "layout", "a program's rows exist"),
            Constraint("C5", t["smem_bytes"] <= Ms, "capacity", "the cross-warp reduction scratch fits"),
            Constraint("C6", (BC < C) | S.eq(1), "schedule", "stages only when the program loops over the row"),
            Constraint("C7", live * t["per_thread"] + 32
                       <= regs_sm / (32 * W), "capacity",
                       "the live tiles and addresses fit one program's share of the register file"),
            *((Constraint("C8", (ceildiv(C, BC) <= FP32_SUM_CHAIN) | BC.eq(BC.decision.menu[-1]), "precision",
                          "an fp32 sum's lanes add at most FP32_SUM_CHAIN tiles in order (or the widest tile)"),)
              if long_fp32_sum(op, dtype) else ()),
        ),
        preconditions=(
            Constraint("row_cover", BC * ceildiv(C, BC) >= C, "layout", "the column tiles cover the row"),
        ),
        cost=t["T"],
        unit="us",
        terms={k: v for k, v in t.items() if k != "T"},
        tie_break=("T_comp_us", "smem_bytes"),
        bind_chip=lambda chip: chip_params(chip, calibration),
        program=lambda assignment, wl: program(op, assignment, wl, dtype),
        obligations=lambda template: proof_plan(template, dtype, calibration),
        options={"dtype": dtype, "calibration": calibration_id},
        descriptor={"algorithm": template_name(op), "reuse": "the row held in registers (or re-read from the L2)",
                    "placement": "one program per RP rows", "resources": ("registers",), "calibrated": CALIBRATED,
                    "program": "triton", "shape": "R,C", "chip": proof_chip().name, "op": op},
    )


def _register(op: str) -> None:
    def factory(dtype: str = "bf16", calibration: Mapping[str, float] | None = None, calibration_id: str = "priors",
                pre: str = "exact") -> Template:
        return make(op, dtype, calibration, calibration_id, pre)
    factory.__doc__ = f"The rowwise {op} family (dtype, calibration)."
    register_template(template_name(op))(factory)


for _op in ROW_OPS:
    _register(_op)


def workload(rows: int, cols: int, dtype: str = "bf16") -> dict[str, int]:
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    return {"R": int(rows), "C": int(cols), "e": dtype_bytes(dtype)}


def program(op: str, assignment: Mapping[str, int], wl: Mapping[str, int], dtype: str):
    """The instance as a Triton program (imports triton/torch only here)."""
    from formloop.library.rowwise_kernel import RowConfig, RowwiseProgram  # noqa: PLC0415 (imports triton, torch)

    return RowwiseProgram(op, RowConfig.from_assignment(assignment), int(wl["R"]), int(wl["C"]), dtype)


def column_axis() -> IndexAxis:
    """The column loop as the kernel walks it: ⌈C/BC⌉ tiles, tile b at b·BC, masked to col < C."""
    j = param("j", lower=None, doc="a column")
    return IndexAxis("C", C, BC, ceildiv(C, BC), BC, j < C, floordiv(j, BC), j)


def row_axis() -> IndexAxis:
    """The rows of the programs: ⌈R/RP⌉ programs, program p at p·RP, masked to row < R."""
    i = param("i", lower=None, doc="a row")
    return IndexAxis("R", R, RP, ceildiv(R, RP), RP, i < R, floordiv(i, RP), i)


def replay_axis(tile: int, extent: int, index: int) -> tuple[set[str], str]:
    """The masked tile walk on numbers: which indices the tiles touch, and what is wrong at `index`."""
    tiles = -(-extent // tile)
    seen = [b * tile + r for b in range(tiles) for r in range(tile) if b * tile + r < extent]
    kinds = set()
    if 0 <= index < extent and index not in seen:
        kinds.add("missing")
    if seen.count(index) > 1:
        kinds.add("duplicate")
    if any(c < 0 or c >= extent for c in seen):
        kinds.add("outside")
    return kinds, f"extent {extent}, tile {tile}: {tiles} tiles touch {len(seen)} indices"


def index_proof_plan(template: Template, values: Mapping[str, float], axes, reason: str,
                     e: int | None = None) -> ProofPlan:
    """Coverage, exact-once and no-phantom of each masked tile walk in `axes` ((IndexAxis, tile
    decision) pairs) at every value of its tile's menu, replayed on numbers when one fails; the
    template's chip parameters fixed to `values` (and the element size to `e` when given)."""
    fixed = {p.name: values[p.name] for p in template.params if p.payload.kind == "chip"}
    if e is not None:
        fixed["e"] = e
    replay = lambda ob, name, tile, extent, index: replay_axis(tile, extent, index)  # noqa: E731

    def index_checks(run):
        return [check_index(axis, ob, int(t), replay=replay, timeout_s=run.timeout_s)
                for axis, dec in axes for t in dec.decision.menu for ob in INDEX_OBLIGATIONS]

    return ProofPlan(fixed=fixed, fixed_reason=reason,
                     bounds={"index extents": "every extent >= 1, one query per menu value"}, checks=(index_checks,))


def proof_plan(template: Template, dtype: str, calibration: Mapping[str, float] | None = None) -> ProofPlan:
    """Coverage, exact-once and no-phantom of the column walk (every BC) and the row split (every RP),
    for every R and C; chip parameters fixed to the proof chip."""
    return index_proof_plan(template, chip_params(proof_chip(), calibration), ((column_axis(), BC), (row_axis(), RP)),
                            "the walls read the proof chip's registers and warps and the element size; R and C stay "
                            "symbolic", e=dtype_bytes(dtype))


@functools.lru_cache(maxsize=512)
def solved_design(op: str, rows: int, cols: int, dtype: str = "bf16", chip: str = "h200") -> dict[str, int]:
    """The MILP's design (BC, RP, W, S) for one workload, cached: what callers launch with
    (rowwise_kernel.RowConfig.from_assignment)."""
    t = make(op, dtype)
    sol = solve_milp(t.formulate(workload(rows, cols, dtype), get_chip(chip)))
    return {k: int(v) for k, v in sol.assignment.items()}
