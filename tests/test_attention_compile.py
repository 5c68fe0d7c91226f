"""The attention kernels compile for sm_90 (Hopper) on this CPU-only machine, and the shared memory
Triton allocates stays within the templates' C1 wall (the wall is conservative).

Triton's compiler and ptxas run without a GPU when the active driver only names the target; the
compile runs in a fresh interpreter (the kernel tests import the modules in interpreter mode)."""
from __future__ import annotations

import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json

from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan, _decode_kernel
from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan, _prefill_kernel


def compiled(fn):
    return {id(k): k for c in fn.device_caches.values() for k in c[0].values()}


out = []
jobs = [("decode", DecodePlan(cfg, 1, 32, 8, 128, 4096, "bf16", page), cfg, page, _decode_kernel)
        for cfg, page in ((DecodeConfig(128, 16, 4, 3, 8, 1), 0), (DecodeConfig(64, 8, 4, 2, 4, 0), 16),
                          (DecodeConfig(128, 16, 4, 4, 8, 1, 1), 0), (DecodeConfig(64, 32, 4, 6, 4, 1, 1), 0),
                          (DecodeConfig(64, 32, 4, 5, 4, 0, 0), 0), (DecodeConfig(64, 16, 4, 3, 4, 2, 1), 0))]
jobs += [("prefill", PrefillPlan(cfg, 1, 32, 8, 128, 4096), cfg, 0, _prefill_kernel)
         for cfg in (PrefillConfig(128, 64, 3, 8, 0, 1), PrefillConfig(64, 64, 2, 4, 1, 0))]
for family, plan, cfg, page, fn in jobs:
    before = compiled(fn)
    plan.warmup()
    new = [k for i, k in compiled(fn).items() if i not in before]
    out.append({"family": family, "config": cfg.__dict__, "page": page, "shared": new[0].metadata.shared,
                "gdc": "griddepcontrol.launch_dependents" in new[0].asm["ptx"]})
from formloop.library.attention_decode_jit import _merge_kernel

merges = [k for c in _merge_kernel.device_caches.values() for k in c[0].values()]


def waits_first(ptx):  # the dependent merge waits before its first global load (a partial)
    return "griddepcontrol.wait" in ptx and ptx.index("griddepcontrol.wait") < ptx.index("ld.global")


out.append({"merges": [[k.metadata.launch_pdl, waits_first(k.asm["ptx"])] for k in merges]})
print(json.dumps(out))
"""




@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_kernels_compile_for_sm90_within_the_shared_memory_wall():
    from formloop.expr import evaluate
    from formloop.hw.chips import get_chip
    from formloop.library import get_template
    from formloop.library.attention_decode import chip_params as decode_chip
    from formloop.library.attention_prefill import chip_params as prefill_chip

    *compiled, merges = run_compile_script(SCRIPT)
    h200 = get_chip("h200")
    assert len(compiled) == 8
    # the dependent merge (MG = 2): its split kernel signals, its merge is a PDL launch that waits; the plain
    # second-kernel merge (MG = 0) neither
    assert [c["gdc"] for c in compiled if c["family"] == "decode"] == [False] * 5 + [True]
    assert set(map(tuple, merges["merges"])) == {(False, False), (True, True)}
    for c in compiled:
        family = c["family"]
        t = get_template(f"attention-{family}")
        values = {**(decode_chip if family == "decode" else prefill_chip)(h200, "bf16"), "B": 1, "Hq": 32, "Hkv": 8,
                  "D": 128, "L": 4096, "e": 2, "page": c["page"], "causal": 1, **c["config"]}
        wall = float(evaluate(t.terms["smem_bytes"], values))
        assert 0 < c["shared"] <= wall <= values["Ms"], c
