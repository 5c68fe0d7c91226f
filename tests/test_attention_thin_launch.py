"""The thin eager launch of attention-decode and attention-prefill (attention_launch.ThinLaunch): checked on this CPU-only
machine by compiling for sm_90 and recording, in place of the C launcher, the final arguments that
reach it (launch metadata and hook chains aside: no hooks are installed), once through Triton's own dispatch (`DecodePlan.launch`, `PrefillPlan.launch`) and once
through the plan's bound launch (`run`): they must be identical, the bound launch must not go through the JIT,
and a new operand set must bind anew (its pointers in its arguments)."""
from __future__ import annotations

import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json
import torch
from triton.runtime.jit import JITFunction
from triton.compiler.compiler import CompiledKernel
from triton.backends.nvidia.driver import CudaLauncher, wrap_handle_tensordesc

calls, dispatches = [], []


def describe(x):
    if isinstance(x, torch.Tensor):
        return x.data_ptr()  # the C launcher reads a tensor's pointer; the thin path passes it
    if isinstance(x, (tuple, list)):
        return [describe(y) for y in x]
    return x if isinstance(x, (int, float, bool, str)) or x is None else type(x).__name__


class Utils:  # the descriptor encoder: records what it was asked to encode
    def fill_tma_descriptor(self, ptr, swizzle, elem, dtype, block, shape, strides, padding):
        return ("tma", ptr, swizzle, elem, dtype, list(block), list(shape), list(strides), padding)


driver.active.utils = Utils()


class Recording(CudaLauncher):  # Triton's launcher with the C function replaced by a recorder
    def __init__(self, src, metadata):
        self.num_ctas = 1
        self.launch = wrap_handle_tensordesc(lambda *a: calls.append(describe(a)), dict(src.signature),
                                             getattr(metadata, "tensordesc_meta", None))
        self.global_scratch_size = self.profile_scratch_size = 0
        self.global_scratch_align = self.profile_scratch_align = 1
        self.launch_cooperative_grid, self.launch_pdl = metadata.launch_cooperative_grid, metadata.launch_pdl


def _init(self):
    if self.module is None:
        self._run, self.module, self.function = Recording(self.src, self.metadata), 1, 4242


CompiledKernel._init_handles = _init
jit_run = JITFunction.run
JITFunction.run = lambda self, *a, **k: dispatches.append(self.fn.__name__) or jit_run(self, *a, **k)
torch._C._cuda_getCurrentRawStream = lambda index: 0  # the stream Triton's dispatch reads here
from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan
from formloop.library.attention_launch import NOT_RUN, ThinLaunch

out = []
t = torch.bfloat16
for cfg in (DecodeConfig(128, 16, 4, 3, 4, 1, 1), DecodeConfig(64, 8, 2, 2, 8, 0, 0),
            DecodeConfig(64, 1, 4, 3, 4, 1, 0), DecodeConfig(64, 8, 4, 6, 4, 2, 1)):
    plan = DecodePlan(cfg, 1, 32, 8, 128, 4096, "bf16", 0)
    thin = plan._thin[torch.device("cpu")] = ThinLaunch("cpu", False)
    thin.fallback = NOT_RUN  # as on a GPU: the target-only driver compiles for sm_90
    sets = []
    for _ in range(2):
        q, o = torch.zeros(1, 32, 128, dtype=t), torch.zeros(1, 32, 128, dtype=t)
        k, v = torch.zeros(1, 8, 4096, 128, dtype=t), torch.zeros(1, 8, 4096, 128, dtype=t)
        sets.append((q, k, v, o, plan.new_workspace("cpu")))
    row = {}
    for n, ops in enumerate(sets):
        calls.clear()
        plan.launch(*ops)
        jit = list(calls)
        calls.clear()
        plan.run(*ops)
        d0 = len(dispatches)
        plan.run(*ops)
        row[n] = {"jit": jit, "thin": calls[:len(jit)], "again": calls[len(jit):], "dispatches": len(dispatches) - d0}
    row["path"], row["fallback"], row["jit_calls"] = thin.path, thin.fallback, thin.jit_calls
    row["kernels"] = 1 + (cfg.KS > 1 and cfg.MG != 1)
    row["pdl"] = cfg.MG == 2
    row["ptrs"] = [[x.data_ptr() for x in s if x is not None] for s in sets]
    out.append(row)
from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan

for cfg in (PrefillConfig(128, 64, 3, 8, 0, 1), PrefillConfig(64, 64, 2, 4, 1, 0)):
    plan = PrefillPlan(cfg, 1, 32, 8, 128, 256, "bf16", 1)
    thin = plan._thin[torch.device("cpu")] = ThinLaunch("cpu", False)
    thin.fallback = NOT_RUN
    sets = [(torch.zeros(1, 32, 256, 128, dtype=t), torch.zeros(1, 8, 256, 128, dtype=t),
             torch.zeros(1, 8, 256, 128, dtype=t), torch.zeros(1, 32, 256, 128, dtype=t)) for _ in range(2)]
    row = {}
    for n, ops in enumerate(sets):
        calls.clear()
        plan.launch(*ops)
        jit = list(calls)
        calls.clear()
        plan.run(*ops)
        d0 = len(dispatches)
        plan.run(*ops)
        row[n] = {"jit": jit, "thin": calls[:len(jit)], "again": calls[len(jit):], "dispatches": len(dispatches) - d0}
    row["path"], row["fallback"], row["jit_calls"], row["kernels"] = thin.path, thin.fallback, thin.jit_calls, 1
    row["ptrs"] = [[x.data_ptr() for x in s] for s in sets]
    out.append(row)
print(json.dumps(out))
"""


def _flat(x):
    if isinstance(x, list):
        for y in x:
            yield from _flat(y)
    else:
        yield x


def _base(calls):
    return [c[:10] + c[13:] for c in calls]


@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_thin_launch_hands_the_c_launcher_what_tritons_dispatch_does():
    for row in run_compile_script(SCRIPT):
        assert row["path"] == "thin" and row["fallback"] == "" and row["jit_calls"] == 0
        for n in ("0", "1"):
            r = row[n]
            assert len(r["jit"]) == row["kernels"], r["jit"]
            # Triton passes launch metadata and its (empty) hook chains at 10..12; the thin path None (no hooks)
            assert all(c[10:13] == [None, None, None] for c in r["thin"] + r["again"])
            assert _base(r["thin"]) == _base(r["jit"]) and r["again"] == r["thin"], (r["thin"], r["jit"])
            assert r["dispatches"] == 0, "a bound run went through the jit dispatch"
        # each operand set's own pointers reach the launcher (a new set binds anew, never reuses the old)
        for n, ptrs in zip(("0", "1"), row["ptrs"]):
            seen = {v for v in _flat(row[n]["thin"]) if isinstance(v, int)}
            assert all(p in seen for p in ptrs[:1] + ptrs[3:4]), (ptrs, n)
        assert row["0"]["thin"] != row["1"]["thin"]
        # the launcher's pdl flag (argument 6): set on the dependent merge launch only (MG = 2)
        assert [c[6] for c in row["0"]["thin"]] == [False] + [bool(row.get("pdl"))] * (row["kernels"] - 1)
