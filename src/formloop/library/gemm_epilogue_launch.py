"""Plan once, run many for gemm-epilogue: an EpiloguePlan's eager launch through the thin launcher of
attention_launch (ThinLaunch).

`EpiloguePlan.launch` checks its operands, builds the argument list (TMA descriptors on the copy-engine
path) and enters Triton's JIT dispatch on every call: 55–175 us of host work per eager call on the H200
(RESULTS.md round 11), longer than a decode GEMV. `run` binds the plan's kernel to one set of operands once
(key: each tensor's base pointer, dtype, shape and strides, attention_launch.operand_key) and then launches
with one dictionary look-up and one C call. The bound kernel is the one Triton's JIT picks for those very
operands; where the thin path would not be the same launch (the interpreter, launch hooks, scratch, an
unknown launcher layout) the plan's own launch runs and the launcher's `fallback` says why."""
from __future__ import annotations

import weakref
from collections.abc import Mapping

import torch

from formloop.library.attention_launch import ThinLaunch, operand_key
from formloop.library.gemm_tiling_launch import device_key

_THIN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # plan -> {device: ThinLaunch}


def thin_launcher(plan, device) -> ThinLaunch:
    """The plan's thin launcher for `device` (created on first use)."""
    from formloop.library.gemm_epilogue_kernel import INTERPRETED  # noqa: PLC0415 (the kernel module imports this one)

    per = _THIN.setdefault(plan, {})
    key = device_key(device)
    return per.get(key) or per.setdefault(key, ThinLaunch(device, INTERPRETED))


def run(plan, inputs: Mapping[str, torch.Tensor], out: torch.Tensor, workspace: torch.Tensor | None = None) -> None:
    """`plan.launch(inputs, out, workspace)`, thin once these operands are bound."""
    thin = thin_launcher(plan, out.device)
    key = operand_key(out, workspace, *(inputs[name] for name in sorted(inputs)))
    if thin.try_bound(key):
        return

    def calls():
        args, options = plan.call_args(inputs, out, workspace)
        return [(plan.kernel, plan.grid, tuple(args), options)]

    thin.run(key, calls, lambda: plan.launch(inputs, out, workspace))
