"""gemm-epilogue kernels compile for sm_90 (Hopper) on this CPU-only machine, and the epilogue in
column halves (EPI_SPLIT) holds fewer registers than on the whole tile: a residual beside a 128x256
accumulator on 8 warps spills on the whole tile (255 registers) and fits in halves (ptxas -v).

Triton's compiler and ptxas run without a GPU when the active driver only names the target; the
compile runs in a fresh interpreter (the kernel tests import the modules in interpreter mode)."""
from __future__ import annotations

import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json, re, subprocess, sys, tempfile
from pathlib import Path

import triton

import torch
from formloop.library.gemm_epilogue_emit import KernelSpec, Shape
from formloop.library.gemm_epilogue_kernel import EpiloguePlan, new_inputs, new_output
from formloop.library.gemm_epilogue_ops import make_op
from formloop.library.gemm_tiling_kernel import TileConfig

ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
spec = KernelSpec(lb="col", c="bf16", chain=(make_op("add", ["residual"]),), name="compile_residual")
out = []
for split in (False, True):
    plan = EpiloguePlan(spec, TileConfig(128, 256, 64, S=4, W=8, KS=1, G=8, L=1), Shape(512, 1024, 512),
                        epi_split=split)
    args, options = plan.call_args(new_inputs(plan, "cpu", torch.Generator().manual_seed(0)),
                                   new_output(plan, "cpu"), None)
    k = plan.kernel.warmup(*args, grid=plan.grid, **options)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    r = subprocess.run([str(ptxas), "-v", "--gpu-name", "sm_90a", f.name, "-o", "/dev/null"], capture_output=True,
                       text=True)
    regs = re.search(r"Used (\d+) registers", r.stderr)
    spill = re.search(r"(\d+) bytes spill stores", r.stderr)
    out.append({"split": split, "regs": int(regs.group(1)), "spill_stores": int(spill.group(1)),
                "shared": k.metadata.shared})
print(json.dumps(out))
"""




@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_the_epilogue_in_halves_holds_fewer_registers_on_sm90():
    whole, halves = run_compile_script(SCRIPT)
    assert halves["spill_stores"] == 0 and halves["regs"] < whole["regs"], (whole, halves)
    assert whole["spill_stores"] > 0 or whole["regs"] >= 240, whole  # the reason the halves exist
    assert halves["shared"] <= 227 * 1024


CONV_SCRIPT = r"""
import json, re
import torch
from formloop.library.gemm_epilogue_emit import Conv2d, KernelSpec, Shape
from formloop.library.gemm_epilogue_kernel import EpiloguePlan, new_inputs, new_output
from formloop.library.gemm_epilogue_ops import make_op
from formloop.library.gemm_tiling_kernel import TileConfig

spec = KernelSpec(op="conv2d", ab="tf32x3", lb="col", c="fp32", chain=(make_op("bias", ["row", "fp32"]),),
                  name="compile_conv")
out = []
for c in (64, 60):   # 64: every K block of 32 inside one filter tap; 60: blocks straddle taps
    plan = EpiloguePlan(spec, TileConfig(128, 128, 32, S=3, W=8, KS=1, G=8, L=0),
                        Shape.of_conv(Conv2d(2, 8, 8, c, 64, 3, 3, pad=(1, 1))))
    args, options = plan.call_args(new_inputs(plan, "cpu", torch.Generator().manual_seed(0)),
                                   new_output(plan, "cpu"), None)
    ptx = plan.kernel.warmup(*args, grid=plan.grid, **options).asm["ptx"]
    out.append({"tap": options["TAP_BLOCKS"], "copies16": len(re.findall(r"cp\.async\.cg\.shared\.global", ptx)),
                "copies4": len(re.findall(r"cp\.async\.ca\.shared\.global", ptx))})
print(json.dumps(out))
"""


@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_conv_tap_blocks_load_a_in_16_byte_copies_on_sm90():
    # the conv2d_3x3 problem's design (C = 64, Tk = 32): A's tile is 128 runs of 32 channels, copied 16 bytes at a
    # time; with blocks straddling taps (C = 60) every element finds its own (r, s, c): 4-byte copies
    tap, element = run_compile_script(CONV_SCRIPT)
    assert tap["tap"] and not element["tap"], (tap, element)
    assert tap["copies4"] == 0 and tap["copies16"] > 0, tap
    assert element["copies4"] > 0, element
