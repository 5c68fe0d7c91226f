"""The epilogue operations of the gemm-epilogue family: what each one computes (as Triton source and
as a float64 torch reference), what it reads, what it costs, and the rules a chain of them obeys.

A chain starts from the fp32 accumulator tile and applies its operations in order; every
operation computes in fp32. `cast(dt)` rounds the value to dt at that point (the chain goes on
from the rounded value); the store converts the last value to C's dtype.

Shapes along a chain: the value is an [M, N] tile; `glu(act)` pairs adjacent columns (gate, up)
into one, so after it the value is [M, N/2]; `logsumexp` reduces each row to one value, [M].
Tensors an operation reads are shaped by the value at that point: `bias(row)` / `scale(row)` a
vector of one value per column, `bias(col)` / `scale(col)` one value per row, `add` / `mul` a
tile of the value's shape. Row operations (softmax, logsumexp) need a whole row in one tile.

This module holds data and text only (no torch or triton import at module level)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from formloop.dtypes import dtype_bytes, get_dtype
from formloop.errors import InvalidInput

VALUE_DTYPES = ("fp32", "bf16", "fp16")
# Views of formloop.dtypes: bytes, and the Triton type (Triton names its types as torch does).
VALUE_BYTES = {d: dtype_bytes(d) for d in VALUE_DTYPES}
TL_DTYPES = {d: f"tl.{get_dtype(d).torch}" for d in VALUE_DTYPES}
GLU_ACTS = ("silu", "gelu", "gelu_tanh", "sigmoid", "relu")
REQUIRED = object()


@dataclass(frozen=True)
class Arg:
    """A parameter of an operation kind: `kind` is choice, number, dtype or name."""

    name: str
    kind: str
    default: object = REQUIRED
    choices: tuple = ()

    def allowed(self) -> str:
        if self.kind == "choice":
            return ", ".join(self.choices)
        if self.kind == "dtype":
            return ", ".join(VALUE_DTYPES)
        if self.kind == "name":
            return "an identifier (the tensor's name)"
        if self.kind == "number_or_axis":
            return "a number, row or col"
        return "a number"


@dataclass(frozen=True)
class OpKind:
    """One epilogue operation: its arguments, the tensor it reads (None, 'axis' = a vector along
    the axis argument, 'tile' = a tile of the value's shape), SIMT operations per element (the
    cost model's weight; transcendental functions count 4), and its structural effects."""

    name: str
    args: tuple[Arg, ...]
    doc: str
    tensor: str | None = None
    ops: float = 1.0
    row: bool = False
    reduces: bool = False
    pairs: bool = False


_DT = Arg("dtype", "dtype", None)
KINDS: dict[str, OpKind] = {k.name: k for k in (
    OpKind("bias", (Arg("axis", "choice", choices=("row", "col")), _DT, Arg("name", "name", "bias")),
           "add a vector: row = one value per column ([N], nn.Linear's bias), col = one per row ([M])", "axis", 2),
    OpKind("scale", (Arg("by", "number_or_axis", 1.0), _DT, Arg("name", "name", "scale")),
           "multiply by a number, or by a vector (row: one value per column, col: one per row)", None, 1),
    OpKind("add", (Arg("name", "name", "residual"), _DT), "add a tensor of the value's shape (residual)", "tile", 2),
    OpKind("mul", (Arg("name", "name", "other"), _DT), "multiply by a tensor of the value's shape", "tile", 2),
    OpKind("relu", (), "max(x, 0)", ops=1),
    OpKind("gelu", (Arg("approx", "choice", "erf", ("erf", "tanh")),), "GELU, exact (erf) or tanh form", ops=20),
    OpKind("silu", (), "x * sigmoid(x)", ops=10),
    OpKind("sigmoid", (), "1 / (1 + exp(-x))", ops=9),
    OpKind("tanh", (), "hyperbolic tangent", ops=10),
    OpKind("leaky_relu", (Arg("slope", "number", 0.01),), "x if x >= 0 else slope * x", ops=2),
    OpKind("hardtanh", (Arg("lo", "number", -1.0), Arg("hi", "number", 1.0)), "clamp to [lo, hi]", ops=2),
    OpKind("clamp", (Arg("lo", "number", None), Arg("hi", "number", None)), "clamp to [lo, hi] (either may be omitted)",
           ops=2),
    OpKind("softplus", (Arg("beta", "number", 1.0), Arg("threshold", "number", 20.0)),
           "log(1 + exp(beta x)) / beta, x where beta x > threshold", ops=10),
    OpKind("mish", (), "x * tanh(softplus(x))", ops=22),
    OpKind("softmax", (), "softmax over each row (the tile must hold the row)", ops=12, row=True),
    OpKind("logsumexp", (), "log(sum(exp(x))) over each row: one value per row", ops=10, row=True, reduces=True),
    OpKind("cast", (Arg("dtype", "dtype"),), "round the value to dtype", ops=2),
    OpKind("glu", (Arg("act", "choice", "silu", GLU_ACTS),),
           "gated unit over interleaved columns: act(x[:, 2j]) * x[:, 2j+1]; halves the width", ops=12, pairs=True),
)}


@dataclass(frozen=True)
class EpilogueOp:
    """One operation of a chain with its arguments resolved (in its kind's order)."""

    kind: str
    args: tuple[tuple[str, object], ...] = ()

    def arg(self, name: str):
        return dict(self.args)[name]

    @property
    def spec(self) -> OpKind:
        return KINDS[self.kind]

    @property
    def tensor(self) -> str | None:
        """None, 'row' / 'col' (a vector), or 'tile': what tensor the operation reads."""
        if self.kind in ("bias", "scale"):
            v = self.arg("axis" if self.kind == "bias" else "by")
            return v if v in ("row", "col") else None
        return self.spec.tensor

    @property
    def tensor_name(self) -> str | None:
        return self.arg("name") if self.tensor else None

    def text(self) -> str:
        shown = [f"{k}={v}" for k, v in self.args if v is not None]
        return f"{self.kind}({','.join(shown)})" if shown else self.kind


def make_op(kind: str, positional: Sequence[object] = (), keyword: Mapping[str, object] | None = None) -> EpilogueOp:
    """An operation from its written arguments; every bad one is named with what is allowed."""
    if kind not in KINDS:
        raise InvalidInput("epilogue operation", kind, sorted(KINDS))
    spec, keyword = KINDS[kind], dict(keyword or {})
    if len(positional) > len(spec.args):
        raise InvalidInput(f"{kind} arguments", list(positional),
                           f"at most {len(spec.args)} ({', '.join(a.name for a in spec.args) or 'none'})")
    given = dict(zip((a.name for a in spec.args), positional))
    for name, value in keyword.items():
        if name not in {a.name for a in spec.args}:
            raise InvalidInput(f"{kind} argument", name, [a.name for a in spec.args] or "none")
        if name in given:
            raise InvalidInput(f"{kind} argument {name}", value, "given once (positionally or by name)")
        given[name] = value
    values = []
    for a in spec.args:
        if a.name not in given:
            if a.default is REQUIRED:
                raise InvalidInput(f"{kind} argument {a.name}", None, a.allowed())
            values.append((a.name, a.default))
            continue
        values.append((a.name, _coerce(kind, a, given[a.name])))
    op = EpilogueOp(kind, tuple(values))
    if kind == "scale" and op.tensor is None and op.arg("dtype") is not None:
        raise InvalidInput("scale argument dtype", op.arg("dtype"), "none for a scale by a number (it has no tensor)")
    if kind == "clamp" and op.arg("lo") is None and op.arg("hi") is None:
        raise InvalidInput("clamp arguments", "none", "lo, hi or both")
    for lo_name, hi_name in (("lo", "hi"),):
        lo, hi = dict(op.args).get(lo_name), dict(op.args).get(hi_name)
        if lo is not None and hi is not None and lo > hi:
            raise InvalidInput(f"{kind} argument hi", hi, f"a number >= lo ({lo})")
    return op


def _coerce(kind: str, a: Arg, value: object):
    field = f"{kind} argument {a.name}"
    if a.kind == "choice":
        if value not in a.choices:
            raise InvalidInput(field, value, a.choices)
        return value
    if a.kind == "dtype":
        if value not in VALUE_DTYPES:
            raise InvalidInput(field, value, VALUE_DTYPES)
        return value
    if a.kind == "name":
        if not isinstance(value, str) or not value.isidentifier():
            raise InvalidInput(field, value, a.allowed())
        return value
    if a.kind == "number_or_axis" and value in ("row", "col"):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(field, value, a.allowed())
    return float(value)


@dataclass(frozen=True)
class ChainFacts:
    """What the cost model and the kernel need to know about a chain."""

    row: bool            # some operation needs the whole row in one tile
    reduces: bool        # the output is one value per row
    pairs: bool          # a glu halves the width
    tiles: int           # tiles of the accumulator's size the epilogue holds beside it
    ops: float           # SIMT operations per accumulator element
    tile_bytes: float    # bytes read per accumulator element from tile tensors
    vec_row_bytes: int   # bytes read per accumulator column (vectors along the row)
    vec_col_bytes: int   # bytes read per row (vectors along the column)


@dataclass(frozen=True)
class ChainIssue:
    """A broken chain rule: the operation's index, the field, its value, what is allowed."""

    index: int
    field: str
    value: object
    allowed: str
    message: str


def chain_issues(chain: Sequence[EpilogueOp], c_dtype: str) -> list[ChainIssue]:
    """Type and shape rules of a chain: shapes of the tensors it reads, reductions, the final cast."""
    out, state, names = [], "tile", {}
    for i, op in enumerate(chain):
        if op.kind == "glu" and state != "tile":
            out.append(ChainIssue(i, "glu", op.text(), "glu once, before any row reduction",
                                  f"glu pairs columns of an [M, N] tile; the value here is {_shape(state)}"))
        if op.spec.row and state == "vector":
            out.append(ChainIssue(i, op.kind, op.text(), "a row operation before logsumexp, not after",
                                  "the row was already reduced to one value"))
        if state == "vector" and op.tensor in ("row", "tile"):
            out.append(ChainIssue(i, f"{op.kind}({op.tensor_name})", f"[{_dims(op.tensor, state)}]",
                                  f"a tensor that broadcasts to {_shape(state)}: bias(col), scale(col) or a number",
                                  f"broadcast shapes: {op.kind} reads [{_dims(op.tensor, 'tile')}] but the value is "
                                  f"{_shape(state)}"))
        name = op.tensor_name
        if name is not None:
            if name in names and names[name] != (op.tensor, state):
                out.append(ChainIssue(i, f"{op.kind} name", name, "a name not used by another tensor of other shape",
                                      f"tensor {name} is read twice with different shapes"))
            names.setdefault(name, (op.tensor, state))
        if op.kind == "glu":
            state = "half"
        elif op.spec.reduces:
            state = "vector"
    casts = [op for op in chain if op.kind == "cast"]
    if chain and chain[-1].kind == "cast" and chain[-1].arg("dtype") != c_dtype:
        out.append(ChainIssue(len(chain) - 1, "cast", chain[-1].arg("dtype"), c_dtype,
                              f"the chain ends in cast({chain[-1].arg('dtype')}) but c is {c_dtype}"))
    elif casts and chain[-1].kind != "cast" and _narrow_mismatch(casts[-1].arg("dtype"), c_dtype):
        i = max(j for j, op in enumerate(chain) if op.kind == "cast")
        out.append(ChainIssue(i, "cast", casts[-1].arg("dtype"), f"{c_dtype}, fp32, or an explicit final cast",
                              f"a {casts[-1].arg('dtype')} value would be converted to {c_dtype} implicitly"))
    for i, op in enumerate(chain):
        if sum(1 for o in chain if o.kind == op.kind and o.spec.row) > 1 and op.spec.row:
            out.append(ChainIssue(i, op.kind, op.text(), "one row operation per chain", "a second row operation"))
            break
    return out


def _narrow_mismatch(last_cast: str, c_dtype: str) -> bool:
    # bf16 <-> fp16 is lossy both ways: it must be written; widening to fp32 is exact.
    return last_cast != c_dtype and last_cast != "fp32" and c_dtype != "fp32"


def _shape(state: str) -> str:
    return {"tile": "[M, N]", "half": "[M, N/2]", "vector": "[M]"}[state]


def _dims(tensor: str, state: str) -> str:
    width = "N/2" if state == "half" else "N"
    return {"row": width, "col": "M", "tile": f"M, {width}"}[tensor]


def chain_facts(chain: Sequence[EpilogueOp], tensor_dtype: Mapping[str, str] | None = None,
                default_dtype: str = "fp32") -> ChainFacts:
    """Cost and kernel facts of a chain; a tensor without a dtype takes `default_dtype` (C's)."""
    tile_bytes, vec_row, vec_col, tiles, ops, width = 0.0, 0, 0, 0, 0.0, 1.0
    for op in chain:
        ops += op.spec.ops * width
        if op.tensor is not None:
            e = VALUE_BYTES[tensor_dtype_of(op, default_dtype)]
            if op.tensor == "tile":
                tile_bytes += e * width
                tiles = max(tiles, 1)
            elif op.tensor == "row":
                vec_row += e
            else:
                vec_col += e
        if op.spec.pairs:
            width = 0.5
    return ChainFacts(row=any(op.spec.row for op in chain), reduces=any(op.spec.reduces for op in chain),
                      pairs=any(op.spec.pairs for op in chain), tiles=tiles, ops=ops, tile_bytes=tile_bytes,
                      vec_row_bytes=vec_row, vec_col_bytes=vec_col)


def split_min_tn(facts: ChainFacts) -> int | None:
    """The narrowest Tn at which the epilogue runs in two column halves of the tile (each half
    loads its slice of the chain's tensors, computes and stores on its own, so the epilogue holds
    half the temporaries beside the accumulator); None when the chain needs the whole row."""
    if facts.row or facts.reduces:
        return None
    return 64 if facts.pairs else 32


def splits_epilogue(facts: ChainFacts, tn: int) -> bool:
    """Whether an instance with tile width `tn` runs its epilogue in halves (the kernel's EPI_SPLIT)."""
    least = split_min_tn(facts)
    return least is not None and tn >= least


def tensor_dtype_of(op: EpilogueOp, default_dtype: str) -> str:
    return op.arg("dtype") or default_dtype


def chain_text(chain: Sequence[EpilogueOp]) -> str:
    """The canonical text of a chain (a template option; `parse_chain_text` reads it back)."""
    return " >> ".join(op.text() for op in chain)


def parse_chain_text(text: str) -> tuple[EpilogueOp, ...]:
    """Read back `chain_text` output: 'kind(k=v,...) >> kind'. This is a serialization of a
    resolved chain (every argument named), not the language: specs are parsed by formloop.dsl."""
    if not text.strip():
        return ()
    out = []
    for part in text.split(">>"):
        part = part.strip()
        kind, _, rest = part.partition("(")
        keyword = {}
        for item in filter(None, rest.rstrip(")").split(",")):
            k, _, v = item.partition("=")
            keyword[k.strip()] = _literal(v.strip())
        out.append(make_op(kind.strip(), (), keyword))
    return tuple(out)


def _literal(v: str):
    try:
        return float(v)
    except ValueError:
        return v
