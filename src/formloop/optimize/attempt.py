"""One problem's steps, each a plain function of plain arguments (so a process pool or Ray can run
them): bootstrap (load, dtype variant, SOL floor, capture, recognize), build (assemble attempt k's
ModelNew file), measure (the harness, then the integrity battery on the harness's own timing, both
in ONE sandboxed child: one interpreter start, one CUDA context, one timing per attempt). The
torch.compile baseline (the same harness on `COMPILED`, a ModelNew that is the compiled reference)
is formloop.optimize.compile_phase's.

Each step returns its phase times (`phase_seconds`, host wall seconds): load, capture, recognize, solve
(MILP + emission), child start, compile (Triton JIT compiles in the child, GPU tier), harness and
integrity (each less its compiles).

`dtype`: 'fp32' runs each problem as written; 'bf16' casts the models and the floating inputs to
bfloat16 (the harness's `precision`, with its bf16 tolerance), baselines included. A problem that
cannot be cast (integer or boolean inputs, or a reference that fails in bf16) stays fp32 and
bootstrap says why (`dtype_reason`)."""
from __future__ import annotations

import functools
import hashlib
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from formloop.sol.problem import load_problem

DTYPES = ("fp32", "bf16")


@contextmanager
def _timed(phases: dict, name: str):
    t0 = time.monotonic()
    try:
        yield
    finally:
        phases[name] = round(phases.get(name, 0.0) + time.monotonic() - t0, 4)


def folded(seconds: dict[str, float]) -> dict[str, float]:
    """A child's seconds per stage (or step) with the numbers in the keys folded: 'input set 2' -> 'input set #'."""
    out: dict[str, float] = {}
    for k, sec in seconds.items():
        key = re.sub(r"\d+", "#", k)
        out[key] = round(out.get(key, 0.0) + sec, 4)
    return out


def _torch_dtype(dtype: str | None):
    import torch
    return torch.bfloat16 if dtype == "bf16" else None


def cast_check(prob, dtype: str) -> str:
    """'' when `prob` runs in `dtype`; otherwise why it stays fp32 (inputs that are not floating
    point, or a reference that fails in bf16 at SMALL sizes on the CPU)."""
    if dtype == "fp32":
        return ""
    import torch

    from formloop.sol.problem import call_inputs, load_problem
    small = load_problem(prob.path, small=True) if getattr(prob, "path", None) else prob
    with torch.device("meta"):
        inputs = call_inputs(small, "get_inputs")
    kinds = sorted({str(t.dtype) for t in inputs if isinstance(t, torch.Tensor) and not t.is_floating_point()})
    if kinds:
        return f"stays fp32: inputs of dtype {', '.join(kinds)} (only floating inputs are cast to {dtype})"
    try:
        torch.manual_seed(0)
        model = small.Model(*call_inputs(small, "get_init_inputs")).to(torch.bfloat16)
        args = [t.to(torch.bfloat16) if isinstance(t, torch.Tensor) else t for t in call_inputs(small, "get_inputs")]
        with torch.no_grad():
            model(*args)
    except Exception as exc:  # noqa: BLE001 - the reference itself cannot run in bf16
        return f"stays fp32: the reference fails in {dtype}: {type(exc).__name__}: {str(exc)[:160]}"
    return ""


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
        # The harness calls a candidate under its poisoned-allocation dispatch mode; TorchDynamo does not
        # compile a frame under a dispatch mode (and then never compiles it): run torch.compile outside it.
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
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


def bootstrap(path: str, *, small: bool, chip: str, dtype: str = "fp32") -> dict[str, Any]:
    """Load, settle the dtype, count the SOL floor, capture, recognize. Never raises: a failure is
    the problem's status."""
    phases: dict[str, float] = {}
    out: dict[str, Any] = {"path": str(path), "name": Path(path).stem, "level": None, "status": "ready", "reason": "",
                           "sol_floor_s": None, "sol_note": "", "recognition": None, "dtype": "fp32",
                           "dtype_reason": "", "phase_seconds": phases}
    try:
        with _timed(phases, "load"):
            prob = load_problem(path, small=small)
        out["level"] = prob.level
    except Exception as exc:  # noqa: BLE001 - a broken problem file keeps nothing and is reported
        return {**out, "status": "reference", "reason": f"cannot load: {type(exc).__name__}: {exc}"[:400]}
    try:
        with _timed(phases, "cast check"):
            why = cast_check(prob, dtype)
    except Exception as exc:  # noqa: BLE001
        why = f"stays fp32: {type(exc).__name__}: {exc}"[:300]
    out["dtype"], out["dtype_reason"] = ("fp32", why) if why else (dtype, "")
    try:
        from formloop.sol.auto import sol_for_problem

        with _timed(phases, "sol"):
            r = sol_for_problem(prob, chip, None if out["dtype"] == "fp32" else out["dtype"])
        out["sol_floor_s"] = float(r.time_floor_s)
        out["sol_note"] = f"SOL floor on {r.chip}, {r.precision_words}, {r.bound}-bound (model)"
    except Exception as exc:  # noqa: BLE001 - no floor: the SOL-gap rule cannot fire for it
        out["sol_note"] = f"no SOL floor: {type(exc).__name__}: {exc}"[:300]
    from formloop.optimize.capture import CaptureFailed, capture  # noqa: PLC0415 (torch: imported when a step runs)
    from formloop.optimize.recognize import recognize  # noqa: PLC0415

    try:
        with _timed(phases, "capture"):
            cap = capture(prob, _torch_dtype(out["dtype"]))
        with _timed(phases, "recognize"):
            rec = recognize(cap)
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
          dtype: str = "fp32", tolerance: str = "kernelbench") -> dict[str, Any]:
    """Assemble attempt `attempt`'s ModelNew and write it; `candidate` is None with `reason` if no
    region could be given an instance. `dtype` is the problem's settled dtype (bootstrap's)."""
    from formloop.optimize.assemble import assemble  # noqa: PLC0415 (torch: imported when a step runs)
    from formloop.optimize.capture import capture  # noqa: PLC0415
    from formloop.optimize.recognize import recognize  # noqa: PLC0415

    name = Path(path).stem
    phases: dict[str, float] = {}
    try:
        with _timed(phases, "load"):
            prob = load_problem(path, small=small)
        with _timed(phases, "capture"):
            cap = capture(prob, _torch_dtype(dtype))
        with _timed(phases, "recognize"):
            rec = recognize(cap)
        with _timed(phases, "solve"):
            asm = assemble(cap, rec, tier=tier, attempt=attempt, small=small, fp32_operands=fp32_operands, spec=spec,
                           tolerance=tolerance)
    except Exception as exc:  # noqa: BLE001
        return {"candidate": None, "reason": f"assembly failed: {type(exc).__name__}: {exc}"[:400],
                "phase_seconds": phases}
    if not asm.regions:
        why = "; ".join(s["reason"] for s in asm.skipped) or "no regions"
        return {"candidate": None, "reason": f"no region got an instance: {why}"[:400], "skipped": asm.skipped,
                "phase_seconds": phases}
    target = Path(out_dir) / "candidates" / f"{name}_{prefix}{attempt}.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(asm.source)
    return {"candidate": str(target), "regions": asm.regions, "skipped": asm.skipped,
            "fallbacks": rec.fallbacks, "phase_seconds": phases,
            "source_sha256": kernel_digest(asm.source)}


def kernel_digest(source: str) -> str:
    """sha256 of a ModelNew's text, its header's attempt number left out, with formloop.library's sources: equal
    for two attempts that would run the same kernels (the engine then measures the first only)."""
    text = re.sub(r"\(attempt \d+\)", "(attempt)", source, count=1)
    return hashlib.sha256((text + library_digest()).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def library_digest() -> str:
    """sha256 of formloop.library's sources: what a ModelNew's kernels come from. Part of an attempt's source
    hash, so that the same ModelNew text over changed kernels is not taken for a repeat."""
    import formloop.library as lib

    h = hashlib.sha256()
    for f in sorted(Path(lib.__file__).parent.rglob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def _options(tier: str, tolerance: str, dtype: str = "fp32") -> dict[str, Any]:
    return {"tolerance": tolerance, "sets": 3 if tier == "gpu" else 2,
            **({"precision": dtype} if dtype != "fp32" else {})}


def _limits(limit_s: float | None):
    from formloop.measure.sandbox import Limits
    return None if limit_s is None else Limits(wall_s=min(600.0, float(limit_s)))


def _compile_clock() -> dict[str, float]:
    """Seconds spent in Triton's JIT compiles (cache hits included) from now on in this process:
    JITFunction._do_compile timed by a wrapper that changes nothing else (no Triton, or the
    interpreter, which compiles nothing: stays 0)."""
    box = {"s": 0.0, "n": 0}
    try:
        from triton.runtime.jit import JITFunction
        inner = JITFunction._do_compile
    except Exception:  # noqa: BLE001 - another Triton: no compile phase reported
        return box

    def timed(self, *args, **kwargs):
        t0 = time.monotonic()
        try:
            return inner(self, *args, **kwargs)
        finally:
            box["s"] += time.monotonic() - t0
            box["n"] += 1
    JITFunction._do_compile = timed
    return box


def verify_job(problem: str, candidate: str, options: dict[str, Any]) -> dict[str, Any]:
    """In the sandboxed child: the harness, then (if correct and asked for) the integrity battery
    with the harness's own timing and SOL floor (what integrity_job would time again)."""
    from formloop.measure.harness import evaluate
    from formloop.measure.probes import check_integrity
    from formloop.measure.sandbox import phase

    opts = dict(options)
    integrity = opts.pop("integrity", True)
    keep = {k: opts[k] for k in ("precision", "tolerance") if k in opts}
    jit = _compile_clock()
    t0 = time.monotonic()
    h = evaluate(problem, candidate, **opts)
    t1, c1 = time.monotonic(), jit["s"]
    # harness and integrity exclude the Triton JIT compiles made during them (phase 'compile')
    out = {"harness": h.as_dict(), "integrity": None, "phase_seconds": {"harness": round(t1 - t0 - c1, 4)}}
    if integrity and h.correct:
        phase("integrity", "the battery, on the harness's timing")
        timed = h.cand_time if opts.get("chip") else None
        r = check_integrity(problem, candidate, timing=timed, sol_floor_s=h.sol_generous_s if timed else None,
                            **keep)
        out["integrity"] = r.as_dict()
        out["phase_seconds"]["integrity"] = round(time.monotonic() - t1 - (jit["s"] - c1), 4)
    if jit["n"]:
        out["phase_seconds"]["compile"] = round(jit["s"], 4)
        out["jit_compiles"] = jit["n"]
    return out


def _failed(verdict: str, phases: dict) -> dict[str, Any]:
    return {"correct": False, "accepted": False, "verdict": verdict[:300], "time_s": None, "ref_s": None,
            "time_source": None, "sol_fraction": None, "harness": None, "phase_seconds": phases}


def _evidence(witness: Any) -> dict[str, Any]:
    """The numbers behind a flag worth keeping in the store: where, the worst element, both errors
    against the float64 truth."""
    keep = ("variant", "region", "axis", "worst", "norm_rel_error", "candidate_vs_truth", "reference_vs_truth")
    return {k: witness[k] for k in keep if isinstance(witness, dict) and k in witness}


def measure(problem: str, candidate: str, *, tier: str, tolerance: str, chip: str | None,
            integrity: bool = True, limit_s: float | None = None, dtype: str = "fp32") -> dict[str, Any]:
    """Harness, then (if correct) the integrity battery, in one sandboxed child of at most `limit_s`
    seconds. Returns the attempt's row, with its phase times."""
    from formloop.measure.jobs import _paths, failed_run
    from formloop.measure.sandbox import RunStatus, run_in_child

    t0 = time.monotonic()
    opts = {**_options(tier, tolerance, dtype), "integrity": integrity,
            **({"chip": chip} if tier == "gpu" and chip else {})}
    try:
        p, c = _paths(problem, candidate)
        outcome = run_in_child(verify_job, p, c, opts, limits=_limits(limit_s))
    except Exception as exc:  # noqa: BLE001 - a candidate that cannot even load is a failed attempt
        return _failed(f"harness error: {type(exc).__name__}: {exc}", {"child": round(time.monotonic() - t0, 4)})
    wall = time.monotonic() - t0
    if outcome.status is not RunStatus.COMPLETED:
        h = failed_run(outcome, p, c)
        cut = limit_s is not None and limit_s < CUT_S and h.get("verdict") == "timed-out"
        row = _failed("timed-out" if cut else f"incorrect: {h.get('summary')}", {"child": round(wall, 4)})
        return {**row, "cut_by_deadline": True} if cut else row
    v = outcome.value
    phases = {**v["phase_seconds"], "child start": round(max(0.0, wall - sum(v["phase_seconds"].values())), 4)}
    stages, steps = folded(outcome.stage_seconds), folded(outcome.step_seconds)
    h = v["harness"]
    ct, rt = h.get("candidate_time") or {}, h.get("reference_time") or {}
    row = {"correct": bool(h.get("correct")), "accepted": False, "time_s": ct.get("seconds"),
           "ref_s": rt.get("seconds"), "time_source": ct.get("source"), "sol_fraction": h.get("sol_fraction"),
           "harness": {k: h.get(k) for k in ("summary", "speedup", "warnings", "notes", "seed", "verdict",
                                             "protocol")}, "phase_seconds": phases, "stage_seconds": stages,
           "step_seconds": steps}
    if not row["correct"]:
        row["verdict"] = "incorrect: " + str(h.get("summary") or failed_check(h))
        return {**row, "verdict": row["verdict"][:300]}
    if not integrity:
        return {**row, "verdict": "integrity not run", "accepted": False}
    return {**row, **integrity_outcome(v["integrity"] or {})}


def failed_check(h: dict[str, Any]) -> str:
    """The first check an incorrect harness result failed, with its reason: an input set, the input guard, the
    timed output (the CUDA graph's last output), the check after timing."""
    for k, c in enumerate(h.get("sets") or []):
        if not c.get("ok"):
            return f"input set {k}: {c.get('reason')}"
    if h.get("mutated"):
        return f"inputs changed by the candidate: {h['mutated'][0]}"
    for key, what in (("timed_output", "the timed output"), ("after_timing", "the check after timing")):
        c = h.get(key)
        if c and not c.get("ok"):
            return f"{what}: {c.get('reason')}"
    return "a harness check failed (none named)"


def integrity_outcome(r: dict[str, Any]) -> dict[str, Any]:
    """(accepted, verdict, integrity_flags) of an integrity report's JSON. The battery runs its own
    correctness sets (other seeds than the harness's): where they fail, the verdict says so instead of the
    probes' verdict alone (which may be "clean")."""
    flags = [{"check": c.get("obligation"), "severity": (c.get("details") or {}).get("severity"),
              "reason": (c.get("reason") or "")[:200], "evidence": _evidence(c.get("witness"))}
             for c in r.get("checks", [])
             if (c.get("details") or {}).get("severity") not in (None, "clean")]
    verdict = str(r.get("verdict"))
    if r.get("correct") is False:
        verdict = f"incorrect on the integrity run's fresh inputs (probes: {verdict})"
    return {"accepted": bool(r.get("accepted")) and bool(r.get("correct", True)), "verdict": verdict,
            "integrity_flags": flags}
