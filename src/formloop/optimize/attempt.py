"""One problem's steps, each a plain function of plain arguments (so a process pool can run them):
bootstrap (load, SOL floor, capture, recognize), build (assemble attempt k's ModelNew file),
measure (the harness, then the integrity battery, both in a child process) and the torch.compile
baseline (the same harness on a ModelNew that is the compiled reference)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from formloop.optimize.assemble import assemble
from formloop.optimize.capture import CaptureFailed, capture
from formloop.optimize.recognize import recognize
from formloop.sol.problem import load_problem

# A child timed out with less than this many seconds (the deadline's doing): not recorded, redone later.
# With more, a time-out is the candidate's own and counts as a failed attempt.
CUT_S = 300.0

WRAPPER = '''"""{name} at its SMALL sizes (written by formloop optimize; the problem itself is {path})."""
from formloop.sol.problem import load_problem as _load

_P = _load({path!r}, small=True)
Model, get_inputs, get_init_inputs = _P.Model, _P.get_inputs, _P.get_init_inputs
'''

COMPILED = '''"""torch.compile of {name}'s reference: the baseline a user already has (formloop optimize)."""
import torch
from formloop.sol.problem import load_problem

PROBLEM, SMALL = {path!r}, {small!r}


class ModelNew(torch.nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        ref = load_problem(PROBLEM, small=SMALL).Model(*init_inputs)
        for name, child in ref.named_children():
            self.add_module(name, child)
        for name, p in ref.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name, b in ref.named_buffers(recurse=False):
            self.register_buffer(name, b)
        self._compiled = [torch.compile(ref)]   # shares the parameters above; a list keeps it out of state_dict

    def forward(self, *args):
        return self._compiled[0](*args)
'''


def problem_file(path: str, small: bool, out: Path) -> str:
    """The file the harness loads: the problem itself, or a wrapper that loads it at SMALL sizes."""
    if not small:
        return str(Path(path).resolve())
    p = Path(path)
    target = out / "problems" / p.name
    target.parent.mkdir(parents=True, exist_ok=True)
    text = WRAPPER.format(name=p.stem, path=str(p.resolve()))
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return str(target)


def bootstrap(path: str, *, small: bool, chip: str) -> dict[str, Any]:
    """Load, count the SOL floor, capture, recognize. Never raises: a failure is the problem's status."""
    out: dict[str, Any] = {"path": str(path), "name": Path(path).stem, "level": None, "status": "ready", "reason": "",
                           "sol_floor_s": None, "sol_note": "", "recognition": None}
    try:
        prob = load_problem(path, small=small)
        out["level"] = prob.level
    except Exception as exc:  # noqa: BLE001 - a broken problem file keeps nothing and is reported
        return {**out, "status": "reference", "reason": f"cannot load: {type(exc).__name__}: {exc}"[:400]}
    try:
        from formloop.sol.auto import sol_for_problem

        r = sol_for_problem(prob, chip)
        out["sol_floor_s"] = float(r.time_floor_s)
        out["sol_note"] = f"SOL floor on {r.chip}, {r.compute_precision or r.dtype}, {r.bound}-bound (model)"
    except Exception as exc:  # noqa: BLE001 - no floor: the SOL-gap rule cannot fire for it
        out["sol_note"] = f"no SOL floor: {type(exc).__name__}: {exc}"[:300]
    try:
        rec = recognize(capture(prob))
    except CaptureFailed as exc:
        return {**out, "status": "reference", "reason": f"not captured: {exc}"}
    except Exception as exc:  # noqa: BLE001
        return {**out, "status": "reference", "reason": f"capture failed: {type(exc).__name__}: {exc}"[:400]}
    out["recognition"] = rec.as_dict()
    if not rec.regions:
        why = "; ".join(f"{f['op']}: {f['reason']}" for f in rec.fallbacks[:4]) or "no compute operators"
        return {**out, "status": "reference", "reason": f"no region formloop implements ({why})"}
    return out


def build(path: str, *, small: bool, tier: str, attempt: int, out_dir: str,
          fp32_operands: str = "auto", spec: str | None = None, prefix: str = "a",
          tolerance: str = "kernelbench") -> dict[str, Any]:
    """Assemble attempt `attempt`'s ModelNew and write it; `candidate` is None with `reason` if no
    region could be given an instance."""
    name = Path(path).stem
    try:
        prob = load_problem(path, small=small)
        cap = capture(prob)
        rec = recognize(cap)
        asm = assemble(cap, rec, tier=tier, attempt=attempt, small=small, fp32_operands=fp32_operands, spec=spec,
                       tolerance=tolerance)
    except Exception as exc:  # noqa: BLE001
        return {"candidate": None, "reason": f"assembly failed: {type(exc).__name__}: {exc}"[:400]}
    if not asm.regions:
        why = "; ".join(s["reason"] for s in asm.skipped) or "no regions"
        return {"candidate": None, "reason": f"no region got an instance: {why}"[:400], "skipped": asm.skipped}
    target = Path(out_dir) / "candidates" / f"{name}_{prefix}{attempt}.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(asm.source)
    return {"candidate": str(target), "regions": asm.regions, "skipped": asm.skipped,
            "fallbacks": rec.fallbacks}


def _options(tier: str, tolerance: str) -> dict[str, Any]:
    return {"tolerance": tolerance, "sets": 3 if tier == "gpu" else 2}


def _limits(limit_s: float | None):
    from formloop.measure.sandbox import Limits
    return None if limit_s is None else Limits(wall_s=min(600.0, float(limit_s)))


def measure(problem: str, candidate: str, *, tier: str, tolerance: str, chip: str | None,
            integrity: bool = True, limit_s: float | None = None) -> dict[str, Any]:
    """Harness, then (if correct) the integrity battery; both sandboxed (each child at most
    `limit_s` seconds). Returns the attempt's row."""
    from formloop.measure.jobs import run_harness, run_integrity

    t0 = time.monotonic()
    limits = _limits(limit_s)

    try:
        h = run_harness(problem, candidate, chip=chip if tier == "gpu" else None, limits=limits,
                        **_options(tier, tolerance))
    except Exception as exc:  # noqa: BLE001 - a candidate that cannot even load is a failed attempt
        return {"correct": False, "accepted": False, "verdict": f"harness error: {type(exc).__name__}: {exc}"[:300],
                "time_s": None, "ref_s": None, "time_source": None, "sol_fraction": None, "harness": None}
    ct, rt = h.get("candidate_time") or {}, h.get("reference_time") or {}
    row = {"correct": bool(h.get("correct")), "accepted": False, "time_s": ct.get("seconds"),
           "ref_s": rt.get("seconds"),
           "time_source": ct.get("source"), "sol_fraction": h.get("sol_fraction"),
           "harness": {k: h.get(k) for k in ("summary", "speedup", "warnings", "notes", "seed", "verdict")}}
    cut = limit_s is not None and limit_s < CUT_S
    if h.get("verdict") == "timed-out" and cut:
        return {**row, "verdict": "timed-out", "cut_by_deadline": True}
    if not row["correct"]:
        reasons = [s.get("reason") for s in h.get("sets", []) if not s.get("ok")]
        row["verdict"] = "incorrect: " + str(h.get("summary") or (reasons[0] if reasons else "harness check failed"))
        return {**row, "verdict": row["verdict"][:300]}
    if not integrity:
        return {**row, "verdict": "integrity not run", "accepted": False}
    try:
        opts = {"tolerance": tolerance, **({"chip": chip} if tier == "gpu" and chip else {})}
        left = None if limit_s is None else max(30.0, limit_s - (time.monotonic() - t0))
        r = run_integrity(problem, candidate, limits=_limits(left), **opts)
    except Exception as exc:  # noqa: BLE001
        return {**row, "verdict": f"integrity error: {type(exc).__name__}: {exc}"[:300]}
    flags = [{"check": c.get("obligation"), "severity": (c.get("details") or {}).get("severity"),
              "reason": (c.get("reason") or "")[:200]} for c in r.get("checks", [])
             if (c.get("details") or {}).get("severity") not in (None, "clean")]
    if r.get("verdict") == "timed-out" and left is not None and left < CUT_S:
        return {**row, "verdict": "timed-out", "cut_by_deadline": True}
    return {**row, "accepted": bool(r.get("accepted")) and bool(r.get("correct", True)),
            "verdict": str(r.get("verdict")), "integrity_flags": flags}


def compile_baseline(path: str, problem: str, *, small: bool, out_dir: str, tolerance: str,
                     limit_s: float | None = None) -> dict[str, Any]:
    """The reference under torch.compile, timed by the same harness (gpu tier only)."""
    from formloop.measure.jobs import run_harness

    target = Path(out_dir) / "baselines" / f"{Path(path).stem}_compiled.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(COMPILED.format(name=Path(path).stem, path=str(Path(path).resolve()), small=small))
    try:
        h = run_harness(problem, str(target), tolerance=tolerance, sets=1, limits=_limits(limit_s))
    except Exception as exc:  # noqa: BLE001
        return {"compile_s": None, "note": f"{type(exc).__name__}: {exc}"[:300]}
    t = (h.get("candidate_time") or {}).get("seconds") if h.get("correct") else None
    return {"compile_s": t, "note": "" if t else str(h.get("summary") or "torch.compile output incorrect")[:300]}
