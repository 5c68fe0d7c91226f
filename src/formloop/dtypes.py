"""Element types: the one table every layer reads (bytes, torch dtype, tensor-core mode, tolerances).

A row is a storage format (fp32, bf16, ...) or a compute mode over another format's storage (tf32:
fp32 in memory, TF32 tensor cores in the dot). Which rows a consumer accepts is the consumer's
business (the GEMM kernels take `KERNEL_DTYPES`, the speed-of-light counts take storage rows); the
numbers are declared here only. torch is not imported here: rows name its dtypes by attribute."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from formloop.errors import InvalidInput, UnknownName


@dataclass(frozen=True)
class DType:
    """One element type.

    bytes: storage bytes per element. torch: the attribute of the torch module that stores it.
    storage: False for a compute mode that lives in another row's storage (tf32, tf32x3 in fp32).
    peak: the chip's peak-rate key for math in this type (`Chip.peak`).
    dot_precision: `input_precision` of Triton's tl.dot for the GEMM kernels ("ieee" | "tf32" | "tf32x3"),
    None where the kernels do not take this type.
    kernel_tolerance: ‖out − ref‖ / ‖ref‖ a kernel may reach against a float64 reference on the same
    (already rounded) inputs; None where no kernel takes this type.
    compare_rtol: the relative slack (and the RMS-scaled absolute slack) of an element-wise output
    comparison (`formloop.measure.compare`); fp32's leaves room for TF32 tensor cores.
    kernelbench_tol: KernelBench's allclose tolerance (atol = rtol) for outputs of this type; None where
    KernelBench states none.
    attention_tolerance: ‖out − ref‖ / ‖ref‖ an attention kernel may reach against the float32
    reference on the same inputs (the probabilities are rounded to this type before the second dot,
    one rounding more than a GEMM); None where no attention kernel takes this type.
    aliases: other spellings accepted on input (torch names, common short names)."""

    name: str
    bytes: int
    torch: str
    storage: bool
    peak: str
    dot_precision: str | None
    kernel_tolerance: float | None
    compare_rtol: float | None
    aliases: tuple[str, ...] = ()
    kernelbench_tol: float | None = None
    attention_tolerance: float | None = None


DTYPES: tuple[DType, ...] = (
    DType("fp64", 8, "float64", True, "fp64", None, None, 1e-9, ("float64", "double"), 1e-4),
    DType("fp32", 4, "float32", True, "fp32", "ieee", 1e-4, 2e-3, ("float32", "float"), 1e-4),
    DType("tf32", 4, "float32", False, "tf32", "tf32", 2e-3, None),
    # tf32x3: fp32 storage, each operand split into a tf32 high part and a tf32 residual, three tf32
    # tensor-core dots (hi·hi + hi·lo + lo·hi, Triton's input_precision "tf32x3"): about fp32 accuracy
    # (per-product error ~2^-20 against fp32's 2^-24 accumulation) at a third of the tf32 rate, so its
    # SOL peak is the chip's tf32 peak / 3 (`Chip.peak("tf32x3")`).
    DType("tf32x3", 4, "float32", False, "tf32x3", "tf32x3", 1e-4, None),
    DType("bf16", 2, "bfloat16", True, "bf16", "ieee", 1e-2, 2e-2, ("bfloat16",), 1e-2, 1e-2),
    DType("fp16", 2, "float16", True, "fp16", "ieee", 2e-3, 1e-2, ("float16", "half"), 1e-2, 4e-3),
    DType("fp8", 1, "float8_e4m3fn", True, "fp8", None, None, 1.25e-1, ("float8_e4m3fn", "fp8e4m3", "fp8_e4m3")),
    DType("fp8e5m2", 1, "float8_e5m2", True, "fp8", None, None, 2.5e-1, ("float8_e5m2", "fp8_e5m2")),
)

_BY_NAME = {d.name: d for d in DTYPES}
_BY_SPELLING = {**{a: d for d in DTYPES for a in d.aliases}, **_BY_NAME}

KERNEL_DTYPES: tuple[str, ...] = tuple(d.name for d in DTYPES if d.kernel_tolerance is not None)
"""The element types the template library's GEMM kernels compute in (and workloads may name)."""
ATTENTION_DTYPES: tuple[str, ...] = tuple(d.name for d in DTYPES if d.attention_tolerance is not None)
"""The element types the attention kernels compute in (16-bit: the tensor-core dots of Q·Kᵀ and P·V)."""
STORAGE_DTYPES: tuple[str, ...] = tuple(d.name for d in DTYPES if d.storage)


def get_dtype(name: str, among: Iterable[str] | None = None, *, field: str = "dtype") -> DType:
    """The row for `name` or one of its aliases ('torch.' prefix and case ignored), refused with
    `field` and the allowed names when unknown or not `among` the names the caller accepts."""
    allowed = sorted(among) if among is not None else sorted(_BY_NAME)
    key = str(name).strip().lower().removeprefix("torch.") if isinstance(name, str) else None
    row = _BY_SPELLING.get(key) if key is not None else None
    if row is None:
        raise UnknownName(field, name, allowed)
    if row.name not in allowed:
        raise InvalidInput(field, name, allowed)
    return row


def dtype_bytes(name: str, among: Iterable[str] | None = None) -> int:
    """Storage bytes per element of `name`."""
    return get_dtype(name, among).bytes


def dtype_of_torch(torch_dtype: object) -> DType:
    """The storage row of a torch dtype (torch.float32 -> fp32), refused when the table lacks it."""
    key = str(torch_dtype).removeprefix("torch.")
    for d in DTYPES:
        if d.storage and d.torch == key:
            return d
    raise UnknownName("torch dtype", str(torch_dtype), [f"torch.{d.torch}" for d in DTYPES if d.storage])


def torch_dtype(name: str):
    """The torch dtype that stores `name` (imports torch: only callers that already need it call this)."""
    import torch

    return getattr(torch, get_dtype(name).torch)
