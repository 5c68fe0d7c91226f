"""The fp32 attention kernel compiles for sm_90 (Hopper) on this CPU-only machine at the instances the
rebound prefill MILP picks for the shipped problems (and the decode menu), for 3xTF32 and TF32 dots, and
the shared memory Triton allocates stays under the chip's per-block limit and the C1 wall at 4-byte
elements."""
from __future__ import annotations

import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json

import torch

from formloop.library.attention_fp32_kernel import LOG2E, _fp32_attention_kernel

out = []
for (br, bc, w, s, d, causal, g, prec) in ((64, 64, 4, 1, 128, True, 1, "tf32x3"), (128, 32, 4, 1, 64, False, 1,
        "tf32x3"), (64, 64, 4, 2, 64, True, 1, "tf32x3"), (16, 64, 4, 3, 128, False, 4, "tf32x3"),
        (64, 64, 4, 1, 128, True, 4, "tf32")):
    f = torch.float32
    strides = (d * 1024 * 8, d * 1024, d, 1)
    k = _fp32_attention_kernel.warmup(f, f, f, f, *strides, *strides, *strides, 1000, 1000, 8, 8 // g, d,
                                      LOG2E / d ** 0.5, G=g, BR=br, BC=bc, DP=d, CAUSAL=causal, DMASK=False,
                                      PREC=prec, LOWP=False, WIDEN=False, num_warps=w, num_stages=s,
                                      grid=(1,))
    out.append({"Br": br, "Bc": bc, "W": w, "S": s, "D": d, "prec": prec, "shared": k.metadata.shared})
print(json.dumps(out))
"""


@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_fp32_kernel_compiles_for_sm90_within_shared_memory():
    from formloop.library.attention_fp32 import smem_wall

    compiled = run_compile_script(SCRIPT)
    assert len(compiled) == 5
    for c in compiled:
        wall = smem_wall(c["Br"], c["Bc"], c["S"], c["D"], c["prec"])
        assert 0 < c["shared"] <= wall <= 227 * 1024, c


LOWP_SCRIPT = r"""
import json
import re

import torch

from formloop.library.attention_fp32_kernel import LOG2E, _fp32_attention_kernel

out = []
for dtype, (br, bc, w, s, d, causal, g) in ((torch.bfloat16, (64, 64, 4, 2, 128, True, 4)),
                                            (torch.float16, (16, 64, 4, 3, 64, False, 4))):
    strides = (d * 1024 * 8, d * 1024, d, 1)
    k = _fp32_attention_kernel.warmup(dtype, dtype, dtype, dtype, *strides, *strides, *strides, 1000, 1000, 8,
                                      8 // g, d, LOG2E / d ** 0.5, G=g, BR=br, BC=bc, DP=d, CAUSAL=causal,
                                      DMASK=False, PREC="tf32", LOWP=True, WIDEN=False, num_warps=w, num_stages=s,
                                      grid=(1,))
    ptx = k.asm["ptx"]
    mma16 = len(re.findall(r"mma[.\w]*\.(?:bf16|f16)\b", ptx))
    out.append({"dtype": str(dtype), "shared": k.metadata.shared, "mma16": mma16})
print(json.dumps(out))
"""


@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_16bit_storage_compiles_for_sm90_with_16bit_dots():
    # the bf16 / fp16 path of the flash kernel (the optimizer's fallback for 16-bit attention outside the proved
    # programs) compiles for sm_90, its dots on 16-bit operands, within the shared memory of the chip
    compiled = run_compile_script(LOWP_SCRIPT)
    assert len(compiled) == 2
    for c in compiled:
        assert 0 < c["shared"] <= 227 * 1024 and c["mma16"] > 0, c
