"""What one call actually launches: the runtime torch-only detector.

While the candidate runs once, four recorders watch it:

    Triton        every launch through the kernel API (`kernel[grid](...)`, autotuned kernels, a
                  precompiled handle's `[grid]`), compiled or interpreted, wherever it is called from
    dispatcher    every PyTorch operator dispatched (aten compute ops are PyTorch's work); an operator
                  outside PyTorch's namespaces whose implementation runs no aten compute op is opaque
                  compiled code (a TORCH_LIBRARY extension)
    extensions    calls into compiled modules that are not PyTorch's, NumPy's or the standard
                  library's (load_inline / cpp_extension builds, CuPy, Numba) - the CPU's evidence
    profiler      (GPU) every kernel that ran, with the operator it was launched under: a kernel
                  launched under an aten operator is PyTorch's (cuBLAS, cuDNN and flash kernels
                  included); one launched outside every operator is the candidate's, except
                  TorchInductor's generated `triton_*` kernels (torch.compile is PyTorch)

The call is torch-only when none of them saw a launch of the candidate's own. An inherited or
monkey-patched forward cannot hide from this: what runs is what is recorded, whatever the source
says. On a GPU a call into an extension counts only through the kernels it launches (so a harmless C
call cannot pass for a kernel); without a GPU the extension call itself is the evidence."""
from __future__ import annotations

import re
import sys
import sysconfig
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "profiler", "inductor",
                              "higher_order", "_quantized", "quantized", "rngprims", "debugprims"})
# Operators that allocate, view or copy: no arithmetic, so they never make a call "compute in PyTorch".
LAYOUT_OPS = frozenset("""empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like ones ones_like
full full_like new_zeros new_ones new_full fill_ zero_ view _unsafe_view reshape as_strided expand t transpose
permute contiguous clone copy_ _to_copy detach alias unsqueeze squeeze slice select split unbind lift_fresh
_local_scalar_dense resize_ set_ stride size sym_size sym_stride sym_numel numel is_contiguous""".split())
_INDUCTOR_KERNEL = re.compile(r"^triton_(poi|per|red|tem|for|mm|bmm|unk|spl|hel|mix|cat)_")
_NON_KERNELS = ("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")
_KERNEL_LIBS = ("cupy", "cupyx", "numba", "pycuda", "cuda", "warp", "tilelang", "cutlass")


@dataclass
class LaunchRecord:
    """What one call launched; `custom` lists the launches that are the candidate's own."""

    triton: list[str] = field(default_factory=list)
    opaque_ops: list[str] = field(default_factory=list)
    extension_calls: list[str] = field(default_factory=list)
    aten: Counter = field(default_factory=Counter)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    profiled: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def compute_ops(self) -> list[str]:
        return sorted(op for op in self.aten if op.split("::")[-1].split(".")[0] not in LAYOUT_OPS)

    @property
    def custom(self) -> list[str]:
        own = [f"triton:{n}" for n in self.triton] + [f"op:{n}" for n in self.opaque_ops]
        if self.profiled:
            own += [f"kernel:{k['name']}" for k in self.kernels if k["origin"] == "candidate"]
        else:
            own += [f"extension:{n}" for n in self.extension_calls]
        return sorted(set(own))

    @property
    def torch_only(self) -> bool:
        return not self.custom

    def evidence(self, limit: int = 30) -> dict[str, Any]:
        return {"own_launches": self.custom[:limit], "triton_launches": sorted(set(self.triton))[:limit],
                "aten_compute_ops": self.compute_ops[:limit],
                "extension_calls": sorted(set(self.extension_calls))[:limit],
                "opaque_custom_ops": sorted(set(self.opaque_ops))[:limit], "gpu_kernels": self.kernels[:limit],
                "profiled": self.profiled, "notes": self.notes}


class _OpRecorder(TorchDispatchMode):
    def __init__(self, record: LaunchRecord):
        super().__init__()
        self.record = record

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name.split("::")[0] in TORCH_NAMESPACES:
            self.record.aten[name] += 1
            return func(*args, **(kwargs or {}))
        inner = LaunchRecord()
        with _OpRecorder(inner):
            out = func(*args, **(kwargs or {}))
        self.record.aten.update(inner.aten)
        if not inner.compute_ops:
            self.record.opaque_ops.append(name)  # compiled code did the arithmetic
        return out


def _roots() -> tuple[str, ...]:
    paths = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib")}
    for mod in ("torch", "numpy", "triton"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            paths.add(str(Path(m.__file__).parent))
    return tuple(p for p in paths if p)


def _extension_name(fn: Any, roots: tuple[str, ...]) -> str | None:
    """The module of a C function if it is a compiled extension that is not PyTorch/NumPy/stdlib."""
    owner = getattr(fn, "__self__", None)
    mod = getattr(fn, "__module__", None) or getattr(type(owner), "__module__", None) if owner is not None \
        else getattr(fn, "__module__", None)
    if not mod or mod == "builtins":
        return None
    if mod.split(".")[0] in _KERNEL_LIBS:
        return f"{mod}.{getattr(fn, '__name__', '?')}"
    m = sys.modules.get(mod)
    path = str(getattr(m, "__file__", "") or "")
    if path.endswith((".so", ".pyd")) and not path.startswith(roots):
        return f"{mod}.{getattr(fn, '__name__', '?')}"
    return None


@contextmanager
def _triton_hooks(record: LaunchRecord) -> Iterator[None]:
    targets = []
    try:
        from triton.runtime.jit import JITFunction
        targets.append((JITFunction, "run"))
        from triton.runtime.interpreter import InterpretedFunction
        targets.append((InterpretedFunction, "run"))
        from triton.compiler.compiler import CompiledKernel
        targets.append((CompiledKernel, "__getitem__"))
    except ImportError:
        pass
    saved = [(cls, attr, cls.__dict__[attr]) for cls, attr in targets if attr in cls.__dict__]

    def wrap(original: Callable) -> Callable:
        def recorded(self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                fn = getattr(self, "fn", None)
                record.triton.append(getattr(fn, "__name__", None) or getattr(self, "name", None) or "kernel")
            profiler = sys.getprofile()
            sys.setprofile(None)  # inside Triton nothing is the candidate's: keep the interpreter fast
            try:
                return original(self, *args, **kwargs)
            finally:
                sys.setprofile(profiler)
        return recorded

    for cls, attr, original in saved:
        setattr(cls, attr, wrap(original))
    try:
        yield
    finally:
        for cls, attr, original in saved:
            setattr(cls, attr, original)


@contextmanager
def _extension_hook(record: LaunchRecord) -> Iterator[None]:
    roots = _roots()

    def profile(frame, event, arg):
        if event == "c_call":
            name = _extension_name(arg, roots)
            if name:
                record.extension_calls.append(name)

    previous, previous_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)


@contextmanager
def recording(record: LaunchRecord | None = None) -> Iterator[LaunchRecord]:
    """Record the Triton launches, dispatched operators and extension calls inside the block."""
    rec = record or LaunchRecord()
    with ExitStack() as stack:
        stack.enter_context(_triton_hooks(rec))
        stack.enter_context(_extension_hook(rec))
        stack.enter_context(_OpRecorder(rec))
        yield rec


def _classify_kernels(prof: Any, rec: LaunchRecord) -> None:
    from torch.autograd import DeviceType

    events = list(prof.events())
    # operators and annotations (not runtime calls such as cudaLaunchKernel, which carry a link themselves)
    frontend = {e.id: e for e in events
                if e.device_type == DeviceType.CPU and not getattr(e, "linked_correlation_id", 0)}
    linked = 0
    for e in events:
        if e.device_type != DeviceType.CUDA or e.name.startswith(_NON_KERNELS):
            continue
        parent = frontend.get(getattr(e, "linked_correlation_id", 0) or 0)
        op = parent.name if parent is not None else ""
        ns = op.split("::")[0] if "::" in op else ""
        if ns in TORCH_NAMESPACES:
            origin, linked = "pytorch", linked + 1
        elif ns:
            origin, linked = "candidate", linked + 1
        elif _INDUCTOR_KERNEL.match(e.name):
            origin = "pytorch (inductor)"
        else:
            origin = "candidate"
        rec.kernels.append({"name": e.name[:120], "origin": origin, "launched_under": op[:80],
                            "stream": getattr(e, "device_resource_id", None)})
    if not (rec.triton or rec.extension_calls or rec.opaque_ops):
        # nothing of the candidate's was seen launching from Python: an unlinked kernel is a library's
        # whose link the profiler lost, not a way around the detector
        for k in rec.kernels:
            if k["origin"] == "candidate":
                k["origin"] = "unattributed"
                if "unlinked" not in " ".join(rec.notes):
                    rec.notes.append("unlinked kernels with no Triton, extension or custom-op launch seen from "
                                     "Python are not counted as the candidate's")
    if rec.kernels and not linked and rec.compute_ops:
        # aten computed, yet no kernel links to any operator: the profiler's linkage is not usable here
        rec.notes.append("profiler kernels could not be linked to operators; decided by the launch hooks")
        rec.profiled = False
        for k in rec.kernels:
            k["origin"] = "unattributed"


def record_call(fn: Callable, args: list, *, device: str,
                after: Callable[[], Any] | None = None) -> tuple[Any, LaunchRecord]:
    """Run `fn(*args)` once under every recorder (and the profiler on a GPU); (output, record).
    `after` runs inside the recorders once the call returned (e.g. joining threads it started, so
    work it left running is recorded too)."""
    rec = LaunchRecord()
    gpu = str(device).startswith("cuda") and torch.cuda.is_available()
    with torch.no_grad():
        if not gpu:
            with recording(rec):
                out = fn(*args)
                if after is not None:
                    after()
            return out, rec
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with recording(rec):
                out = fn(*args)
                if after is not None:
                    after()
            torch.cuda.synchronize()
    rec.profiled = True
    try:
        _classify_kernels(prof, rec)
    except Exception as exc:  # noqa: BLE001 - a profiler format change must not decide anything
        rec.profiled = False
        rec.notes.append(f"profiler output unreadable ({type(exc).__name__}: {exc}); decided by the launch hooks")
    return out, rec
