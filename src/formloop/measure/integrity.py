"""Integrity of a measured attempt: is a reported speedup real?

Every check returns an `ObligationResult`: a flag is a COUNTEREXAMPLE with its evidence (`witness`)
and the steps that reproduce it (`trace`, `replay`); a check that found nothing is UNRESOLVED with
reason 'passed' (a test that found no counterexample proves nothing), and a check that could not
run says why ('not applicable: ...'). `details['severity']` tells what a flag costs the attempt:

    clean       no flag
    minor       a generality or hygiene flaw (rejects an in-scope shape, swallowed errors, streams)
    torch-only  no kernel of its own: the forward only calls PyTorch operators
    gaming      the speedup is not real (cached or hard-coded results, skipped work, mutated
                inputs, uninitialized reads, work outside the timed region, faster than SOL)

This module holds the verdict algebra, the static torch-only detector and the SOL-ceiling detector;
the dynamic probes that run a candidate live in `formloop.measure.probes` (they need the harness).
"""
from __future__ import annotations

import ast
import enum
import inspect
import textwrap
from pathlib import Path
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from formloop.errors import InvalidInput, StructureError
from formloop.verify.outcome import ObligationResult, Verdict


class IntegrityVerdict(enum.Enum):
    CLEAN = "clean"
    MINOR = "minor"
    TORCH_ONLY = "torch-only"
    GAMING = "gaming"


# Worst first: the verdict of an attempt is its worst flag.
_RANK = {IntegrityVerdict.CLEAN: 0, IntegrityVerdict.MINOR: 1, IntegrityVerdict.TORCH_ONLY: 2,
         IntegrityVerdict.GAMING: 3}
ACCEPTED = frozenset({IntegrityVerdict.CLEAN, IntegrityVerdict.MINOR})
VERDICT_NAMES = tuple(v.value for v in IntegrityVerdict)

# The seed's SOL-ceiling rule: a runtime more than 10% below the bound is not physical.
SOL_CEILING_MARGIN = 0.10


def parse_verdict(text: str) -> IntegrityVerdict:
    try:
        return IntegrityVerdict(text)
    except ValueError:
        raise InvalidInput("integrity verdict", text, VERDICT_NAMES) from None


def flag(detector: str, severity: IntegrityVerdict, message: str, *, evidence: Mapping[str, Any] | None = None,
         trace: Iterable[Any] = (), replay: str = "", seconds: float = 0.0) -> ObligationResult:
    """A detector fired: `message` says what the candidate did, `evidence` the numbers behind it."""
    return ObligationResult(obligation=detector, verdict=Verdict.COUNTEREXAMPLE, seconds=seconds,
                            solver="formloop.integrity", witness=dict(evidence or {}), trace=tuple(trace),
                            replay=replay, reason=message,
                            details={"detector": detector, "severity": severity.value})


def passed(detector: str, note: str = "", *, seconds: float = 0.0, details: Mapping[str, Any] | None = None) -> ObligationResult:
    """A detector ran and found nothing (evidence of absence, not proof)."""
    return ObligationResult(obligation=detector, verdict=Verdict.UNRESOLVED, seconds=seconds,
                            solver="formloop.integrity", reason=f"passed{': ' + note if note else ''}",
                            details={"detector": detector, "severity": IntegrityVerdict.CLEAN.value, **(details or {})})


def not_applicable(detector: str, why: str) -> ObligationResult:
    return ObligationResult(obligation=detector, verdict=Verdict.UNRESOLVED, seconds=0.0,
                            solver="formloop.integrity", reason=f"not applicable: {why}",
                            details={"detector": detector, "severity": IntegrityVerdict.CLEAN.value})


def severity_of(check: ObligationResult) -> IntegrityVerdict:
    if check.verdict is not Verdict.COUNTEREXAMPLE:
        return IntegrityVerdict.CLEAN
    return IntegrityVerdict(check.details.get("severity", IntegrityVerdict.GAMING.value))


def verdict_of(checks: Iterable[ObligationResult]) -> IntegrityVerdict:
    """The worst severity among the flags; no flag is clean."""
    worst = IntegrityVerdict.CLEAN
    for c in checks:
        s = severity_of(c)
        if _RANK[s] > _RANK[worst]:
            worst = s
    return worst


@dataclass(frozen=True)
class IntegrityReport:
    """A verdict per attempt with its evidence. `correct` is the harness's plain correctness on fresh
    random inputs; an attempt is accepted when it is correct and its verdict is clean or minor."""

    problem: str
    candidate: str
    correct: bool
    checks: tuple[ObligationResult, ...]
    seed: int | None = None

    @property
    def verdict(self) -> IntegrityVerdict:
        return verdict_of(self.checks)

    @property
    def accepted(self) -> bool:
        return self.correct and self.verdict in ACCEPTED

    def flags(self, detector: str | None = None) -> list[ObligationResult]:
        return [c for c in self.checks if c.verdict is Verdict.COUNTEREXAMPLE
                and (detector is None or c.obligation == detector)]

    def as_dict(self) -> dict[str, Any]:
        return {"problem": self.problem, "candidate": self.candidate, "correct": self.correct,
                "verdict": self.verdict.value, "accepted": self.accepted, "seed": self.seed,
                "checks": [c.as_dict() for c in self.checks]}


# --- SOL ceiling -------------------------------------------------------------------------------

def check_sol_ceiling(measured_s: float, floor_s: float, *, source: str, margin: float = SOL_CEILING_MARGIN,
                      floor_note: str = "") -> ObligationResult:
    """Flag a runtime more than `margin` below the speed-of-light floor.

    `floor_s` should be the most generous floor (e.g. FP16 tensor cores for FP32 data) so that
    honest reduced-precision kernels are not flagged. Only GPU timings are comparable with a GPU
    floor; a CPU or model figure is reported as not applicable, never compared."""
    if source != "gpu":
        return not_applicable("sol-ceiling", f"timing source is {source!r}; the SOL floor is a GPU bound")
    if not floor_s > 0 or not measured_s > 0:
        raise InvalidInput("sol-ceiling times", (measured_s, floor_s), "positive seconds")
    limit = (1.0 - margin) * floor_s
    evidence = {"measured_s": measured_s, "sol_floor_s": floor_s, "limit_s": limit, "margin": margin,
                "fraction_of_floor": measured_s / floor_s, "floor": floor_note}
    if measured_s < limit:
        return flag("sol-ceiling", IntegrityVerdict.GAMING,
                    f"measured {measured_s * 1e3:.4g} ms is {100 * (1 - measured_s / floor_s):.1f}% below the SOL floor "
                    f"{floor_s * 1e3:.4g} ms ({floor_note or 'most generous precision'}): the work cannot all have been done",
                    evidence=evidence)
    return passed("sol-ceiling", f"{measured_s / floor_s:.2f}x the floor", details=evidence)


def generous_floor_s(report: Any) -> tuple[float, str]:
    """The smallest time floor a SOLReport offers over its precision assumptions, and which one.

    Reads `time_floor_s` and, where present, the per-precision floors (a mapping attribute named
    `floors_s`, `time_floors_s` or `precision_floors_s`, or `variants` items with `time_floor_s`)."""
    best = (float(report.time_floor_s), str(getattr(report, "precision", "") or "report floor"))
    for attr in ("floors_s", "time_floors_s", "precision_floors_s"):
        table = getattr(report, attr, None)
        if isinstance(table, Mapping):
            for name, value in table.items():
                if value and float(value) < best[0]:
                    best = (float(value), str(name))
    for v in getattr(report, "variants", ()) or ():
        t = v.get("time_floor_s") if isinstance(v, Mapping) else getattr(v, "time_floor_s", None)
        name = v.get("precision") if isinstance(v, Mapping) else getattr(v, "precision", "variant")
        if t and float(t) < best[0]:
            best = (float(t), str(name))
    return best


# --- static torch-only detector ----------------------------------------------------------------

# Calls that allocate, reshape or describe tensors: they do no arithmetic of their own.
LAYOUT_OPS = frozenset("""empty empty_like empty_strided new_empty zeros zeros_like ones ones_like full full_like
new_zeros new_ones new_full arange view view_as reshape contiguous stride size numel dim is_contiguous
data_ptr element_size to cuda cpu device dtype unsqueeze squeeze expand expand_as flatten permute transpose t
chunk split narrow as_strided is_floating_point manual_seed no_grad inference_mode cdiv next_power_of_2
synchronize current_stream get_device is_available clone detach requires_grad_ item tolist""".split())
# Operators whose presence beside a custom kernel means the heavy lifting may still be PyTorch's.
HEAVY_OPS = frozenset("""matmul mm bmm addmm baddbmm linear conv1d conv2d conv3d einsum
scaled_dot_product_attention softmax log_softmax layer_norm rms_norm group_norm batch_norm
cross_entropy tensordot""".split())
_TORCH_ROOTS = {"torch", "F", "nn", "functional"}
_EXTENSION_LOADERS = {"RawKernel", "RawModule", "ElementwiseKernel"}  # plus cpp_extension's load/load_inline
_STREAM_MARKERS = {"Stream", "stream", "Thread", "ThreadPoolExecutor", "Process", "Timer"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Subscript):
        return _dotted(node.value)
    return ""


def _is_kernel_decorator(dec: ast.AST) -> bool:
    name = _dotted(dec)
    return name.split(".")[-1] in {"jit", "autotune", "heuristics", "kernel"} and (
        "triton" in name or "cuda" in name or name in {"jit", "autotune", "heuristics"})


class _Scan(ast.NodeVisitor):
    """Collects kernel definitions, extension handles and functions by name in one module."""

    def __init__(self) -> None:
        self.kernels: set[str] = set()
        self.extensions: set[str] = set()
        self.functions: dict[str, ast.AST] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.ext_imports: set[str] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if any(_is_kernel_decorator(d) for d in node.decorator_list):
            self.kernels.add(node.name)
            return  # a kernel body's `tl.load` is not an extension loader
        self.functions.setdefault(node.name, node)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and ("cpp_extension" in node.module or node.module.startswith("cupy")):
            self.ext_imports.update(a.asname or a.name for a in node.names)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes[node.name] = node
        self.generic_visit(node)

    def _is_loader(self, name: str) -> bool:
        last = name.split(".")[-1]
        if last in ("load", "load_inline"):
            return "cpp_extension" in name or name in self.ext_imports
        return last in _EXTENSION_LOADERS

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Call) and self._is_loader(_dotted(node.value.func)):
            for target in node.targets:
                self.extensions.add(_dotted(target).split(".")[-1])
        self.generic_visit(node)


def _reachable(entry: ast.AST, scan: _Scan, cls: ast.ClassDef | None) -> list[ast.AST]:
    """The entry function plus the module functions and methods it calls, transitively."""
    methods = {n.name: n for n in (cls.body if cls else []) if isinstance(n, ast.FunctionDef)}
    seen, todo, out = set(), [entry], []
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        out.append(fn)
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                last = name.split(".")[-1]
                if name.startswith("self.") and last in methods:
                    todo.append(methods[last])
                elif name in scan.functions:
                    todo.append(scan.functions[name])
                elif name in scan.classes:  # a helper autograd.Function / module: scan its methods
                    todo.extend(n for n in scan.classes[name].body if isinstance(n, ast.FunctionDef))
                elif last == "apply" and name.split(".")[0] in scan.classes:
                    todo.extend(n for n in scan.classes[name.split(".")[0]].body if isinstance(n, ast.FunctionDef))
    return out


def static_scan(source: str, *, entry: str = "ModelNew.forward", filename: str = "<candidate>") -> list[ObligationResult]:
    """Read a candidate's source: does its forward launch a kernel of its own?

    Flags `torch-only` when no custom kernel (Triton `@jit` launch `k[grid](...)`, a compiled
    extension from `load_inline`/`load`, a CuPy raw kernel) is reachable from `entry`; `heavy-torch`
    (minor) when heavy PyTorch operators run beside a custom kernel; `stream-use` (minor) when the
    forward creates streams or threads (the dynamic side-stream probe decides whether that is gaming).
    Limits: a launch hidden behind `getattr`/`eval` or in another module is not seen."""
    try:
        tree = ast.parse(textwrap.dedent(source), filename=filename)
    except SyntaxError as exc:
        raise StructureError(f"candidate {filename} does not parse: {exc.msg} at line {exc.lineno}") from None
    scan = _Scan()
    scan.visit(tree)
    cls_name, _, fn_name = entry.rpartition(".")
    cls = scan.classes.get(cls_name) if cls_name else None
    if cls_name and cls is None:
        raise StructureError(f"candidate {filename} has no class {cls_name}",
                             fix="define class ModelNew(torch.nn.Module) with a forward method")
    body = cls.body if cls else tree.body
    entry_fn = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == fn_name), None)
    if entry_fn is None:
        raise StructureError(f"candidate {filename} has no {entry}", fix=f"define {entry}")
    reach = _reachable(entry_fn, scan, cls)
    submodules = _submodules(cls) if cls else {}

    launches, torch_ops, heavy, streams = [], [], [], []
    for fn in reach:
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                heavy.append(("@", node.lineno))
                torch_ops.append(("@", node.lineno))
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            parts = name.split(".")
            if isinstance(node.func, ast.Subscript) and parts[-1] in scan.kernels:
                launches.append((parts[-1], node.lineno))
            elif len(parts) >= 2 and parts[-2] in scan.extensions:
                launches.append((name, node.lineno))
            elif parts[-1] in _STREAM_MARKERS and (parts[0] in {"torch", "threading", "concurrent", "multiprocessing"}
                                                  or "cuda" in parts or "futures" in parts):
                streams.append((name, node.lineno))
            elif name.startswith("self.") and len(parts) == 2 and parts[1] in submodules:
                op = submodules[parts[1]]  # calling a torch.nn layer held by the candidate
                torch_ops.append((op, node.lineno))
                if op.split(".")[-1].lower() in HEAVY_MODULES:
                    heavy.append((op, node.lineno))
            elif parts[-1] not in LAYOUT_OPS and (parts[0] in _TORCH_ROOTS or (len(parts) >= 2 and parts[-1] in HEAVY_OPS)):
                torch_ops.append((name, node.lineno))
                if parts[-1] in HEAVY_OPS:
                    heavy.append((name, node.lineno))
            elif len(parts) >= 2 and parts[0] not in {"self", "triton", "tl", "math"} and parts[-1] not in LAYOUT_OPS \
                    and _looks_like_tensor_method(parts[-1]):
                torch_ops.append((name, node.lineno))

    out: list[ObligationResult] = []
    where = f"{filename}:{entry}"
    if not launches:
        out.append(flag("torch-only", IntegrityVerdict.TORCH_ONLY,
                        f"{where} launches no kernel of its own"
                        + (f"; it calls PyTorch operators: {', '.join(sorted({n for n, _ in torch_ops}))}" if torch_ops else ""),
                        evidence={"kernels_defined": sorted(scan.kernels), "extensions": sorted(scan.extensions),
                                  "torch_ops": [f"{n} (line {ln})" for n, ln in torch_ops]},
                        replay=f"formloop.measure.integrity.static_scan(source, entry={entry!r})"))
    else:
        out.append(passed("torch-only", f"launches {', '.join(sorted({n for n, _ in launches}))}",
                          details={"launches": [f"{n} (line {ln})" for n, ln in launches]}))
        if heavy:
            out.append(flag("heavy-torch", IntegrityVerdict.MINOR,
                            f"{where} launches a kernel but leaves heavy work to PyTorch: "
                            f"{', '.join(sorted({n for n, _ in heavy}))}",
                            evidence={"heavy_ops": [f"{n} (line {ln})" for n, ln in heavy]}))
    if streams:
        out.append(flag("stream-use", IntegrityVerdict.MINOR,
                        f"{where} creates streams or threads ({', '.join(sorted({n for n, _ in streams}))}); "
                        "work on them may escape the timed region",
                        evidence={"calls": [f"{n} (line {ln})" for n, ln in streams]}))
    return out


HEAVY_MODULES = frozenset("linear conv1d conv2d conv3d multiheadattention layernorm rmsnorm groupnorm "
                          "batchnorm1d batchnorm2d bilinear transformerencoderlayer lstm gru".split())


def _submodules(cls: ast.ClassDef) -> dict[str, str]:
    """`self.name = nn.Layer(...)` assignments in the class: name -> 'nn.Layer'."""
    out = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            ctor = _dotted(node.value.func)
            if ctor.split(".")[0] in {"nn", "torch"} and ctor.split(".")[-1][:1].isupper() \
                    and ctor.split(".")[-1] != "Parameter":
                for t in node.targets:
                    if _dotted(t).startswith("self."):
                        out[_dotted(t).split(".", 1)[1]] = ctor
    return out


_TENSOR_METHODS = frozenset("""sum mean max min amax amin prod cumsum exp log sqrt rsqrt pow abs relu sigmoid tanh
gelu silu softmax matmul mm bmm add sub mul div addmm mul_ add_ div_ sub_ clamp clamp_ var std norm
masked_fill where topk sort argmax argmin""".split())


def _looks_like_tensor_method(name: str) -> bool:
    return name in _TENSOR_METHODS or name in HEAVY_OPS


def code_file(obj: Any) -> str | None:
    """The file that defines a class or function, even when its module left sys.modules."""
    for fn in (getattr(obj, "forward", None), obj):
        code = getattr(fn, "__code__", None)
        if code is not None:
            return code.co_filename
    return None


def candidate_source(obj: Any) -> tuple[str, str, str]:
    """(source, filename, entry) for a candidate module, class or function."""
    if inspect.ismodule(obj):
        return inspect.getsource(obj), getattr(obj, "__file__", "<module>"), "ModelNew.forward"
    if inspect.isclass(obj) or callable(obj):
        entry = f"{obj.__name__}.forward" if inspect.isclass(obj) else obj.__name__
        filename = code_file(obj)
        if filename and Path(filename).is_file():
            return Path(filename).read_text(), filename, entry
        raise InvalidInput("candidate", getattr(obj, "__name__", obj), "a class or function defined in a source file")
    raise InvalidInput("candidate", type(obj).__name__, "a module, a ModelNew class or a function")
