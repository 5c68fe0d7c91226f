"""A decode plan's second launch replays the compiled kernels of its first (no jit dispatch) with the
very argument list Triton's dispatch handed the launcher: checked on this CPU-only machine by
compiling for sm_90 and recording, instead of launching, what reaches the launcher."""
from __future__ import annotations

import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json
import torch
from triton.runtime.jit import JITFunction
from triton.compiler.compiler import CompiledKernel

calls, dispatches = [], []


def describe(x):
    return x if isinstance(x, (int, float, bool)) else [type(x).__name__, list(getattr(x, "shape", [])),
                                                        getattr(getattr(x, "base", x), "data_ptr", lambda: 0)()]


def _init(self):  # a recording launcher instead of the CUDA one
    self._run = lambda *a: calls.append([self.name, list(a[:3]), [describe(x) for x in a[9:]]])


CompiledKernel._init_handles = _init
jit_run = JITFunction.run
JITFunction.run = lambda self, *a, **k: dispatches.append(self.fn.__name__) or jit_run(self, *a, **k)
from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan

out = []
for cfg in (DecodeConfig(128, 16, 4, 3, 4, 1, 1), DecodeConfig(64, 8, 2, 2, 8, 0, 0)):
    plan = DecodePlan(cfg, 1, 32, 8, 128, 4096, "bf16", 0)
    t = torch.bfloat16
    q, o = torch.zeros(1, 32, 128, dtype=t), torch.zeros(1, 32, 128, dtype=t)
    k, v = torch.zeros(1, 8, 4096, 128, dtype=t), torch.zeros(1, 8, 4096, 128, dtype=t)
    ws = plan.new_workspace("cpu")
    calls.clear(), dispatches.clear()
    plan.launch(q, k, v, o, ws)
    first, first_dispatches = list(calls), len(dispatches)
    plan.launch(q, k, v, o, ws)
    out.append({"first": first, "second": calls[len(first):], "dispatches": [first_dispatches, len(dispatches)]})
print(json.dumps(out))
"""




@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_second_launch_replays_the_compiled_kernels_with_the_same_arguments():
    for run, kernels in zip(run_compile_script(SCRIPT), (1, 2)):
        assert len(run["first"]) == kernels and run["second"] == run["first"]
        assert run["dispatches"] == [kernels, kernels], "the second launch went through the jit dispatch"
