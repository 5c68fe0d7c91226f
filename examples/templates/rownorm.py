"""A user template: row-wise RMS normalization, y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w.

One program normalizes RB rows. It holds each row in registers as one block of BLOCK columns,
reduces the sum of squares across its W warps, then scales and writes the row. The single pass is
correct only if a block covers the whole row; that is the template's precondition, and the
constraint that states it is what lets the verifier prove K1 (C implies Pre).

Load it with `formloop run rmsnorm --shape R=4096,D=4096 --template examples/templates/rownorm.py:rownorm`.
`rownorm_loose` is the same family with a wrong constraint (it admits blocks half a row wide): the
verifier refuses it with a counterexample to K1."""
from formloop.expr import ceildiv, decision, maximum, param
from formloop.template import Constraint, Template

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
        descriptor={"algorithm": "rmsnorm", "reuse": "row held in registers, one pass",
                    "placement": "program per row block", "resources": ("registers", "dram bandwidth")},
    )


def rownorm() -> Template:
    return _template("rownorm", COVERS, "single-pass row-wise RMS norm, one block per row")


def rownorm_loose() -> Template:
    # Wrong on purpose: half a row per block passes this constraint but breaks the single pass.
    return _template("rownorm-loose", 2 * BLOCK >= D, "single-pass RMS norm with a constraint too weak for its pass")
