"""Plan once, run many: the eager launch path of the tiling family.

`GemmPlan.launch` goes through Triton's JIT entry on every call: it binds the arguments, computes
the specialization key, looks the kernel up, builds three TMA descriptors in Python
(`TensorDescriptor.from_tensor`) and encodes each (`fill_tma_descriptor`) in the launcher wrapper.
On the H200 that host work (about 29 us a call at 64x4096x4096) is longer than the kernel, so eager
calls ran at 0.80x cuBLAS while graph replay (host work out of the number) ran at 0.92x.

A `LaunchPlan` is made once per (config, shape, dtype, device). It owns the compiled kernel (Triton's
`CompiledKernel`, from `JITFunction.warmup` on the first operands), the grid, the split-K workspace,
and, per set of operand base pointers, the launcher's final argument tuple with the TMA descriptors
already encoded (`CUtensorMap`s for fixed base pointers). `run(a, b, c)` is then one dictionary
look-up and one call of the compiled launcher (the C function Triton generated for this signature).

The thin path is taken only where it is the same launch Triton would make:
  - the compiled kernel is the one the JIT would pick for these operands: base pointers 16-byte
    aligned exactly when the planning operands' were, the same strides (the specialization key);
  - no launch hooks are installed (profilers: Triton 3.6 keeps empty HookChains by default, which the
    thin path passes as None), no global or profile scratch is needed;
  - not under the interpreter (TRITON_INTERPRET=1), where there is no compiled kernel.
Otherwise `run` falls back to `GemmPlan.launch` and says so: `path` is 'jit' and `fallback` (never empty
while it is) names the reason; `jit_calls` counts runs whose operands specialize differently.

Triton 3.6 internals read here (checked against its source): `CompiledKernel.run` is a
`CudaLauncher`; its `launch` wraps the generated C launcher in `wrap_handle_tensordesc` (closure
variable `launcher`) that expands each descriptor with `make_tensordesc_arg`; the C launcher takes
(gridX, gridY, gridZ, stream, function, cooperative, pdl, global_scratch, profile_scratch,
packed_metadata, launch_metadata, enter_hook, exit_hook, *expanded kernel arguments)."""
from __future__ import annotations

import inspect
from typing import Any

import torch

from formloop.library.gemm_tiling_kernel import INTERPRETED, GemmPlan

NOT_RUN = "not run yet: no compiled kernel bound"
MAX_BOUND = 256  # operand-pointer sets a plan keeps encoded (the timer rotates up to 64)


def device_key(device) -> torch.device:
    """`device` with a CUDA index filled in ('cuda' -> 'cuda:<current>'): one key per physical device."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _raw_launcher(launcher) -> Any:
    """The generated C launch function under Triton's descriptor wrapper (or None if the layout of
    Triton's launcher is not the one this module was written against)."""
    fn = getattr(launcher, "launch", None)
    if fn is None:
        return None
    if getattr(fn, "__name__", "") == "inner" and fn.__closure__:
        return inspect.getclosurevars(fn).nonlocals.get("launcher")
    return fn


def _hooked(hook) -> bool:
    """Whether a launch hook would run: Triton 3.6 keeps an empty HookChain when none is installed."""
    return hook is not None and bool(getattr(hook, "calls", True))


def _spec_key(args) -> tuple:
    """What Triton's specialization reads from the arguments we vary: pointer alignment to 16 bytes,
    integer values of 1 and multiples of 16 (strides), descriptor block shapes."""
    key = []
    for v in args:
        if isinstance(v, torch.Tensor):
            key.append(("p", v.data_ptr() % 16 == 0, v.dtype))
        elif hasattr(v, "block_shape"):
            key.append(("d", v.base.data_ptr() % 16 == 0, tuple(v.block_shape), tuple(v.strides), v.base.dtype))
        elif isinstance(v, int) and not isinstance(v, bool):
            key.append(("i", v == 1, v % 16 == 0))
        else:
            key.append(("c", v))
    return tuple(key)


class LaunchPlan:
    """C = A·B for one (config, M, N, K, dtype, device): compiled once, launched thin."""

    def __init__(self, plan: GemmPlan, device: str | torch.device):
        self.plan = plan
        self.device = device_key(device)
        self.grid = plan.grid
        self.workspace = plan.new_workspace(self.device)
        self.path = "jit"  # becomes 'thin' once a compiled kernel is bound
        # Why the path is 'jit' (never empty while it is): cleared when a compiled kernel is bound.
        self.fallback = "interpreter (no compiled kernel)" if INTERPRETED or self.device.type != "cuda" else NOT_RUN
        self.jit_calls = 0  # runs that went through Triton's JIT entry (operands it specializes differently)
        self._compiled = None
        self._raw = None
        self._spec = None
        self._bound: dict[tuple, tuple] = {}
        g = tuple(self.grid)
        self._grid3 = (g + (1, 1))[:3]
        self._index = self.device.index if self.device.index is not None else 0
        # The stream Triton's own launch reads (torch's current raw stream: a capturing graph's too).
        self._get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    def __repr__(self) -> str:
        return f"LaunchPlan({self.plan.config.as_dict()}, {self.plan.M}x{self.plan.N}x{self.plan.K} " \
               f"{self.plan.dtype}, path={self.path}{', ' + self.fallback if self.fallback else ''})"

    def run(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, workspace: torch.Tensor | None = None) -> None:
        """C = A·B (the plan's own split-K workspace unless one is given)."""
        ws = self.workspace if workspace is None else workspace
        key = (a.data_ptr(), b.data_ptr(), c.data_ptr(), None if ws is None else ws.data_ptr(),
               a.shape, b.shape, c.shape, a.stride(), b.stride())
        call = self._bound.get(key)
        if call is None:
            call = self._bind(key, a, b, c, ws)
        if call is False:
            self.jit_calls += 1
            self.plan.launch(a, b, c, ws)
            return
        raw, head, tail = call
        gx, gy, gz = self._grid3
        raw(gx, gy, gz, self._get_stream(self._index), *head, *tail)

    def _bind(self, key, a, b, c, ws):
        """Build (and cache) the launcher's argument tuple for these operands, or False for the JIT path."""
        kernel, args, options = self.plan.kernel_call(a, b, c, ws)  # validates shapes and layout
        why = refusal(self.fallback, self._get_stream)
        if why:
            self.fallback = why
            return False
        spec = _spec_key(args)
        if self._compiled is None:
            compiled = kernel.warmup(*args, grid=self.grid, **options)
            compiled = compiled.result() if hasattr(compiled, "result") else compiled
            if compiled is None:  # a jit cache hook declined to compile: Triton's own launch decides
                self.fallback = "no compiled kernel from warmup (jit cache hook)"
                return False
            launcher = compiled.run  # loads the binary, builds the CudaLauncher
            raw = _raw_launcher(launcher)
            if raw is None or launcher.global_scratch_size or launcher.profile_scratch_size:
                self.fallback = "launcher layout not recognised or scratch needed"
                return False
            self._compiled, self._raw, self._spec, self.path = compiled, raw, spec, "thin"
            self._launcher, self.fallback = launcher, ""
        if spec != self._spec:  # these operands would specialize differently: Triton's own path
            return False
        call = (self._raw, self._head(), tuple(self._expand(args)))
        if len(self._bound) >= MAX_BOUND:
            self._bound.clear()
        self._bound[key] = call
        return call

    def _head(self) -> tuple:
        k, L = self._compiled, self._launcher
        return (k.function, L.launch_cooperative_grid, L.launch_pdl, None, None, k.packed_metadata, None, None, None)

    def _expand(self, args):
        return expand(self._compiled, args)


def refusal(fallback: str, get_stream) -> str:
    """Why a bound launch cannot be used here ('' when it can): the interpreter, no raw-stream query
    in this torch, or launch hooks someone installed (Triton's own path runs them)."""
    if fallback.startswith("interpreter"):
        return fallback
    if get_stream is None:
        return "torch has no raw-stream query"
    from triton import knobs

    if _hooked(knobs.runtime.launch_enter_hook) or _hooked(knobs.runtime.launch_exit_hook):
        return "launch hooks installed"
    return ""


def expand(compiled, args) -> list | None:
    """The kernel arguments as the C launcher takes them: tensors as pointers, each host descriptor
    encoded once by Triton's own make_tensordesc_arg; None if the signature does not match."""
    from triton.backends.nvidia.driver import make_tensordesc_arg

    signature = list(compiled.src.signature.values())
    if len(signature) != len(args):
        return None
    metas = getattr(compiled.metadata, "tensordesc_meta", None)
    out, d = [], 0
    for ty, value in zip(signature, args):
        if isinstance(ty, str) and ty.startswith("tensordesc"):
            out.extend(make_tensordesc_arg(value, metas[d] if metas else None))
            d += 1
        elif isinstance(value, torch.Tensor):
            out.append(value.data_ptr())
        else:
            out.append(value)
    return out


def plan_for(plan: GemmPlan, device: str | torch.device) -> LaunchPlan:
    """A launch plan for `plan` on `device` (compiled on its first run)."""
    return LaunchPlan(plan, device)
