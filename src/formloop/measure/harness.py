"""The problem harness: is a candidate correct, how fast is it, how far from speed of light?

A problem is a module in the common kernel-benchmark format (`Model`, `get_inputs()`,
`get_init_inputs()`); a candidate is a module (file) with `ModelNew`, a `ModelNew` class, or a plain
function for problems without parameters. Correctness runs on several fresh random input sets drawn
under a secret seed (reported, so a run can be replayed), never on zeros; every uninitialized
allocation the candidate makes is poisoned (NaN) so stale memory cannot pass for a result; inputs
must come back unchanged. Timing uses CUDA events on a GPU and is labelled 'gpu'; without a GPU it is
host wall time labelled 'cpu' (Triton kernels then run in Triton's interpreter) and is never
compared with a GPU speed-of-light floor."""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import inspect
import os
import random
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from formloop.measure.compare import Comparison, compare_outputs, flatten
from formloop.measure.memory import POISON, changed_inputs, clone_all, poisoned, settle
from formloop.errors import InvalidInput, StructureError
from formloop.measure.integrity import code_file



# --- loading ---------------------------------------------------------------------------------

def _import_file(path: Path, kind: str):
    if not path.is_file():
        raise InvalidInput(f"{kind} path", str(path), "an existing .py file")
    name = f"formloop_{kind}_{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InvalidInput(f"{kind} path", str(path), "a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton and inspect look the source up through the module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise StructureError(f"{kind} {path} failed to import: {type(exc).__name__}: {exc}") from None
    return module


def resolve_problem(problem: Any) -> Any:
    """A problem object (anything with Model, get_inputs, get_init_inputs) or a path to one."""
    if isinstance(problem, (str, Path)):
        from formloop.sol.problem import load_problem
        return load_problem(problem)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not callable(getattr(problem, n, None))]
    if missing:
        raise StructureError(f"problem {getattr(problem, '__name__', problem)!r} lacks {', '.join(missing)}",
                             fix="a problem defines class Model(nn.Module), get_inputs() and get_init_inputs()")
    return problem


def problem_name(problem: Any) -> str:
    name = getattr(problem, "name", None) or getattr(problem, "__name__", "problem")
    return str(name).rsplit("_", 1)[0] if str(name).startswith("formloop_problem_") else str(name)


@dataclass
class Candidate:
    """What the harness runs: `build(init_inputs)` returns the callable under test."""

    name: str
    build: Callable[[list], Callable]
    source_obj: Any                 # what the static detector reads (module, class or function)
    kind: str                       # 'ModelNew' | 'function'
    files: tuple[str, ...] = ()


def load_candidate(candidate: Any) -> Candidate:
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU: Triton kernels run interpreted
    if isinstance(candidate, Candidate):
        return candidate
    if isinstance(candidate, (str, Path)):
        path = Path(candidate)
        candidate = _import_file(path, "candidate")
    if inspect.ismodule(candidate):
        cls = getattr(candidate, "ModelNew", None)
        if not inspect.isclass(cls):
            raise StructureError(f"candidate {getattr(candidate, '__file__', candidate.__name__)} has no class ModelNew",
                                 fix="define class ModelNew(torch.nn.Module) taking get_init_inputs() arguments")
        return Candidate(Path(getattr(candidate, "__file__", candidate.__name__)).stem, lambda init: cls(*init),
                         candidate, "ModelNew", (getattr(candidate, "__file__", ""),))
    if inspect.isclass(candidate):
        return Candidate(candidate.__name__, lambda init: candidate(*init), candidate, "ModelNew",
                         (code_file(candidate) or "",))
    if callable(candidate):
        return Candidate(getattr(candidate, "__name__", "function"), lambda init: candidate, candidate, "function",
                         (code_file(candidate) or "",))
    raise InvalidInput("candidate", type(candidate).__name__, "a path, a module with ModelNew, a class or a function")


# --- a session: one problem, one candidate -----------------------------------------------------

class Session:
    """Builds the reference, an fp64 truth model and the candidate with identical weights, draws
    input sets and runs the candidate under poisoning. Probes and `evaluate` both use it."""

    def __init__(self, problem: Any, candidate: Any, *, seed: int | None = None, device: str | None = None,
                 rtol: float | None = None):
        self.problem = resolve_problem(problem)
        self.candidate = load_candidate(candidate)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.seed = secrets.randbits(31) if seed is None else int(seed)
        self.rtol = rtol
        self.name = problem_name(self.problem)
        self.init_inputs = list(self.problem.get_init_inputs())
        self.ref_model, self.cand_fn, self.weights = self._build()
        try:
            self.truth_model = copy.deepcopy(self.ref_model).to(torch.float64)
        except Exception:
            self.truth_model = None

    def _build(self) -> tuple[Any, Callable, str]:
        torch.manual_seed(self.seed)
        ref = self.problem.Model(*self.init_inputs).to(self.device).eval()
        torch.manual_seed(self.seed)
        try:
            cand = self.candidate.build(self.init_inputs)
        except Exception as exc:
            raise StructureError(f"candidate {self.candidate.name} failed to build: {type(exc).__name__}: {exc}") from None
        note = "none (no parameters)"
        if isinstance(cand, torch.nn.Module):
            cand = cand.to(self.device).eval()
            rs, cs = ref.state_dict(), cand.state_dict()
            if rs and set(rs) == set(cs) and all(rs[k].shape == cs[k].shape for k in rs):
                cand.load_state_dict(rs)
                note = "copied from the reference"
            elif rs:
                note = "seeded initialisation (state_dict keys differ from the reference)"
        elif any(True for _ in ref.parameters()):
            raise InvalidInput("candidate", self.candidate.name, "a ModelNew class (the problem has parameters)")
        return ref, cand, note

    @contextmanager
    def overrides(self, values: Mapping[str, Any]) -> Iterator[None]:
        """Temporarily set module globals that `get_inputs` reads (shapes); restored afterwards."""
        g = self.problem.get_inputs.__globals__
        old = {k: g[k] for k in values}
        g.update(values)
        try:
            yield
        finally:
            g.update(old)

    def inputs(self, seed: int) -> list:
        """A fresh input set: get_inputs() under `seed`, moved to the device; zeros are refused."""
        torch.manual_seed(seed)
        random.seed(seed)
        try:
            import numpy as np
            np.random.seed(seed % (2**32))
        except ImportError:
            pass
        values = list(self.problem.get_inputs())
        for i, v in enumerate(values):
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() and not bool(v.any()):
                raise InvalidInput(f"get_inputs() of {self.name}, input {i}", "an all-zero tensor",
                                   "random non-zero tensors", fix="draw inputs with torch.randn/rand")
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def set_seed(self, i: int) -> int:
        return (self.seed * 1_000_003 + 7919 * (i + 1)) % (2**31 - 1)

    def reference(self, inputs: list) -> tuple[Any, Any]:
        with torch.no_grad():
            ref = self.ref_model(*clone_all(inputs))
            truth = None
            if self.truth_model is not None:
                try:
                    truth = self.truth_model(*[v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point()
                                              else v for v in clone_all(inputs)])
                except Exception:
                    truth = None
        return ref, truth

    def call(self, inputs: list, *, fill: float = POISON, stale: list | None = None, poison: bool = True) -> Any:
        """Run the candidate on `inputs` (not copied), poisoned allocations on, then settle."""
        before = set(threading.enumerate())
        with torch.no_grad():
            if poison:
                with poisoned(fill, stale):
                    out = self.cand_fn(*inputs)
            else:
                out = self.cand_fn(*inputs)
        settle(before)
        return out

    def compare(self, out: Any, ref: Any, truth: Any) -> Comparison:
        return compare_outputs(out, ref, truth, rtol=self.rtol)

    def replay(self, what: str = "evaluate") -> str:
        return f"formloop.campaign.{what}(problem, candidate, seed={self.seed})"


# --- timing ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    seconds: float                  # median of `reps`
    source: str                     # 'gpu' (CUDA events) | 'cpu' (host wall time)
    reps: int
    min_s: float
    max_s: float
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "source": self.source, "reps": self.reps, "min_s": self.min_s,
                "max_s": self.max_s, "note": self.note}


def time_callable(fn: Callable, inputs: list, *, warmup: int = 2, min_seconds: float = 0.05, max_reps: int = 50) -> Timing:
    """Median runtime. On a GPU each rep is bracketed by CUDA events on the current stream and the
    device is synchronized between reps; on a CPU it is perf_counter wall time, labelled 'cpu'."""
    gpu = torch.cuda.is_available() and any(isinstance(v, torch.Tensor) and v.is_cuda for v in inputs)
    times: list[float] = []
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        if gpu:
            torch.cuda.synchronize()
        start_all = time.perf_counter()
        while len(times) < max_reps and (len(times) < 3 or time.perf_counter() - start_all < min_seconds):
            if gpu:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn(*inputs)
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            else:
                t0 = time.perf_counter()
                fn(*inputs)
                times.append(time.perf_counter() - t0)
    note = "" if gpu else ("host wall time; Triton kernels interpreted" if os.environ.get("TRITON_INTERPRET") == "1"
                           else "host wall time")
    return Timing(statistics.median(times), "gpu" if gpu else "cpu", len(times), min(times), max(times), note)


# --- evaluate ----------------------------------------------------------------------------------

@dataclass
class HarnessResult:
    problem: str
    candidate: str
    device: str
    seed: int
    weights: str
    sets: list[Comparison]
    mutated: list[dict[str, Any]]
    ref_time: Timing | None = None
    cand_time: Timing | None = None
    sol_floor_s: float | None = None
    sol_note: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        return all(c.ok for c in self.sets) and not self.mutated

    @property
    def speedup(self) -> float | None:
        if self.ref_time and self.cand_time and self.ref_time.source == self.cand_time.source:
            return self.ref_time.seconds / self.cand_time.seconds
        return None

    @property
    def sol_fraction(self) -> float | None:
        """t_SOL / t_candidate: only for GPU timings (a CPU time against a GPU floor means nothing)."""
        if self.sol_floor_s and self.cand_time and self.cand_time.source == "gpu":
            return self.sol_floor_s / self.cand_time.seconds
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"problem": self.problem, "candidate": self.candidate, "device": self.device, "seed": self.seed,
                "weights": self.weights, "correct": self.correct, "inputs_unchanged": not self.mutated,
                "mutated": self.mutated, "sets": [c.as_dict() for c in self.sets],
                "reference_time": self.ref_time.as_dict() if self.ref_time else None,
                "candidate_time": self.cand_time.as_dict() if self.cand_time else None,
                "speedup": self.speedup, "sol_floor_s": self.sol_floor_s, "sol_note": self.sol_note,
                "sol_fraction": self.sol_fraction, "notes": self.notes,
                "replay": f"formloop harness PROBLEM CANDIDATE --seed {self.seed}"}


def sol_floor(problem: Any, chip: str, dtype: str | None = None, clock_mhz: float | None = None) -> tuple[float | None, str]:
    """The problem's SOL time floor on `chip`, counted from its reference at dispatch level."""
    from formloop.sol.auto import sol_for_problem
    from formloop.sol.problem import Problem

    if not isinstance(problem, Problem):
        return None, "SOL needs a problem file (formloop.sol.problem.load_problem)"
    report = sol_for_problem(problem, chip, dtype=dtype, clock_mhz=clock_mhz)
    return float(report.time_floor_s), (f"SOL floor on {report.chip} at {report.clock_mhz:g} MHz, "
                                        f"{report.compute_precision or report.dtype}, {report.bound}-bound (model)")


def evaluate(problem: Any, candidate: Any, *, sets: int = 3, seed: int | None = None, timing: bool = True,
             chip: str | None = None, dtype: str | None = None, clock_mhz: float | None = None,
             rtol: float | None = None, session: Session | None = None) -> HarnessResult:
    """Correctness on `sets` fresh input sets, input immutability, then timing and SOL fraction."""
    if sets < 1:
        raise InvalidInput("sets", sets, "an integer >= 1")
    s = session or Session(problem, candidate, seed=seed, rtol=rtol)
    comparisons, mutated = [], []
    for i in range(sets):
        inputs = s.inputs(s.set_seed(i))
        ref, truth = s.reference(inputs)      # the reference's output stays alive: no freed-buffer reuse
        mine = clone_all(inputs)
        try:
            out = s.call(mine)
        except Exception as exc:
            comparisons.append(Comparison(False, f"set {i}: candidate raised {type(exc).__name__}: {exc}"))
            continue
        mutated += [{**m, "set": i} for m in changed_inputs(inputs, mine)]
        comparisons.append(s.compare(out, ref, truth))
    result = HarnessResult(s.name, s.candidate.name, s.device, s.seed, s.weights, comparisons, mutated)
    if s.truth_model is None:
        result.notes.append("no fp64 truth (reference did not run in float64): compared with the reference itself")
    if timing and result.correct:
        inputs = s.inputs(s.set_seed(sets))
        result.ref_time = time_callable(s.ref_model, inputs)
        result.cand_time = time_callable(s.cand_fn, clone_all(inputs))
    if chip:
        result.sol_floor_s, result.sol_note = sol_floor(s.problem, chip, dtype, clock_mhz)
    return result


def first_tensor(out: Any) -> torch.Tensor | None:
    return next((x for x in flatten(out) if isinstance(x, torch.Tensor)), None)
