"""A user template: row-wise RMS normalization, y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w.

One program normalizes RB rows. It holds each row in registers as one block of BLOCK columns,
reduces the sum of squares across its W warps, then scales and writes the row. The single pass is
correct only if a block covers the whole row; that is the template's precondition, and the
constraint that states it is what lets the verifier prove K1 (C implies Pre).

Load it with `formloop run rmsnorm --shape R=4096,D=4096 --template examples/templates/rownorm.py:rownorm`.
`rownorm_loose` is the same family with a wrong constraint (it admits blocks half a row wide): the
verifier refuses it with a counterexample to K1."""
import numpy as np

from formloop.expr import ceildiv, decision, floordiv, implies, maximum, param
from formloop.template import Constraint, Template
from formloop.verify import IndexAxis, ObligationResult, ProofPlan, ProofRun, Replay, check_claim, check_index

BLOCK = decision("BLOCK", (128, 256, 512, 1024, 2048, 4096, 8192), doc="columns one program holds per row")
W = decision("W", (1, 2, 4, 8, 16), doc="warps per program")
RB = decision("RB", (1, 2, 4, 8), doc="rows one program normalizes")

R = param("R", doc="rows")
D = param("D", doc="columns (the normalized extent)")
e = param("e", doc="bytes per element")
R_acc = param("R_acc", kind="chip", doc="elements a block may hold in registers")
n_sm = param("n_sm", kind="chip", doc="streaming multiprocessors")
bw = param("bw", kind="chip", integer=False, lower=None, doc="DRAM bandwidth, bytes/s")
t_cyc = param("t_cyc", kind="chip", integer=False, lower=None, doc="one core clock cycle, seconds")
bar = param("bar", kind="chip", doc="cycles of one block barrier")

US = 1e6
ELEM_CYCLES = 4  # load, square-accumulate, scale, store: about one issue slot each per element

# x is read once and y written once; the weight row is read once per program wave (cached after).
T_mem = (2 * R * D + D) * e / bw * US
# Each thread walks its share of RB rows; the cross-warp reduction costs two barriers per warp step.
t_prog = (RB * BLOCK / (32 * W) * ELEM_CYCLES + 2 * W * bar) * t_cyc
T_comp = ceildiv(ceildiv(R, RB), n_sm) * t_prog * US
T = maximum(T_mem, T_comp)

COVERS = BLOCK >= D


def bind_chip(chip):
    return {"R_acc": chip.accumulators_per_block, "n_sm": chip.sm_count, "bw": chip.bandwidth,
            "t_cyc": 1.0 / chip.clock_hz, "bar": chip.barrier_cycles}


# -- K2: what the program relies on, proved from Pre -------------------------------------------
i = param("i", lower=None, doc="an index (verification only)")
ROWS = IndexAxis(name="rows", extent=R, tile=RB, blocks=ceildiv(R, RB), stride=RB, guard=i < R,
                 owner=floordiv(i, RB), index=i)


def replay_rows(obligation: str, axis: str, tile: int, extent: int, index: int) -> tuple[set[str], str]:
    """Run the launch grid over rows and count how often each row is normalized."""
    hits = np.zeros(extent + tile, dtype=int)
    for b in range(-(-extent // tile)):
        for r in range(tile):
            if b * tile + r < extent:
                hits[b * tile + r] += 1
    kinds = {"missing"} if (hits[:extent] == 0).any() else set()
    kinds |= {"duplicate"} if (hits > 1).any() else set()
    kinds |= {"outside"} if hits[extent:].any() else set()
    times = hits[index] if 0 <= index < len(hits) else 0
    return kinds, f"rows={extent}, RB={tile}: row {index} normalized {times} times"


def replay_columns(block: int, d: int) -> str:
    """Sum of squares of one row as the single pass computes it, against numpy on the full row."""
    x = np.arange(1, d + 1, dtype=np.float64)
    lanes = np.arange(block)
    seen = np.where(lanes < d, np.pad(x, (0, max(0, block - d)))[:block], 0.0)
    return f"BLOCK={block}, D={d}: pass sums {float((seen ** 2).sum()):g}, row sums {float((x ** 2).sum()):g}"


column = param("column", lower=None, doc="a column index (verification only)")


def single_pass_covers(t: Template, run: ProofRun) -> ObligationResult:
    """Under scope and Pre, every column index below D is one of the BLOCK lanes of the pass."""
    def replay(w: dict) -> Replay:
        missed = 0 <= w["column"] < w["D"] and not w["column"] < w["BLOCK"]
        return Replay(("coverage[columns, single pass]",) if missed else (), (("witness", dict(w)),),
                      replay_columns(w["BLOCK"], w["D"]))

    claim = implies((column >= 0) & (column < D), column < BLOCK)
    return check_claim(t, "coverage[columns, single pass]", claim, scope=run.scope, timeout_s=run.timeout_s,
                       replay=replay)


def obligations(t: Template) -> ProofPlan:
    """The verifier's hook: the rows of the launch grid are covered exactly once, and the single
    pass reads every column (from Pre)."""
    checks = [lambda run, rb=rb, ob=ob: [check_index(ROWS, ob, rb, replay=replay_rows, timeout_s=run.timeout_s)]
              for rb in RB.decision.menu for ob in ("coverage", "exact-once", "no-phantom")]
    checks.append(lambda run: [single_pass_covers(t, run)])
    return ProofPlan(checks=tuple(checks))


def _template(name: str, cover: object, doc: str) -> Template:
    return Template(
        name=name,
        doc=doc,
        decisions=(BLOCK, W, RB),
        params=(R, D, e, R_acc, n_sm, bw, t_cyc, bar),
        scope=(
            Constraint("row_fits_a_block", D <= 8192, "scope", "the widest block holds 8192 columns"),
            Constraint("registers_hold_a_row", R_acc >= 8192, "scope", "a block can keep the widest row"),
            Constraint("rates_positive", (bw > 0) & (t_cyc > 0), "scope", "the chip moves bytes and computes"),
        ),
        constraints=(
            Constraint("cover", cover, "coverage", "a block spans the row"),
            Constraint("registers", RB * BLOCK <= R_acc, "capacity", "RB rows of BLOCK columns fit in registers"),
            Constraint("lanes", 32 * W <= BLOCK, "capacity", "every thread owns at least one column"),
        ),
        preconditions=(Constraint("single_pass", COVERS, "coverage",
                                  "one pass reads every element of the row, so the sum of squares is complete"),),
        cost=T,
        unit="us",
        terms={"T_mem_us": T_mem, "T_comp_us": T_comp},
        tie_break=("T_comp_us",),
        bind_chip=bind_chip,
        obligations=obligations,
        descriptor={"algorithm": "rmsnorm", "reuse": "row held in registers, one pass",
                    "placement": "program per row block", "resources": ("registers", "dram bandwidth")},
    )


def rownorm() -> Template:
    return _template("rownorm", COVERS, "single-pass row-wise RMS norm, one block per row")


def rownorm_loose() -> Template:
    # Wrong on purpose: half a row per block passes this constraint but breaks the single pass.
    return _template("rownorm-loose", 2 * BLOCK >= D, "single-pass RMS norm with a constraint too weak for its pass")
