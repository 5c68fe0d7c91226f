"""What the attention templates compute, independent of any design: shapes, element types, and the
checks that turn unsupported input into a named error instead of a wrong answer.

Decode: one new query token per sequence, O[b, h] = softmax(q[b, h]·K[b, h // G]ᵀ · D^-1/2) · V[b, h // G]
over the L cached keys, G = Hq / Hkv query heads per key/value head (grouped-query attention).
Prefill: L query tokens against the same L keys, causal (query i sees keys 0..i) or full.
The shape is written B,Hq,Hkv,D,L in both cases."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from formloop.dtypes import ATTENTION_DTYPES, dtype_bytes
from formloop.errors import InvalidInput

SHAPE_FIELDS = ("B", "Hq", "Hkv", "D", "L")
DTYPE_BYTES = {d: dtype_bytes(d) for d in ATTENTION_DTYPES}  # a view of formloop.dtypes: the types it offers
HEAD_DIMS = (16, 32, 64, 128, 256)
"""Head dimensions the kernels support: powers of two the tensor-core dots take (>= 16), up to the
register budget of a 256-wide accumulator row."""


def parse_shape(shape: str | Sequence[int] | Mapping[str, int]) -> dict[str, int]:
    """'B,Hq,Hkv,D,L' (or a sequence or mapping of those fields) as checked integers."""
    if isinstance(shape, str):
        parts = [p.strip() for p in shape.split(",")]
    elif isinstance(shape, Mapping):
        missing = [f for f in SHAPE_FIELDS if f not in shape]
        extra = sorted(set(shape) - set(SHAPE_FIELDS))
        if missing or extra:
            raise InvalidInput("attention shape fields", sorted(shape), ",".join(SHAPE_FIELDS))
        parts = [shape[f] for f in SHAPE_FIELDS]
    else:
        parts = list(shape)
    if len(parts) != len(SHAPE_FIELDS):
        raise InvalidInput("attention shape", shape, "five integers B,Hq,Hkv,D,L (batch, query heads, key/value "
                                                     "heads, head dim, KV length)")
    values = {}
    for name, p in zip(SHAPE_FIELDS, parts):
        try:
            v = int(p)
            if isinstance(p, float) and v != p:
                raise ValueError
        except (TypeError, ValueError):
            raise InvalidInput(f"shape {name}", p, "an integer") from None
        values[name] = v
    check_shape(values)
    return values


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
