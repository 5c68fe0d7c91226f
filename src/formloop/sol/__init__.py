"""Speed-of-light analysis: FLOPs and minimum bytes per operator (`ops`), the report (`report`),
automatic counting of any PyTorch reference (`auto`, imports torch) and problem files (`problem`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from formloop.hw.chips import Chip, get_chip
from formloop.sol import ops_vector  # noqa: F401  (normalization, softmax, pointwise, reduction, pooling and
#                                       loss formulas register on import; importing any sol module runs this first)
from formloop.sol.ops import count_op, normalize_dtype, op_names
from formloop.sol.report import SOLReport, build_report

__all__ = ["SOLReport", "sol_report", "resolve_chip", "op_names"]


def resolve_chip(chip: str | Chip, clock_mhz: float | None = None) -> Chip:
    """A chip by name or value, locked to `clock_mhz` when given (compute peaks scale with it)."""
    c = get_chip(chip) if isinstance(chip, str) else chip
    return c.at_clock(clock_mhz) if clock_mhz is not None else c


def sol_report(op: str, shape: Mapping | Sequence, dtype: str, chip: str | Chip, *,
               clock_mhz: float | None = None, compute_precision: str | None = None) -> SOLReport:
    """Speed-of-light report of operator `op` at `shape` with `dtype` storage on `chip`.

    `shape` is a dict of the op's fields or a sequence in the op's field order
    (`formloop.sol.ops.get_op(op).fields`); `compute_precision` defaults to the first tensor
    precision the data type allows on the chip (TF32 for FP32 GEMMs)."""
    dtype = normalize_dtype(dtype)
    bound, counts = count_op(op, shape, dtype)
    return build_report(op.lower(), bound, dtype, resolve_chip(chip, clock_mhz), counts,
                        compute_precision=compute_precision)
