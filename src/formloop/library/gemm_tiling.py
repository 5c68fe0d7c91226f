"""The shared-memory tiling template for C = A·B (seed 000, Listing 1 and Appendix A).

A thread block computes a Tm×Tn tile of C. For each k-tile it copies a Tm×Tk tile of A and a
Tk×Tn tile of B into one of S shared-memory slots, waits at a leading barrier, computes from the
slot, and optionally waits at a trailing barrier (beta = 1) before the slot is refilled. Loads of
k-tile p+P are issued while tile p is consumed (prefetch distance P).

Contracts (which C3 the solver is given; the verifier's lifetime precondition is always exact):
  exact  — P <= S - 2 + beta (the weakest safe condition)
  strong — exact and beta = 1 (sound, loses designs that drop the barrier)
  weak   — P <= S - 1 (ignores the barrier; admits racy designs)
"""
from __future__ import annotations

from collections.abc import Mapping

from formloop.dtypes import KERNEL_DTYPES, dtype_bytes
from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, maximum, param, where
from formloop.hw.chips import Chip, get_chip
from formloop.library import gemm_tiling_program, register_template
from formloop.template import Constraint, Template

NAME = "gemm-tiling"
CONTRACTS = ("exact", "strong", "weak")
DTYPE_BYTES = {d: dtype_bytes(d) for d in KERNEL_DTYPES}  # a view of formloop.dtypes: the types it offers

Tm = decision("Tm", (16, 32, 64, 128, 256), doc="rows of the output tile a block computes")
Tn = decision("Tn", (16, 32, 64, 128, 256), doc="columns of the output tile a block computes")
Tk = decision("Tk", (8, 16, 32, 64), doc="depth of one reduction (k) tile staged in shared memory")
S = decision("S", (1, 2, 3), doc="shared-memory slots (pipeline stages)")
P = decision("P", (0, 1, 2), doc="prefetch distance: k-tile p+P is loaded while tile p is consumed")
beta = decision("beta", (0, 1), doc="1 if a trailing barrier follows each compute phase")

M = param("M", doc="rows of A and C")
N = param("N", doc="columns of B and C")
K = param("K", doc="reduction extent")
e = param("e", doc="bytes per element (4 for fp32)")
Ms = param("Ms", kind="chip", doc="shared memory a block may use, bytes")
R_acc = param("R_acc", kind="chip", doc="accumulator elements a block may hold")
n_sm = param("n_sm", kind="chip", doc="streaming multiprocessors")
bw = param("bw", kind="chip", integer=False, lower=None, doc="DRAM bandwidth, bytes/s")
flops = param("flops", kind="chip", integer=False, lower=None, doc="peak rate for the data type, FLOP/s")
t_bar = param("t_bar", kind="chip", integer=False, lower=0, doc="one barrier, seconds")

US = 1e6

smem_bytes = S * e * (Tm * Tk + Tk * Tn)
blocks = ceildiv(M, Tm) * ceildiv(N, Tn)
t_block = 2 * Tm * Tn * K / (flops / n_sm) + ceildiv(K, Tk) * (1 + beta) * t_bar
T_comp = ceildiv(blocks, n_sm) * t_block * US
# A is re-read once per output-tile column, B once per output-tile row; C is written once.
T_mem = (M * K * e * ceildiv(N, Tn) + K * N * e * ceildiv(M, Tm) + M * N * e) / bw * US
# Without prefetch (P = 0) loads and compute do not overlap.
T = maximum(T_comp, T_mem, T_comp + where(P.eq(0), T_mem, 0))

LIFETIME = P <= S - 2 + beta


def chip_params(chip: Chip, dtype: str = "fp32") -> dict[str, float]:
    precision = {"fp32": "fp32", "tf32": "tf32", "tf32x3": "tf32x3", "bf16": "bf16", "fp16": "fp16"}[dtype]
    return {
        "Ms": chip.smem_per_block,
        "R_acc": chip.accumulators_per_block,
        "n_sm": chip.sm_count,
        "bw": chip.bandwidth,
        "flops": chip.peak(precision),
        "t_bar": chip.barrier_cycles / chip.clock_hz,
    }


def fixed_parameters(template: Template) -> dict[str, float]:
    """What the proof fixes by default: the illustrative chip's parameters and the element size of
    the template's dtype."""
    dtype = template.options.get("dtype", "fp32")
    return {**chip_params(get_chip("illustrative"), dtype), "e": DTYPE_BYTES[dtype]}


def workload(shape: tuple[int, int, int] | Mapping[str, int], dtype: str = "fp32") -> dict[str, int]:
    """Parameter values for a GEMM of `shape` (M, N, K) in `dtype`."""
    if dtype not in DTYPE_BYTES:
        raise InvalidInput("dtype", dtype, sorted(DTYPE_BYTES))
    m, n, k = (shape["M"], shape["N"], shape["K"]) if isinstance(shape, Mapping) else shape
    return {"M": m, "N": n, "K": k, "e": DTYPE_BYTES[dtype]}


@register_template(NAME)
def gemm_tiling(pre: str = "exact", dtype: str = "fp32") -> Template:
    """The tiling template under contract `pre` (exact, strong or weak)."""
    if pre not in CONTRACTS:
        raise InvalidInput("contract (--pre)", pre, CONTRACTS)
    if dtype not in DTYPE_BYTES:
        raise InvalidInput("dtype", dtype, sorted(DTYPE_BYTES))
    c3 = {"exact": LIFETIME, "strong": LIFETIME & beta.eq(1), "weak": P <= S - 1}[pre]
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=(Tm, Tn, Tk, S, P, beta),
        params=(M, N, K, e, Ms, R_acc, n_sm, bw, flops, t_bar),
        scope=(
            Constraint("rates_positive", (bw > 0) & (flops > 0), "scope", "the chip moves bytes and computes"),
        ),
        constraints=(
            Constraint("C1", smem_bytes <= Ms, "capacity", "the S slots fit in shared memory"),
            Constraint("C2", (Tm * Tn >= 256) & (Tm * Tn <= R_acc), "capacity", "the accumulator tile fits"),
            Constraint("C3", c3, "schedule", f"slot reuse is safe ({pre} contract)"),
        ),
        preconditions=(Constraint("lifetime", LIFETIME, "schedule", "a slot is refilled only after its last read"),),
        cost=T,
        unit="us",
        terms={"T_comp_us": T_comp, "T_mem_us": T_mem, "smem_bytes": smem_bytes},
        tie_break=("T_comp_us", "smem_bytes"),
        bind_chip=lambda chip: chip_params(chip, dtype),
        program=gemm_tiling_program.program,
        obligations=lambda template: gemm_tiling_program.obligations(template, fixed_parameters(template)),
        options={"pre": pre, "dtype": dtype},
        descriptor={"algorithm": "gemm", "reuse": "shared-memory tiles", "placement": "block per output tile",
                    "resources": ("smem", "accumulators")},
    )


def bound_class(terms: Mapping[str, float]) -> str:
    """'memory' when DRAM traffic sets the modeled time, else 'compute'."""
    return "memory" if terms["T_mem_us"] >= terms["T_comp_us"] else "compute"
