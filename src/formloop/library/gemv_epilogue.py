"""The GEMV family with a fused epilogue ("gemv-epilogue-gpu"): C[M, N] = chain(A·B) for a handful
of rows of A (decode: M = 1), on the CUDA cores. A program owns one row of A and Tn columns of C; per
k-step it loads a [Tk, Tn] tile of B (a linear layer's weight rows, contiguous in k) and A's k-slice
and keeps the fp32 products, reduced over k after the loop; KS splits of k reduce through the
gemm-epilogue kernel's last-arriver workspace. The kernel is gemm-epilogue-gpu's (emitted with Tm = 1,
gemm_epilogue_emit `simt`): same epilogue chains, same PDL prologue, same split-K.

Why a family of its own: at M = 1 the tensor-core family pads A to 16 rows and its wide B tiles give
few programs (N/Tn), so a weight stream of 33-100 MB reaches 2.5-3.6 TB/s on the H200, where a
CUDA-core GEMV with narrow column tiles keeps ~4-8 programs per SM loading (benchmarks/decode_gemv.py).

Decisions: Tn columns per program, Tk k-tile, S pipeline stages, W warps, KS k splits (Tm = 1, L = 0).
W = 2 is not offered: measured 1.5-2.8x slower than W = 4 on the 4096-column parts (oproj, down) at
512-1024 programs, an effect the cost model has no term for (benchmarks/decode_gemv.py, RESULTS.md).
Walls:
  V1 regs     Tn·Tk ≤ PROD_REGS·32·W: the fp32 products a thread keeps (and as many loaded values) fit
  V2 issue    Tn·Tk·e ≥ 16·32·W: every thread loads at least one 16-byte vector per k-step
  V3 smem     S·(Tn + 1)·Tk·e ≤ Ms: the pipelined B and A tiles fit shared memory
  V4 split    KS ≤ ⌈K/Tk⌉: every split reads at least one k-tile
  V5 norm     KS = 1 with `a_norm` (A's rows RMS-normalized in the loop: the norm needs the whole row)
  E1 row      Tn ≥ N when the chain reduces rows (one program holds the row)
Scope: M ≤ MAX_ROWS (B is streamed once per row of A: beyond that the tensor-core family); with a row
reduction N ≤ the widest Tn.

Cost (µs, memory-bound): t_launch + (1−alpha)·max(T_mem, T_comp) + alpha·(T_mem + T_comp).
T_mem: B read once per row of A (plus A, C, the chain's tensors, split partials) in waves of the
programs resident per SM (warps, registers, shared memory): the full waves pull at
min(bw·eta_bw, resident programs' bytes in flight / lat_m) (Little's law), the last partial wave at
its own programs' pull. T_comp: waves × (t_start + k-steps × t_iter) and, with splits, the last
arriver's t_fix. Priors (CALIBRATED), fitted on the H200 like the other families."""
from __future__ import annotations

from collections.abc import Mapping

from formloop.errors import InvalidInput
from formloop.expr import ceildiv, decision, floordiv, maximum, minimum, param, where
from formloop.hw.chips import Chip
from formloop.library import register_template
from formloop.library import gemm_tiling_index as index
from formloop.library import rowwise
from formloop.library.gemm_epilogue import chain_rules
from formloop.library.gemm_epilogue_emit import KernelSpec, Shape
from formloop.library.gemm_epilogue_ops import VALUE_BYTES, chain_facts, chain_text, parse_chain_text
from formloop.library.gemm_tiling_gpu import CONTRACT_CHIPS, DTYPE_BYTES, proof_chip
from formloop.template import Constraint, Template, bool_option, with_calibration
from formloop.verify.certificate import ProofPlan

NAME = "gemv-epilogue-gpu"
DTYPES = ("bf16", "fp16", "fp32")
MAX_ROWS = 8
PROD_REGS = 64  # fp32 products a thread keeps (the loaded tile takes as many again; 255-register cap)
US = 1e6

Tn = decision("Tn", (4, 8, 2, 16, 32, 64), doc="columns of C one program computes (BLOCK_N)")
Tk = decision("Tk", (1024, 512, 256, 128, 2048), doc="depth of one k-step (BLOCK_K)")
S = decision("S", (3, 2, 4, 1), doc="pipeline stages (num_stages)")
W = decision("W", (4, 8), doc="warps per program (num_warps)")
KS = decision("KS", (1, 2, 3, 4, 8), doc="split-K: contiguous k ranges reduced by the last-arriving program")

M = param("M", doc="rows of A and C (decode: tokens)")
N = param("N", doc="columns of B and C")
K = param("K", doc="reduction extent")
e = param("e", doc="bytes per element of A and B")
# the streaming families' chip values and rates, as rowwise declares them (same names, same meaning)
Ms, warps_sm, regs_sm, n_sm, bw = rowwise.Ms, rowwise.warps_sm, rowwise.regs_sm, rowwise.n_sm, rowwise.bw
eta_bw, lat_m, t_launch, alpha = rowwise.eta_bw, rowwise.lat_m, rowwise.t_launch, rowwise.alpha


def _eff(name: str, doc: str):
    return param(name, kind="chip", integer=False, lower=0, doc=doc)


t_iter = _eff("t_iter", "fixed cost of one k-step, s")
t_start = _eff("t_start", "fixed cost of one program (its reduction over k and epilogue), s")
t_fix = _eff("t_fix", "split-K: the last arriver's atomic and partial sum, s")

CALIBRATED = ("eta_bw", "lat_m", "t_iter", "t_start", "t_fix", "t_launch", "alpha")
# eta_bw at most the measured copy (a GEMV cannot stream faster than a copy); alpha a fraction
BOUNDS = {"eta_bw": (0.3, 1.0), "alpha": (0.0, 1.0)}
PRIORS = {"eta_bw": 0.88, "lat_m": 1.0e-6, "t_iter": 30e-9, "t_start": 0.3e-6, "t_fix": 1.0e-6, "t_launch": 2.0e-6,
          "alpha": 0.2}


def _terms(facts, e_c: int, a_norm: bool = False):
    programs = M * ceildiv(N, Tn) * KS
    steps = ceildiv(ceildiv(K, Tk), KS)
    per_thread = Tn * Tk / (32 * W)
    regs = 2 * per_thread + 40   # products, loaded values, addresses
    occupancy = maximum(1, minimum(minimum(floordiv(warps_sm, W), floordiv(regs_sm, 32 * W * regs)),
                                   minimum(floordiv(Ms, S * (Tn + 1) * Tk * e), 32)))
    slots = n_sm * occupancy
    full = floordiv(programs, slots)
    rest = programs - full * slots
    in_flight = maximum(S - 1, 1) * Tn * Tk * e   # bytes of B one program has requested ahead
    width = 0.5 if facts.pairs else 1.0
    c_bytes = M * (e_c if facts.reduces else width * N * e_c)
    partials = where(KS > 1, 2 * KS * M * N * 4, 0)
    bytes_ = (M * N * K * e + M * K * e + c_bytes + M * N * facts.tile_bytes + N * facts.vec_row_bytes
              + M * facts.vec_col_bytes + partials + (K * e if a_norm else 0))
    per_program = bytes_ / programs
    rate_full = minimum(bw * eta_bw, slots * in_flight / lat_m)
    rate_rest = minimum(bw * eta_bw, maximum(rest, 1) * in_flight / lat_m)
    T_mem = (full * slots * per_program / rate_full + where(rest > 0, rest * per_program / rate_rest, 0)) * US
    waves = ceildiv(programs, slots)
    T_comp = (waves * (t_start + steps * t_iter) + where(KS > 1, t_fix, 0)) * US
    T = (1 - alpha) * maximum(T_mem, T_comp) + alpha * (T_mem + T_comp) + t_launch * US
    return {"T": T, "T_mem_us": T_mem, "T_comp_us": T_comp, "bytes": bytes_, "programs": programs,
            "smem_bytes": S * (Tn + 1) * Tk * e}


def chip_params(chip: Chip, calibration: Mapping[str, float] | None = None) -> dict[str, float]:
    if chip.name not in CONTRACT_CHIPS:
        raise InvalidInput("chip", chip.name, CONTRACT_CHIPS, fix="the Triton family's contract assumes Hopper")
    values = {"Ms": chip.smem_per_block, "warps_sm": chip.warps_per_sm, "regs_sm": chip.registers_per_sm or 65536,
              "n_sm": chip.sm_count, "bw": chip.bandwidth, **PRIORS}
    return with_calibration(values, calibration, CALIBRATED)


def workload(M_: int, N_: int, K_: int, dtype: str = "bf16") -> dict[str, int]:
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    return {"M": int(M_), "N": int(N_), "K": int(K_), "e": DTYPE_BYTES[dtype]}


@register_template(NAME)
def gemv_epilogue_gpu(dtype: str = "bf16", out: str | None = None, epilogue: str = "",
                      calibration: Mapping[str, float] | None = None, calibration_id: str = "priors",
                      a_norm: bool | str = False) -> Template:
    """The Triton CUDA-core GEMV family with the epilogue chain `epilogue` (canonical text); `a_norm`:
    A's rows RMS-normalized (times a weight vector) in the loop, the norm before a linear layer fused."""
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    a_norm = bool_option("option a_norm", a_norm)
    out = out or dtype
    if out not in VALUE_BYTES:
        raise InvalidInput("out (C dtype)", out, sorted(VALUE_BYTES))
    chain = parse_chain_text(epilogue)
    facts = chain_facts(chain, default_dtype=out)
    t = _terms(facts, VALUE_BYTES[out], a_norm)
    constraints = (
        Constraint("V1", Tn * Tk <= PROD_REGS * 32 * W, "capacity", "the fp32 products a thread keeps fit"),
        Constraint("V2", Tn * Tk * e >= 16 * 32 * W, "capacity", "every thread loads a 16-byte vector per k-step"),
        Constraint("V3", t["smem_bytes"] <= Ms, "capacity", "the pipelined tiles fit shared memory"),
        Constraint("V4", KS <= ceildiv(K, Tk), "layout", "every split reads at least one k-tile"),
    ) + ((Constraint("V5", KS.eq(1), "layout", "A's row norm needs the whole row: one split"),) if a_norm else ())
    scope = (Constraint("few_rows", M <= MAX_ROWS, "scope", f"at most {MAX_ROWS} rows of A (B is read once per row)"),
             Constraint("rates_positive", bw > 0, "scope", "the chip moves bytes"))
    pre = (Constraint("split_cover", Tk * KS * ceildiv(ceildiv(K, Tk), KS) >= K, "layout",
                      "the splits' k-tiles cover K"),)
    rules = chain_rules(facts, Tn, N, max(Tn.decision.menu), holder="program")
    constraints, pre, scope = constraints + rules[0], pre + rules[1], scope + rules[2]
    text = chain_text(chain)
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=(Tn, Tk, S, W, KS),
        params=(M, N, K, e, Ms, warps_sm, regs_sm, n_sm, bw, eta_bw, lat_m, t_iter, t_start, t_fix, t_launch, alpha),
        scope=scope,
        constraints=constraints,
        preconditions=pre,
        cost=t["T"],
        unit="us",
        terms={k: v for k, v in t.items() if k != "T"},
        tie_break=("T_comp_us", "smem_bytes"),
        bind_chip=lambda chip: chip_params(chip, calibration),
        program=lambda assignment, wl: program(assignment, wl, dtype, out, text, a_norm),
        obligations=lambda template: proof_plan(template, dtype, calibration),
        options={"dtype": dtype, "out": out, "epilogue": text, "calibration": calibration_id,
                 **({"a_norm": True} if a_norm else {})},
        descriptor={"algorithm": "gemv", "reuse": "none (B streamed once per row of A)",
                    "placement": "one program per row of A and Tn columns (per k split)", "resources": ("registers",),
                    "calibrated": CALIBRATED, "bounds": BOUNDS, "program": "triton", "shape": "M,N,K",
                    "chip": proof_chip().name, "epilogue": text},
    )


def design_config(assignment: Mapping[str, int]) -> dict[str, int]:
    """The gemm-epilogue kernel's tile configuration of a GEMV design (TileConfig.from_assignment)."""
    return {"Tm": 1, "G": 1, "L": 0, **{k: int(assignment[k]) for k in ("Tn", "Tk", "S", "W", "KS")}}


def program(assignment: Mapping[str, int], wl: Mapping[str, int], dtype: str, out: str, epilogue: str,
            a_norm: bool = False):
    """The instance: gemm-epilogue's kernel on one-row tiles, B stored as a linear layer's weight."""
    from formloop.library.gemm_epilogue_kernel import EpilogueGemm, EpiloguePlan  # noqa: PLC0415 (triton, torch)
    from formloop.library.gemm_tiling_kernel import TileConfig  # noqa: PLC0415

    spec = KernelSpec(op="gemm", ab=dtype, c=out, lb="col", chain=parse_chain_text(epilogue), a_norm=a_norm)
    shape = Shape(int(wl["M"]), int(wl["N"]), int(wl["K"]))
    return EpilogueGemm(EpiloguePlan(spec, TileConfig.from_assignment(design_config(assignment)), shape))


def obligations(timeout_s: float = 10.0):
    """For every M, N, K ≥ 1 (Z3): the KS ranges partition [0, K) at every (Tk, KS) of the menus;
    the one-row tiles cover M and the Tn tiles cover N exactly once, with no store outside C; the
    launch order (G = 1) is a bijection onto the tiles."""
    out = [index.split_k_partition(tk, ks, timeout_s=timeout_s) for tk in Tk.decision.menu for ks in KS.decision.menu]
    out += index.tile_cover(index.OUTPUT_AXES[0], 1, timeout_s=timeout_s)
    for t in Tn.decision.menu:
        out += index.tile_cover(index.OUTPUT_AXES[1], t, timeout_s=timeout_s)
    return out + [index.swizzle_bijective(1, timeout_s=timeout_s)]


def proof_plan(template: Template, dtype: str, calibration: Mapping[str, float] | None = None) -> ProofPlan:
    values = chip_params(proof_chip(), calibration)
    fixed = {p.name: values[p.name] for p in template.params if p.payload.kind == "chip"}
    fixed["e"] = DTYPE_BYTES[dtype]
    return ProofPlan(fixed=fixed, fixed_reason=f"the walls read the {proof_chip().name} contract's shared memory, "
                     "registers and warps and the element size; M, N, K stay symbolic",
                     bounds={"index extents": "every M, N, K >= 1, one query per menu value"},
                     checks=(lambda run: obligations(run.timeout_s),))
