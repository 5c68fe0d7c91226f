"""Speed-of-light reports: an operator at a shape, or a problem file's reference model."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from formloop.api.values import plain
from formloop.errors import InvalidInput
from formloop.measure.sandbox import run_untrusted
from formloop.sol import sol_report as count_and_bound
from formloop.sol.ops import OPS, get_op, parse_op_shape

PROBLEM_WALL_S = 120.0
"""How long a problem file may take to import and trace in its child (seconds)."""


def problem_sol_job(path: str, chip: str, dtype: str | None, clock_mhz: float | None,
                    precision: str | None) -> dict:
    """What runs in the child: the automatic SOL of a problem file, as a plain dict."""
    from formloop.sol.auto import sol_for_problem  # imports torch

    return plain(sol_for_problem(Path(path), chip, dtype, clock_mhz=clock_mhz,
                                 compute_precision=precision).as_dict())


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
        path = Path(problem)
        if not path.is_file() or path.suffix != ".py":
            raise InvalidInput("problem path", str(problem), "an existing .py file with Model, get_inputs, "
                                                             "get_init_inputs")
        # The problem file is code formloop did not write: it runs in a child under a time limit.
        d = run_untrusted(problem_sol_job, str(path.resolve()), chip, dtype, clock_mhz, precision,
                          what=f"problem file {path}", wall_s=PROBLEM_WALL_S)
        return plain({**d, "report": d})
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
