"""Speed-of-light reports: an operator at a shape, or a problem file's reference model."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from formloop.api.values import plain
from formloop.errors import InvalidInput
from formloop.sol import sol_report as count_and_bound
from formloop.sol.ops import OPS, get_op, parse_op_shape


def sol_report(op: str | None = None, shape: str | Mapping[str, Any] | Sequence[Any] | None = None, *,
               dtype: str | None = None, chip: str = "h100", clock_mhz: float | None = None,
               precision: str | None = None, problem: str | None = None) -> dict:
    """FLOPs, minimum DRAM bytes, intensity, bound and time floor per compute precision, for operator
    `op` at `shape` (the shape grammar over the op's fields, or a mapping) or for a problem file
    (counted at dispatch level from its reference model; imports torch). Times in s, source: sol.
    `report` repeats the fields nested, where MCP clients have read them."""
    if problem is not None:
        if op is not None or shape is not None:
            raise InvalidInput("arguments", f"{op or ''} --shape {shape or ''}".strip(),
                               "either OP --shape ... or --problem PATH, not both")
        from formloop.sol.auto import sol_for_problem  # imports torch

        report = sol_for_problem(Path(problem), chip, dtype, clock_mhz=clock_mhz, compute_precision=precision)
    else:
        if op is None:
            raise InvalidInput("operator", None, sorted(OPS), fix="give an operator with --shape, or --problem PATH")
        spec = get_op(op)
        if shape is None:
            raise InvalidInput("--shape", None, f"{op} fields {','.join(spec.fields)}")
        fields = parse_op_shape(op, shape) if isinstance(shape, str) else shape
        report = count_and_bound(op, fields, dtype or "fp32", chip, clock_mhz=clock_mhz, compute_precision=precision)
    d = report.as_dict()
    return plain({**d, "report": d})


def sol_ops() -> dict:
    """The operators the hand counts know: their shape fields (the order of --shape), optional
    fields with defaults, and what each computes."""
    return plain({"ops": [{"op": name, "fields": list(s.fields), "defaults": dict(s.defaults or {}),
                           "choices": {k: list(v) for k, v in (s.choices or {}).items()}, "doc": s.doc}
                          for name, s in sorted(OPS.items())]})
