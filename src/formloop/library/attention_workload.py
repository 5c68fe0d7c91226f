"""What the attention templates compute, independent of any design: shapes, element types, and the
checks that turn unsupported input into a named error instead of a wrong answer.

Decode: one new query token per sequence, O[b, h] = softmax(q[b, h]·K[b, h // G]ᵀ · D^-1/2) · V[b, h // G]
over the L cached keys, G = Hq / Hkv query heads per key/value head (grouped-query attention).
Prefill: L query tokens against the same L keys, causal (query i sees keys 0..i) or full.
The shape is written B,Hq,Hkv,D,L in both cases; the text may name `page=P` (a paged KV cache of P
tokens per page, decode) and `causal=0|1` (prefill) after it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from formloop.dtypes import ATTENTION_DTYPES, dtype_bytes, get_dtype
from formloop.errors import InvalidInput
from formloop.workload import EXTENTS, MAX_EXTENT, WorkloadSpec, as_integer, split_shape

SHAPE_FIELDS = ("B", "Hq", "Hkv", "D", "L")
WORKLOAD_OPTIONS = ("page", "causal")
DTYPE_BYTES = {d: dtype_bytes(d) for d in ATTENTION_DTYPES}  # a view of formloop.dtypes: the types it offers
HEAD_DIMS = (16, 32, 64, 128, 256)
"""Head dimensions the kernels support: powers of two the tensor-core dots take (>= 16), up to the
register budget of a 256-wide accumulator row."""


def parse_shape(shape: str | Sequence[int] | Mapping[str, int]) -> dict[str, int]:
    """'B,Hq,Hkv,D,L' or 'B=1,Hq=32,...' (the shape grammar of formloop.workload), or a sequence or
    mapping of those fields, as checked integers."""
    return split_workload(shape)[0]


def split_workload(shape: str | Sequence[int] | Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(the five shape fields, the workload options the text names): the text may add `page=P`
    (decode: tokens per page of a paged KV cache) and `causal=0|1` (prefill) after the shape."""
    if isinstance(shape, str):
        raw = split_shape(shape, SHAPE_FIELDS, what="attention shape")
        unknown = sorted(set(raw) - set(SHAPE_FIELDS) - set(WORKLOAD_OPTIONS))
        if unknown:
            raise InvalidInput("attention shape name", unknown[0], SHAPE_FIELDS + WORKLOAD_OPTIONS)
        options = {k: raw.pop(k) for k in WORKLOAD_OPTIONS if k in raw}
        parts = [raw[f] for f in SHAPE_FIELDS] if set(raw) == set(SHAPE_FIELDS) else list(raw.values())
    elif isinstance(shape, Mapping):
        missing = [f for f in SHAPE_FIELDS if f not in shape]
        extra = sorted(set(shape) - set(SHAPE_FIELDS))
        if missing or extra:
            raise InvalidInput("attention shape fields", sorted(shape), ",".join(SHAPE_FIELDS))
        parts, options = [shape[f] for f in SHAPE_FIELDS], {}
    else:
        parts, options = list(shape), {}
    if len(parts) != len(SHAPE_FIELDS):
        raise InvalidInput("attention shape", shape, "five integers B,Hq,Hkv,D,L (batch, query heads, key/value "
                                                     "heads, head dim, KV length)")
    values = {}
    for name, p in zip(SHAPE_FIELDS, parts):
        v = as_integer(p)
        if v is None:
            raise InvalidInput(f"shape {name}", p, "an integer")
        if v > MAX_EXTENT:
            raise InvalidInput(f"shape {name}", v, EXTENTS)
        values[name] = v
    check_shape(values)
    out = {}
    for k, v in options.items():
        n = as_integer(v)
        if n is None:
            raise InvalidInput("page size" if k == "page" else k, v, "an integer")
        out[k] = n
    return values, out


def check_shape(s: Mapping[str, int]) -> None:
    """Named errors for every shape the kernels do not compute correctly."""
    for name in ("B", "Hq", "Hkv"):
        if s[name] < 1:
            raise InvalidInput(f"shape {name}", s[name], "an integer >= 1")
    if s["L"] < 1:
        raise InvalidInput("KV length L", s["L"], "an integer >= 1 (an empty KV cache has no softmax: "
                                                  "the output would be 0/0)")
    if s["D"] not in HEAD_DIMS:
        raise InvalidInput("head dim D", s["D"], HEAD_DIMS, fix="the tensor-core dots need a power of two >= 16")
    if s["Hq"] % s["Hkv"]:
        raise InvalidInput("query heads Hq", s["Hq"], f"a multiple of Hkv={s['Hkv']} (each key/value head serves "
                                                       f"Hq/Hkv query heads)")


def check_dtype(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise InvalidInput("dtype", dtype, sorted(DTYPE_BYTES))
    return DTYPE_BYTES[dtype]


def check_page(page: int) -> int:
    """The page size of a paged KV cache; 0 means one contiguous cache per sequence."""
    if isinstance(page, bool) or not isinstance(page, int) or page < 0:
        raise InvalidInput("page size", page, "0 (contiguous cache) or a positive number of tokens per page")
    return page


def workload(shape, dtype: str = "bf16", *, page: int = 0, causal: int | None = None) -> dict[str, int]:
    """Template parameters of one attention workload (`causal` only for prefill)."""
    s = parse_shape(shape)
    out = {**s, "e": check_dtype(dtype), "page": check_page(page)}
    if causal is not None:
        if causal not in (0, 1):
            raise InvalidInput("causal", causal, (0, 1))
        out["causal"] = int(causal)
        del out["page"]
    return out


@dataclass(frozen=True)
class AttentionWorkload(WorkloadSpec):
    """One attention workload as formloop names workloads (operator, extents, dtype; its key is what
    the population stores), with the page size (decode) or causal flag (prefill) its template
    parameters carry beside the extents. Checked on construction."""

    page: int = 0
    causal: int | None = None

    def __post_init__(self) -> None:
        get_dtype(self.dtype, ATTENTION_DTYPES)  # refused with the attention kernels' types, not every kernel's
        super().__post_init__()
        check_shape(self.shape)
        _ = self.params  # dtype, page and causal are checked where the parameters are built

    @property
    def params(self) -> dict[str, int]:
        return workload(self.shape, self.dtype, page=self.page, causal=self.causal)

    @property
    def key(self) -> str:
        extra = f" page={self.page}" if self.page else ""
        return super().key + extra + (f" causal={self.causal}" if self.causal is not None else "")
