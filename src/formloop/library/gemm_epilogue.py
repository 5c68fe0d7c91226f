"""The GEMM family with a fused epilogue ("gemm-epilogue-gpu"): gemm-tiling-gpu's decisions, walls
and cost, extended by what an epilogue chain reads, computes and needs.

Options: `dtype` of A and B, `out` (C's dtype), `epilogue` (the chain's canonical text,
gemm_epilogue_ops.chain_text; empty = C = A·B). The chain is part of the contract, so each chain
is its own template (own content hash, own proof); its facts enter as constants.

Decisions: Tm, Tn, Tk, S, W, KS, G, L exactly as gemm-tiling-gpu (same leaves, same menus).
Workload: M, N, K, e as there (M counts the rows of every batch: batch × M for batched_gemm,
n·p·q for a convolution), plus batch, the leading dimensions pa, pb of A and B as stored, and
gather (1 when A is gathered by implicit GEMM).

Walls and rules (beside gemm-tiling-gpu's C1–C4):
  C5 layout   L = 0 or both stored operands have 16-byte aligned row pitches (pa·e, pb·e); this
              replaces the base C5, which assumes row-major A and B
  C6 gather   L = 0 when A is gathered (the copy engine moves boxes, not gathered rows)
  E1 row      Tn ≥ N when the chain reduces rows (softmax, logsumexp): one tile holds the row
  E2 regs     Tm·Tn·(1 + tiles) ≤ epi_regs·32·W: the accumulator and the epilogue's tiles fit; where
              the epilogue runs in two column halves (elementwise chains, Tn ≥ split_min_tn) the
              tiles are held half at a time: Tm·Tn·(1 + tiles/2)
Preconditions: the base lifetime rule; with a row reduction, ⌈N/Tn⌉ = 1 (K1 proves E1 implies it).
Scope: with a row reduction N ≤ 256 (the widest tile); with glu, N even.

Cost: the base terms with the epilogue's traffic and arithmetic added. DRAM bytes grow by the
chain's tensors (tile tensors per element, vectors per row or column), C at its own dtype and
width (halved by glu, one value per row after logsumexp) and B once per batch; T_mem scales by
bytes'/bytes (same rate). Each tile's epilogue costs Tm·Tn·ops SIMT operations at the SM's fp32
rate (transcendentals count 4), half of it where two blocks fit one SM (stages ≤ half the shared
memory, accumulator + held epilogue tiles + 40 registers per thread ≤ half the register file): one
block's epilogue runs under the other's main loop. T composes T_mem and T_comp as gemm-tiling-gpu does."""
from __future__ import annotations

from collections.abc import Mapping

from formloop.errors import InvalidInput
from formloop.expr import ceildiv, floordiv, maximum, param, where
from formloop.hw.chips import Chip
from formloop.library import gemm_tiling_gpu as base
from formloop.library import register_template
from formloop.library.gemm_epilogue_emit import KernelSpec, Shape
from formloop.library.gemm_epilogue_ops import VALUE_BYTES, chain_facts, chain_text, parse_chain_text, split_min_tn
from formloop.template import Constraint, Template
from formloop.verify.certificate import ProofPlan
from formloop.verify.index import INDEX_OBLIGATIONS, IndexAxis, check_index

NAME = "gemm-epilogue-gpu"
EPI_REGS = 192  # fp32 values a thread may hold for accumulator + epilogue tiles (255-register cap, less addressing)
ROW_TILE_MAX = max(base.Tn.decision.menu)
EPI_OVERLAP = 0.5  # share of the epilogue hidden under the other block's main loop with two blocks per SM
REGS_FIXED = 40    # registers per thread beside the accumulator and epilogue tiles (addresses, indices)
RF_REGS = 65536    # 32-bit registers of one Hopper SM
US = base.US

Tm, Tn, Tk, S, W, KS, G, L = base.Tm, base.Tn, base.Tk, base.S, base.W, base.KS, base.G, base.L
M, N, K, e = base.M, base.N, base.K, base.e
batch = param("batch", doc="independent products (batched_gemm); 1 otherwise")
pa = param("pa", doc="leading dimension of A as stored (elements between consecutive stored rows)")
pb = param("pb", doc="leading dimension of B as stored")
gather = param("gather", lower=0, doc="1 when A's rows are gathered (implicit-GEMM convolution), else 0")
flops_simt = param("flops_simt", kind="chip", integer=False, lower=None, doc="fp32 rate of the CUDA cores, FLOP/s")
epi_regs = param("epi_regs", kind="chip", doc="fp32 values a thread may hold for accumulator and epilogue tiles")


def _aligned(x):
    return x.eq(16 * floordiv(x, 16))


def _model(facts, e_c: int):
    """(T_mem, T_comp, T) with the chain's bytes and operations added to the base model."""
    width = 0.5 if facts.pairs else 1.0
    c_elem = 0 if facts.reduces else width * e_c        # C bytes per accumulator element
    c_row = e_c if facts.reduces else 0                 # C bytes per row
    extra = (M * N * (facts.tile_bytes + c_elem) - M * N * e + N * facts.vec_row_bytes
             + M * (facts.vec_col_bytes + c_row) + (batch - 1) * K * N * e)
    t_mem = base.T_mem * (1 + extra / base.bytes_dram)
    t_epi = base.waves * Tm * Tn * facts.ops / (flops_simt / (2 * base.n_sm)) * US
    # Two blocks per SM (stages within half the shared memory, registers within half the file) let
    # one block's epilogue run under the other's main loop: half of it is counted (a prior, not fitted).
    t_epi = t_epi * where(_two_blocks(facts), 1 - EPI_OVERLAP, 1)
    t_comp = base.T_comp + t_epi
    total = (1 - base.alpha) * maximum(t_mem, t_comp) + base.alpha * (t_mem + t_comp) + base.t_launch * US
    return t_mem, t_comp, total


def _two_blocks(facts):
    """Whether two blocks share an SM: more blocks than SMs, stages in half the shared memory, and
    the accumulator, the epilogue's tiles (halved where the epilogue runs in halves) and REGS_FIXED
    others per thread within half the register file."""
    least = split_min_tn(facts)
    held = facts.tiles if least is None else where(Tn >= least, facts.tiles / 2, facts.tiles)
    # the stages alone (not fp32's staged C tile on the TMA path): the term then reads 6 decisions, which the
    # MILP's tables hold
    stages = S * (Tm + Tn) * Tk * e
    return (2 * stages <= base.Ms) & (Tm * Tn * (1 + held) + REGS_FIXED * 32 * W <= RF_REGS // 2) \
        & (base.blocks > base.n_sm)


def _e2(facts):
    whole = Tm * Tn * (1 + facts.tiles) <= epi_regs * 32 * W
    least = split_min_tn(facts)
    if least is None or not facts.tiles:
        return whole
    return whole | ((Tn >= least) & (Tm * Tn * (2 + facts.tiles) <= 2 * epi_regs * 32 * W))


def chip_params(chip: Chip, dtype: str, calibration: Mapping[str, float] | None = None) -> dict[str, float]:
    return {**base.chip_params(chip, dtype, calibration), "flops_simt": chip.peak("fp32"), "epi_regs": EPI_REGS}


def capacities(chip: Chip) -> dict[str, float]:
    """The capacity walls' chip values on any chip (the cost model's binding is Hopper-only)."""
    return {"Ms": chip.smem_per_block, "acc_regs": base.ACC_REGS, "epi_regs": EPI_REGS}


def workload(M_: int, N_: int, K_: int, dtype: str, *, batch_: int = 1, pa_: int | None = None,
             pb_: int | None = None, gather_: int = 0) -> dict[str, int]:
    """Parameter values; pa, pb default to row-major A (K) and B (N)."""
    if dtype not in base.DTYPE_BYTES:
        raise InvalidInput("dtype", dtype, sorted(base.DTYPE_BYTES))
    return {"M": M_ * batch_, "N": N_, "K": K_, "e": base.DTYPE_BYTES[dtype], "batch": batch_,
            "pa": K_ if pa_ is None else pa_, "pb": N_ if pb_ is None else pb_, "gather": gather_}


@register_template(NAME)
def gemm_epilogue_gpu(dtype: str = "bf16", out: str | None = None, epilogue: str = "",
                      calibration: Mapping[str, float] | None = None, calibration_id: str = "priors") -> Template:
    """The Triton GEMM family with the epilogue chain `epilogue` (canonical text) on a Hopper chip."""
    if dtype not in base.DTYPES:
        raise InvalidInput("dtype", dtype, base.DTYPES)
    out = out or ("fp32" if dtype in ("tf32", "tf32x3") else dtype)
    if out not in VALUE_BYTES:
        raise InvalidInput("out (C dtype)", out, sorted(VALUE_BYTES))
    chain = parse_chain_text(epilogue)
    facts = chain_facts(chain, default_dtype=out)
    t_mem, t_comp, total = _model(facts, VALUE_BYTES[out])
    base_t = base.gemm_tiling_gpu(dtype=dtype, calibration=calibration, calibration_id=calibration_id)
    kept = tuple(c for c in base_t.constraints if c.name in ("C1", "C2", "C3", "C4"))
    constraints = kept + (
        Constraint("C5", L.eq(0) | (_aligned(pa * e) & _aligned(pb * e)), "layout",
                   "the copy engine needs 16-byte aligned row pitches of A and B as stored"),
        Constraint("C6", L.eq(0) | gather.eq(0), "layout", "gathered rows take the pointer path"),
        Constraint("E2", _e2(facts), "capacity", "the accumulator and the epilogue's tiles fit the registers"),
    )
    pre = base_t.preconditions
    scope = base_t.scope + (Constraint("gather_flag", gather <= 1, "scope", "gather is 0 or 1"),)
    rules = chain_rules(facts, Tn, N, ROW_TILE_MAX)
    constraints, pre, scope = constraints + rules[0], pre + rules[1], scope + rules[2]
    text = chain_text(chain)
    return Template(
        name=NAME,
        doc=__doc__.strip().splitlines()[0],
        decisions=base_t.decisions,
        params=base_t.params + (batch, pa, pb, gather, flops_simt, epi_regs),
        scope=scope,
        constraints=constraints,
        preconditions=pre,
        cost=total,
        unit="us",
        terms={"T_comp_us": t_comp, "T_mem_us": t_mem, "T_split_us": base.T_split, "smem_bytes": base.smem_bytes},
        tie_break=("T_comp_us",),
        bind_chip=lambda chip: chip_params(chip, dtype, calibration),
        program=lambda assignment, wl: program(assignment, wl, dtype, out, text),
        obligations=lambda template: proof_plan(template, dtype, facts.pairs, calibration),
        options={"dtype": dtype, "out": out, "epilogue": text, "calibration": calibration_id},
        descriptor={**base_t.descriptor, "algorithm": "gemm+epilogue", "base": base.NAME, "epilogue": text},
    )


def chain_rules(facts, tn, n, widest: int, holder: str = "tile"):
    """(walls, preconditions, scope) an epilogue chain adds to a GEMM family with column tiles `tn` of at
    most `widest` over `n` columns: a row reduction needs the row in one `holder` (E1), which K1 proves
    implies row_single_tile, and rows no wider than the widest tile; glu needs gate and up pairs."""
    walls, pre, scope = (), (), ()
    if facts.row:
        walls = (Constraint("E1", tn >= n, "capacity", f"one {holder} holds the whole row"),)
        pre = (Constraint("row_single_tile", ceildiv(n, tn).eq(1), "epilogue",
                          f"the row reduction sees every column of its row in one {holder}"),)
        scope = (Constraint("row_fits", n <= widest, "scope", f"a row fits the widest tile ({widest})"),)
    if facts.pairs:
        scope += (Constraint("glu_even", n.eq(2 * floordiv(n, 2)), "scope", "gate and up columns come in pairs"),)
    return walls, pre, scope


def program(assignment: Mapping[str, int], wl: Mapping[str, int], dtype: str, out: str, epilogue: str):
    """The instance on row-major operands (the DSL builds other layouts from the same kernel)."""
    from formloop.library.gemm_epilogue_kernel import EpilogueGemm, EpiloguePlan  # noqa: PLC0415 (triton, torch)
    from formloop.library.gemm_tiling_kernel import TileConfig  # noqa: PLC0415

    nb = int(wl.get("batch", 1))
    spec = KernelSpec(op="batched_gemm" if nb > 1 else "gemm", ab=dtype, c=out, chain=parse_chain_text(epilogue))
    shape = Shape(int(wl["M"]) // nb, int(wl["N"]), int(wl["K"]), batch=nb)
    return EpilogueGemm(EpiloguePlan(spec, TileConfig.from_assignment(assignment), shape))


def proof_plan(template: Template, dtype: str, pairs: bool, calibration: Mapping[str, float] | None = None
               ) -> ProofPlan:
    """gemm-tiling-gpu's index obligations (the shared tile order and k split), and with glu the
    cover of the halved output columns; chip parameters fixed to the proof chip's contract."""
    chip = base.proof_chip()
    values = chip_params(chip, dtype, calibration)
    fixed = {p.name: values[p.name] for p in template.params if p.payload.kind == "chip"}
    fixed["e"] = base.DTYPE_BYTES[dtype]
    checks = [lambda run: base.obligations(run.timeout_s)]
    if pairs:
        checks.append(lambda run: glu_obligations(run.timeout_s))
    return ProofPlan(fixed=fixed, fixed_reason=f"the walls read the {chip.name} contract's shared memory and register "
                     "budget and the element size; M, N, K, batch, pa, pb stay symbolic",
                     bounds={"index extents": "every extent >= 1, one query per menu value"}, checks=tuple(checks))


GLU_FAULTS = {"unhalved-offset": "output tile b starts at column b*Tn (the GEMM's column) instead of b*Tn/2"}


def glu_axis(fault: str | None = None) -> IndexAxis:
    """The output-column axis of a glu as the kernel computes it: ⌈N/Tn⌉ column tiles (N = 2·N_out),
    tile b storing the Tn/2 columns from b·Tn/2 where the column is < N_out."""
    if fault is not None and fault not in GLU_FAULTS:
        raise InvalidInput("glu fault", fault, sorted(GLU_FAULTS))
    n_out = param("N_out", doc="output columns of a glu (half the GEMM's N)")
    half = param("To", doc="output columns one tile stores (Tn/2)")
    j = param("j", lower=None, doc="an output column")
    stride = 2 * half if fault == "unhalved-offset" else half
    return IndexAxis("N_out", n_out, half, ceildiv(2 * n_out, 2 * half), stride, j < n_out, floordiv(j, stride), j)


def glu_obligations(timeout_s: float, fault: str | None = None):
    """glu: for every N_out the column tiles cover the output columns exactly once and store
    nothing outside them (coverage, exact-once, no-phantom at every Tn/2 of the menu)."""
    axis = glu_axis(fault)
    replay = lambda ob, name, tile, extent, index: replay_glu(tile, extent, index, fault)  # noqa: E731
    return [check_index(axis, ob, t // 2, replay=replay, timeout_s=timeout_s)
            for t in Tn.decision.menu for ob in INDEX_OBLIGATIONS]


def replay_glu(half: int, n_out: int, index: int, fault: str | None = None) -> tuple[set[str], str]:
    """Run the glu column mapping on numbers: which output columns the tiles store, and what is
    wrong at `index` (missing, duplicate, outside)."""
    stride = 2 * half if fault == "unhalved-offset" else half
    tiles = -(-2 * n_out // (2 * half))
    stored = [b * stride + r for b in range(tiles) for r in range(half) if b * stride + r < n_out]
    kinds = set()
    if 0 <= index < n_out and index not in stored:
        kinds.add("missing")
    if stored.count(index) > 1:
        kinds.add("duplicate")
    if any(c < 0 or c >= n_out for c in stored):
        kinds.add("outside")
    return kinds, (f"N_out={n_out}, Tn/2={half}: {tiles} column tiles store {len(stored)} columns; column {index} "
                   f"stored {stored.count(index)} time(s)")
