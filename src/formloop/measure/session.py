"""One problem, one candidate: loading both, building the reference, its float64 twin and the
candidate with identical weights, drawing input sets on the device and running the candidate under
poisoned allocations. The harness and every integrity probe work through a `Session`.

A problem is a module in the common kernel-benchmark format (`Model`, `get_inputs()`,
`get_init_inputs()`); a candidate is a file or module with `ModelNew`, a class, or a plain function
for problems without parameters. The protocol is KernelBench's: models built under the same seed,
no `.eval()` unless asked (dropout and batch norm run as in training), `torch.no_grad()`, inputs and
models optionally cast to one `precision`; inputs are drawn by `get_inputs()` under a per-set seed
with the target device as the default device, so a 6 GB input is generated where it is used."""
from __future__ import annotations

import copy
import gc
import hashlib
import importlib.util
import inspect
import os
import random
import secrets
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from formloop.dtypes import DTYPES
from formloop.errors import InvalidInput, StructureError
from formloop.measure.compare import RULES, Comparison, compare_outputs, flatten
from formloop.measure.mathmode import REFERENCE_MATH, reference_math as math_mode
from formloop.measure.memory import POISON, clone_all, poisoned, settle
from formloop.measure.sandbox import phase
from formloop.measure.static import code_file
from formloop.measure.truth import truth_of

# The precisions a problem may be run in: the dtype table's storage types KernelBench states a tolerance for.
PRECISIONS: dict[str, torch.dtype] = {d.name: getattr(torch, d.torch) for d in DTYPES if d.kernelbench_tol is not None}


def _import_file(path: Path, kind: str):
    if not path.is_file() or path.suffix != ".py":
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


def _interpreter_ready() -> None:
    """No GPU: Triton kernels run interpreted, which Triton decides when `triton.language` is imported (its
    own @jit helpers, tl.zeros among them, are interpreted or compiled from then on). Imported earlier without
    TRITON_INTERPRET=1 (by torch's own Triton integration, say), every candidate kernel would fail inside those
    helpers and an honest candidate would be judged incorrect: refuse instead, saying what to do."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    lang = sys.modules.get("triton.language")
    if lang is None or os.environ["TRITON_INTERPRET"] != "1":
        return
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(getattr(lang, "zeros", None), InterpretedFunction):
        raise InvalidInput("TRITON_INTERPRET", "unset when triton was first imported in this process",
                           "1 before triton is imported (no GPU: candidates run in Triton's interpreter)",
                           fix="export TRITON_INTERPRET=1, or evaluate in a fresh process (formloop harness)")


def load_candidate(candidate: Any) -> Candidate:
    if not torch.cuda.is_available():
        _interpreter_ready()
    if isinstance(candidate, Candidate):
        return candidate
    if isinstance(candidate, (str, Path)):
        candidate = _import_file(Path(candidate), "candidate")
    if inspect.ismodule(candidate):
        cls = getattr(candidate, "ModelNew", None)
        where = getattr(candidate, "__file__", candidate.__name__)
        if not inspect.isclass(cls):
            raise StructureError(f"candidate {where} has no class ModelNew",
                                 fix="define class ModelNew(torch.nn.Module) taking get_init_inputs() arguments")
        return Candidate(Path(where).stem, lambda init: cls(*init), candidate, "ModelNew", (where,))
    if inspect.isclass(candidate):
        return Candidate(candidate.__name__, lambda init: candidate(*init), candidate, "ModelNew",
                         (code_file(candidate) or "",))
    if callable(candidate):
        return Candidate(getattr(candidate, "__name__", "function"), lambda init: candidate, candidate, "function",
                         (code_file(candidate) or "",))
    raise InvalidInput("candidate", type(candidate).__name__, "a path, a module with ModelNew, a class or a function")


def _cast(values: list, dtype: torch.dtype | None, device: str) -> list:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if dtype is not None and v.is_floating_point():
                v = v.to(dtype)
        out.append(v)
    return out


class Session:
    """Reference, float64 twin and candidate for one problem; input sets; poisoned candidate calls."""

    def __init__(self, problem: Any, candidate: Any, *, seed: int | None = None, device: str | None = None,
                 rtol: float | None = None, precision: str | None = None, eval_mode: bool = False,
                 rule: str = "formloop", overrides: Mapping[str, Any] | None = None,
                 reference_math: str = "fp32"):
        if reference_math not in REFERENCE_MATH:
            raise InvalidInput("reference math", reference_math, REFERENCE_MATH)
        if precision is not None and precision not in PRECISIONS:
            raise InvalidInput("precision", precision, sorted(PRECISIONS))
        if rule not in RULES:
            raise InvalidInput("tolerance rule", rule, RULES)
        if seed is not None and not (isinstance(seed, int) and 0 <= seed < 2**63):
            raise InvalidInput("seed", seed, "an integer 0 ... 2^63-1")
        phase("problem", "loading the problem file")
        self.problem = resolve_problem(problem)
        phase("candidate", "loading the candidate file")
        self.candidate = load_candidate(candidate)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.seed = secrets.randbits(31) if seed is None else int(seed)
        self.rtol, self.rule, self.eval_mode = rtol, rule, eval_mode
        self.reference_math = reference_math   # the math mode of correctness references (measure.mathmode)
        self.precision = PRECISIONS[precision] if precision else None
        self.base_overrides = dict(overrides or {})
        self.name = problem_name(self.problem)
        with self.overrides(self.base_overrides):
            self.init_inputs = self._problem_call("get_init_inputs")
        self.ref_model, self.cand_fn, self.weights = self._build()
        self.baseline_bytes = device_bytes(self.device)  # what the models hold: more later is kept by calls
        try:
            self.truth_model = copy.deepcopy(self.ref_model).to(torch.float64)
        except Exception:  # noqa: BLE001 - a reference that cannot be copied has no float64 twin
            self.truth_model = None
        self.truth_note = ""

    def _problem_call(self, what: str) -> list:
        phase("problem", f"{what}()")
        try:
            with torch.device(self.device):
                values = getattr(self.problem, what)()
        except Exception as exc:
            raise StructureError(f"problem {self.name}: {what}() raised {type(exc).__name__}: {exc}",
                                 fix=f"make {what}() runnable") from None
        if not isinstance(values, (list, tuple)):
            raise StructureError(f"problem {self.name}: {what}() returned {type(values).__name__}", fix="return a list")
        return _cast(list(values), None, self.device)

    def _build(self) -> tuple[Any, Callable, str]:
        torch.manual_seed(self.seed)
        phase("problem", "Model(*get_init_inputs())")
        try:
            with torch.device(self.device):
                ref = self.problem.Model(*self.init_inputs)
        except Exception as exc:
            raise StructureError(f"problem {self.name}: Model(*get_init_inputs()) raised {type(exc).__name__}: {exc}",
                                 fix="make the reference constructible") from None
        ref = ref.to(self.device)
        if self.precision is not None:
            ref = ref.to(self.precision)
        if self.eval_mode:
            ref = ref.eval()
        cand, note = self._build_candidate(ref)
        return ref, cand, note

    def rebuild_candidate(self) -> None:
        """A fresh candidate with the reference's weights: whatever the old one kept (a cache of
        outputs, buffers) is dropped with it. The integrity battery calls this between probes when
        the candidate holds device memory, or after a probe ran out of memory."""
        self.cand_fn = None
        gc.collect()
        self.cand_fn, self.weights = self._build_candidate(self.ref_model)

    def _build_candidate(self, ref: Any) -> tuple[Callable, str]:
        torch.manual_seed(self.seed)
        phase("candidate", "ModelNew(*get_init_inputs())")
        try:
            with torch.device(self.device):
                cand = self.candidate.build(self.init_inputs)
        except Exception as exc:
            raise StructureError(f"candidate {self.candidate.name} failed to build: "
                                 f"{type(exc).__name__}: {exc}") from None
        note = "none (no parameters)"
        if isinstance(cand, torch.nn.Module):
            cand = cand.to(self.device)
            if self.precision is not None:
                cand = cand.to(self.precision)
            if self.eval_mode:
                cand = cand.eval()
            rs, cs = ref.state_dict(), cand.state_dict()
            if rs and set(rs) == set(cs) and all(rs[k].shape == cs[k].shape for k in rs):
                cand.load_state_dict(rs)
                note = "copied from the reference"
            elif rs:
                note = "seeded initialisation (state_dict keys differ from the reference)"
        elif any(True for _ in ref.parameters()):
            raise InvalidInput("candidate", self.candidate.name, "a ModelNew class (the problem has parameters)")
        return cand, note

    @contextmanager
    def overrides(self, values: Mapping[str, Any]) -> Iterator[None]:
        """Temporarily set module globals that `get_inputs` reads (shapes); restored afterwards."""
        g = self.problem.get_inputs.__globals__
        missing = object()
        old = {k: g.get(k, missing) for k in values}
        g.update(values)
        try:
            yield
        finally:
            for k, v in old.items():
                if v is missing:
                    g.pop(k, None)
                else:
                    g[k] = v

    def inputs(self, seed: int) -> list:
        """A fresh input set: get_inputs() under `seed`, on the device; zeros are refused."""
        torch.manual_seed(seed)
        random.seed(seed)
        try:
            import numpy as np
            np.random.seed(seed % (2**32))
        except ImportError:
            pass
        with self.overrides(self.base_overrides):
            values = _cast(self._problem_call("get_inputs"), self.precision, self.device)
        for i, v in enumerate(values):
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() and not bool(v.any()):
                raise InvalidInput(f"get_inputs() of {self.name}, input {i}", "an all-zero tensor",
                                   "random non-zero tensors", fix="draw inputs with torch.randn/rand")
        return values

    def set_seed(self, i: int) -> int:
        return (self.seed * 1_000_003 + 7919 * (i + 1)) % (2**31 - 1)

    def reference(self, inputs: list, *, truth: bool = True) -> tuple[Any, Any]:
        """The reference output on copies of `inputs`, and its float64 truth (None when unavailable),
        computed under the session's reference math (default: fp32 with TF32 off, formloop.measure.mathmode)."""
        phase("problem", "reference forward")
        with torch.no_grad(), math_mode(self.reference_math):
            try:
                ref = self.ref_model(*clone_all(inputs))
            except Exception as exc:
                raise StructureError(f"problem {self.name}: the reference raised {type(exc).__name__}: {exc}") from None
            if not truth:
                return ref, None
            value, self.truth_note = truth_of(self.ref_model, self.truth_model, inputs, ref, self.device)
        return ref, value

    def call(self, inputs: list, *, fill: float = POISON, stale: list | None = None, poison: bool = True) -> Any:
        """Run the candidate on `inputs` (not copied), poisoned allocations on, then settle."""
        before = set(threading.enumerate())
        phase("candidate", "forward")
        with torch.no_grad():
            if poison:
                with poisoned(fill, stale):
                    out = self.cand_fn(*inputs)
            else:
                out = self.cand_fn(*inputs)
        phase("candidate", "threads and streams it left running, awaited (and its queued GPU work)")
        running = settle(before)
        if running:   # the wait ended on its timeout: say on what (a step of its own in the child's times)
            phase("candidate", f"still running after the wait: {', '.join(running)[:150]}")
        return out

    def compare(self, out: Any, ref: Any, truth: Any) -> Comparison:
        return compare_outputs(out, ref, truth, rule=self.rule, rtol=self.rtol)

    def replay(self, what: str = "evaluate") -> str:
        return f"formloop.measure.{what}(problem, candidate, seed={self.seed})"


def device_bytes(device: str) -> int:
    """Bytes the caching allocator has handed out on a CUDA `device` (0 on the CPU)."""
    return int(torch.cuda.memory_allocated(torch.device(device))) if str(device).startswith("cuda") else 0


def first_tensor(out: Any) -> torch.Tensor | None:
    return next((x for x in flatten(out) if isinstance(x, torch.Tensor)), None)

