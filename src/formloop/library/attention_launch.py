"""Plan once, run many: the thin eager launch of the attention families (as gemm_tiling_launch does
for the tiling family).

A plan's `launch` validates its operands, builds the argument list (and, on the copy-engine path,
two or three TMA descriptors in Python), and goes through Triton's compiled-kernel entry, which asks
the driver for the stream, builds launch metadata and encodes each descriptor (`fill_tma_descriptor`)
on every call: tens of microseconds of host work per eager decode call, longer than the kernel at
short histories. A `ThinLaunch` binds, per set of operand base pointers, shapes and strides, each
kernel of the launch (decode: the split kernel and, MG = 0, the merge kernel) to the C function Triton
generated for its signature, with the argument tuple already expanded (descriptors encoded once).
`run` is then one dictionary look-up and one C call per kernel.

The compiled kernel of a binding is the one Triton's JIT picks for those very operands (the binding
calls `JITFunction.warmup` with them, which specializes exactly as a launch would), so a layout that
specializes differently gets its own compiled kernel, never a wrong one. The thin path is taken only
where it is the same launch Triton would make: no launch hooks installed (profilers), no global or
profile scratch, Triton 3.6's launcher layout (see gemm_tiling_launch), not under the interpreter;
otherwise `run` calls the plan's own launch and `fallback` names the reason (never empty while `path`
is 'jit'). A paged cache's block table is still checked on every eager call (its contents can change
under the same pointer)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from formloop.library.gemm_tiling_launch import NOT_RUN, _raw_launcher, device_key, expand, refusal

MAX_BOUND = 256  # operand sets a launcher keeps bound (the timer rotates up to 64)
# One kernel of a launch: (jit function, grid, positional arguments, constexprs and launch options).
Call = tuple[Any, tuple, tuple, dict]


def constexprs(fn, args: Sequence, meta: dict) -> tuple:
    """The constexpr values after the positional arguments, in the kernel's signature order: Triton
    hands a compiled kernel (and its C launcher) every bound argument, constexprs included."""
    return tuple(meta[name] for name in fn.arg_names[len(args):])


class ThinLaunch:
    """The bound launches of one plan on one device."""

    def __init__(self, device, interpreted: bool):
        self.device = device_key(device)
        self.path = "jit"  # 'thin' once a launch is bound
        self.fallback = "interpreter (no compiled kernel)" if interpreted or self.device.type != "cuda" else NOT_RUN
        self.jit_calls = 0  # runs that went through the plan's own launch
        self._bound: dict[tuple, tuple | bool] = {}
        self._index = self.device.index if self.device.index is not None else 0
        # The stream Triton's own launch reads (torch's current raw stream: a capturing graph's too).
        self._get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    def try_bound(self, key: tuple) -> bool:
        """Launch the kernels bound to `key` and say so; False (nothing launched) if none are bound."""
        bound = self._bound.get(key)
        if not bound:
            return False
        stream = self._get_stream(self._index)
        for raw, gx, gy, gz, head, tail in bound:
            raw(gx, gy, gz, stream, *head, *tail)
        return True

    def run(self, key: tuple, calls: Callable[[], list[Call]], jit_launch: Callable[[], None]) -> None:
        """Launch the kernels `calls()` names (built, and the operands validated, only when `key` is new),
        thin when bound, else through `jit_launch`."""
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bind(key, calls())
        if bound is False:
            self.jit_calls += 1
            jit_launch()
            return
        stream = self._get_stream(self._index)
        for raw, gx, gy, gz, head, tail in bound:
            raw(gx, gy, gz, stream, *head, *tail)

    def _bind(self, key: tuple, calls: list[Call]):
        why = refusal(self.fallback, self._get_stream)
        if why:
            self.fallback = why
            return False
        bound = []
        for fn, grid, args, meta in calls:
            compiled = fn.warmup(*args, grid=grid, **meta)  # the kernel Triton's JIT picks for these operands
            compiled = compiled.result() if hasattr(compiled, "result") else compiled
            if compiled is None:
                self.fallback = "no compiled kernel from warmup (jit cache hook)"
                return False
            launcher = compiled.run  # loads the binary, builds the CudaLauncher
            raw = _raw_launcher(launcher)
            if raw is None or launcher.global_scratch_size or launcher.profile_scratch_size:
                self.fallback = "launcher layout not recognised or scratch needed"
                return False
            tail = expand(compiled, (*args, *constexprs(fn, args, meta)))
            if tail is None:
                self.fallback = "compiled signature does not match the arguments"
                return False
            head = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                    compiled.packed_metadata, None, None, None)
            gx, gy, gz = (tuple(grid) + (1, 1))[:3]
            bound.append((raw, gx, gy, gz, head, tuple(tail)))
        self.path, self.fallback = "thin", ""
        if len(self._bound) >= MAX_BOUND:
            self._bound.clear()
        self._bound[key] = tuple(bound)
        return self._bound[key]


def operand_key(*tensors) -> tuple:
    """What a binding depends on: each operand's base pointer, dtype, shape and strides (None: absent)."""
    return tuple(None if t is None else (t.data_ptr(), t.dtype, t.shape, t.stride()) for t in tensors)
