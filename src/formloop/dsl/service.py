"""The DSL's functions: plain arguments in, JSON-able dicts out (formloop.api.dsl wraps them for
the CLI and the MCP tools). Every dict has `ok`; a refused spec is an answer, not a failure: `ok`
false, `error` (type, message, field, allowed, fix of the first broken rule, as every api error
reads), `diagnostics` (line, column, field, value, allowed, message of every broken rule) and
`lines` (the same, one line each). Bad arguments (a missing file, a bad shape or calibration, an
unknown solver) raise formloop errors."""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from formloop.dsl.bridge import Design, assignment_text, design
from formloop.dsl.diagnostics import Diagnostic, SpecError
from formloop.dsl.ir import SHAPE_DIMS, SpecIR
from formloop.dsl.lower import read_spec
from formloop.dsl.run import cuda_available, run_program, use_interpreter
from formloop.dsl.validate import Validated, validate
from formloop.errors import InvalidInput
from formloop.workload import MAX_EXTENT
from formloop.evaluate.calibrate import Calibration
from formloop.library.gemm_epilogue_emit import module_source
from formloop.library.gemm_epilogue_ops import chain_text


def parse_dims(text: str, op: str) -> tuple[int, ...]:
    """'4096x4096x4096', '4096,4096,4096' or '4096 x 4096 x 4096' in the operation's order."""
    names = SHAPE_DIMS[op]
    allowed = f"{len(names)} positive integers ({' x '.join(names)}), each <= {MAX_EXTENT}, in ASCII digits"
    if not isinstance(text, str):
        raise InvalidInput("shape", text, allowed)
    parts = [p for p in re.split(r"[x×,\s]+", text.strip()) if p]
    if len(parts) != len(names) or not all(p.isascii() and p.isdigit() and 0 < int(p) <= MAX_EXTENT for p in parts):
        raise InvalidInput("shape", text, allowed)
    return tuple(int(p) for p in parts)


def _load(text: str | None, path: str | Path | None, shape: str | None) -> SpecIR:
    if (text is None) == (path is None):
        raise InvalidInput("spec", "both" if text else "neither", "exactly one of text or path")
    if text is not None and not isinstance(text, str):
        raise InvalidInput("spec", type(text).__name__, "the spec's text (a string)")
    if path is not None and not isinstance(path, (str, Path)):
        raise InvalidInput("spec file", path, "a path (a string)")
    source = "<spec>"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise InvalidInput("spec file", str(path), "an existing file")
        text, source = p.read_text(), str(path)
    spec = read_spec(text, source)
    return spec.with_dims(parse_dims(shape, spec.kernel.op)) if shape else spec


def _calibration(calibration: str | Path | Mapping | None) -> tuple[Mapping[str, float] | None, str]:
    if calibration is None:
        return None, "priors"
    if isinstance(calibration, Mapping):
        return dict(calibration), "given"
    p = Path(calibration)
    if not p.is_file():
        raise InvalidInput("calibration", str(calibration), "a calibration JSON (formloop.evaluate.calibrate)")
    cal = Calibration.load(p)
    return cal.values, cal.key


def _refused(exc: SpecError) -> dict[str, Any]:
    return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc), "field": exc.field,
                                   "allowed": exc.allowed, "fix": exc.fix},
            "source": exc.source, "diagnostics": [d.as_dict() for d in exc.diagnostics], "lines": exc.lines()}


def _summary(v: Validated) -> dict[str, Any]:
    k = v.spec.kernel
    return {"kernel": k.name, "operation": k.op, "arch": k.arch, "chip": k.chip,
            "a": f"{k.a.dtype} {k.a.layout}", "b": f"{k.b.dtype} {k.b.layout}", "c": f"{k.c.dtype} {k.c.layout}",
            "epilogue": chain_text(k.chain), "fixed": dict(k.pins), "open": list(v.open_decisions),
            "align": k.align, "pipeline": {"before": [f"{s.kind}({s.tensor}{', ' + s.dtype if s.dtype else ''})"
                                                      for s in v.spec.pre],
                                           "after": [f"{s.kind}({s.tensor}{', ' + s.dtype if s.dtype else ''})"
                                                     for s in v.spec.post]},
            "walls_checked": list(v.walls_checked), "feasible_designs": v.feasible_designs,
            "template": v.template.name, "template_hash": v.template.content_hash}


def _design(v: Validated, calibration, solver: str = "milp") -> Design:
    values, cal_id = _calibration(calibration)
    return design(v, calibration=values, calibration_id=cal_id, solver=solver)


def check_spec(text: str | None = None, path: str | Path | None = None, shape: str | None = None, *,
               calibration=None, solve: bool = True, solver: str = "milp") -> dict[str, Any]:
    """Parse and validate; with a shape, also solve the open fields and check the instance."""
    try:
        v = validate(_load(text, path, shape))
        out = {"ok": True, **_summary(v)}
        if solve and v.spec.kernel.shape is not None:
            d = _design(v, calibration, solver)
            out["design"] = {**d.as_dict(), "text": assignment_text(d.assignment) if len(d.assignment) == 8 else None}
        return out
    except SpecError as exc:
        return _refused(exc)


def emit_spec(text: str | None = None, path: str | Path | None = None, shape: str | None = None, *,
              calibration=None, solver: str = "milp") -> dict[str, Any]:
    """The Triton source of the spec's main kernel, with the design in its header."""
    try:
        v = validate(_load(text, path, shape))
        k = v.spec.kernel
        header = [f"formloop dsl: kernel {k.name} ({k.op}) from {v.spec.source}",
                  f"template {v.template.name} {v.template.content_hash}, epilogue: {chain_text(k.chain) or 'none'}"]
        if k.shape is not None:
            d = _design(v, calibration, solver)
            a = d.assignment
            chose = f" ({d.solve['solver']} chose {', '.join(d.solved)})" if d.solved else ""
            header.append(f"design: {assignment_text(a)}{chose}")
            if d.check is not None:
                header.append(f"instance check: {'ok' if d.check.ok else 'FAILED'}, certificate {d.check.certificate}")
            load_path, design_dict = a["L"], d.as_dict()
        elif "L" in k.pins:
            header.append(f"fixed: {dict(k.pins)}; open: {', '.join(k.open_decisions) or 'none'} (solved at run)")
            load_path, design_dict = k.pins["L"], None
        else:
            raise SpecError(v.spec.source, [_need_shape(k)])
        header += [f"launch: grid (tiles, split_k, batch); BLOCK_M/N/K, num_warps, num_stages from the design"]
        header += [f"pipeline stage {s.kind}({s.tensor}) runs formloop.library.gemm_epilogue_stage.convert"
                   for s in (*v.spec.pre, *v.spec.post)]
        source = module_source(k.kernel_spec(), load_path, header=header)
        return {"ok": True, **_summary(v), "load_path": load_path, "design": design_dict, "source": source}
    except SpecError as exc:
        return _refused(exc)


def _need_shape(k):
    return Diagnostic(*k.pos("load"), "load", "?", "tma, ptr, or a shape (shape = ... or --shape) to solve it",
                      "the load path selects the emitted source")


def run_spec(text: str | None = None, path: str | Path | None = None, shape: str | None = None, *,
             calibration=None, timing: bool = True, seed: int = 0, solver: str = "milp") -> dict[str, Any]:
    """Check, solve, instance-check, then run: correctness vs the float64 torch reference and, on a
    GPU, timing (CUDA graph and eager) with the SOL fraction; else the interpreter, reduced shape."""
    try:
        spec = _load(text, path, shape)
        if spec.kernel.shape is None:
            raise SpecError(spec.source, [_shape_missing(spec)])
        v = validate(spec)
        d = _design(v, calibration, solver)
        if not cuda_available():
            use_interpreter()
        result = run_program(v.spec, d, timing=timing, seed=seed)
        return {"ok": bool(result["correct"]), **_summary(v), "design": d.as_dict(),
                "design_text": assignment_text(d.assignment), **result}
    except SpecError as exc:
        return _refused(exc)


def _shape_missing(spec: SpecIR):
    return Diagnostic(*spec.kernel.pos("kernel"), "shape", "missing",
                      f"{' x '.join(SHAPE_DIMS[spec.kernel.op])} in the spec, or --shape", "run needs a problem size")
