"""The static torch-only detector: read a candidate's source and say whether its forward launches a
kernel of its own (a Triton launch, a compiled extension, a CuPy raw kernel), leaves heavy work to
PyTorch, or starts streams and threads. Source reading is evidence, not the decision: the runtime
detector (`formloop.measure.launches`) records what a call actually launches and decides torch-only;
this scan explains what the source shows and catches what a single call may not exercise."""
from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from typing import Any

from formloop.errors import InvalidInput, StructureError
from formloop.measure.integrity import IntegrityVerdict, flag, not_applicable, passed
from formloop.verify.outcome import ObligationResult

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


def static_scan(source: str, *, entry: str = "ModelNew.forward",
                filename: str = "<candidate>") -> list[ObligationResult]:
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
    if entry_fn is None and cls is not None:
        bases = ", ".join(_dotted(b) for b in cls.bases) or "object"
        return [not_applicable("torch-only", f"{entry} is not defined in {filename}: {cls_name} inherits it from "
                                             f"{bases}; what the call launches decides (runtime detector)")]
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
            elif parts[-1] not in LAYOUT_OPS and (parts[0] in _TORCH_ROOTS
                                                  or (len(parts) >= 2 and parts[-1] in HEAVY_OPS)):
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
                        + (f"; it calls PyTorch operators: {', '.join(sorted({n for n, _ in torch_ops}))}"
                           if torch_ops else ""),
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
