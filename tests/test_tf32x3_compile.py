"""fp32-storage GEMM kernels compile for sm_90 (Hopper) on this CPU-only machine in each operand
precision, and the compiled code is what the precision says: tf32 = wgmma on tf32 (the low mantissa
bits ignored, no conversion), tf32x3 = three times the tf32 wgmmas plus the cvt.rna.tf32 split of the
operands (Triton's F32DotTC), fp32 = SIMT FMAs. The interpreter's emulation (library/gemm_dot) models
exactly this: truncated operands for tf32, rounded high parts for tf32x3."""
from __future__ import annotations

import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json, re
import torch
from formloop.library.gemm_epilogue_emit import KernelSpec, Shape
from formloop.library.gemm_epilogue_kernel import EpiloguePlan, new_inputs, new_output
from formloop.library.gemm_tiling_kernel import TileConfig
out = {}
for ab in ("tf32", "tf32x3", "fp32"):
    for L in (0, 1):
        spec = KernelSpec(lb="col", ab=ab, c="fp32", chain=(), name="compile_precision")
        plan = EpiloguePlan(spec, TileConfig(128, 128, 32, S=3, W=4, KS=1, G=8, L=L), Shape(512, 512, 512))
        args, options = plan.call_args(new_inputs(plan, "cpu", torch.Generator().manual_seed(0)),
                                       new_output(plan, "cpu"), None)
        ptx = plan.kernel.warmup(*args, grid=plan.grid, **options).asm["ptx"]
        out[f"{ab}/L{L}"] = {"wgmma_tf32": len(re.findall(r"wgmma\.mma_async[^\n]*tf32", ptx)),
                             "fma": len(re.findall(r"\bfma\.rn\.f32", ptx)),
                             "cvt_rna": len(re.findall(r"cvt\.rna\.tf32\.f32", ptx))}

# the MILP's tile for a large tf32x3 GEMM (wall C2 counts the split operands) against the tf32 one
import subprocess, tempfile
from pathlib import Path
import triton
from formloop.dsl.service import check_spec
from formloop.library.gemm_epilogue_ops import parse_chain_text
ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
text = ("kernel k = gemm {\n a = tf32x3 row\n b = tf32x3 col\n c = fp32 row\n arch = sm90\n"
        " shape = 8192 x 8192 x 4096\n}\n")
chosen = TileConfig.from_assignment(check_spec(text=text)["design"]["assignment"])
for tag, cfg in (("milp", chosen), ("tf32_tile", TileConfig(128, 256, 32, S=4, W=8, KS=1, G=8, L=1))):
    spec = KernelSpec(lb="col", ab="tf32x3", c="fp32", chain=parse_chain_text("bias(axis=row,name=bias)"), name="c90x3")
    plan = EpiloguePlan(spec, cfg, Shape(1024, 1024, 1024))
    args, options = plan.call_args(new_inputs(plan, "cpu", torch.Generator().manual_seed(0)), new_output(plan, "cpu"),
                                   None)
    k = plan.kernel.warmup(*args, grid=plan.grid, **options)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    r = subprocess.run([str(ptxas), "-v", "--gpu-name", "sm_90a", f.name, "-o", "/dev/null"], capture_output=True,
                       text=True)
    out[tag] = {"tile": [cfg.Tm, cfg.Tn, cfg.Tk, cfg.W], "spill": int(re.search(r"(\d+) bytes spill stores",
                                                                                 r.stderr).group(1))}
print(json.dumps(out))
"""


@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_each_operand_precision_compiles_to_its_own_instructions_on_sm90():
    out = run_compile_script(SCRIPT)
    for L in (0, 1):
        tf32, x3, fp32 = out[f"tf32/L{L}"], out[f"tf32x3/L{L}"], out[f"fp32/L{L}"]
        assert tf32["wgmma_tf32"] > 0 and tf32["cvt_rna"] == 0 and tf32["fma"] == 0, tf32
        assert x3["wgmma_tf32"] == 3 * tf32["wgmma_tf32"] and x3["cvt_rna"] > 0, x3
        assert fp32["wgmma_tf32"] == 0 and fp32["fma"] > 0, fp32
    # wall C2 with tf32x3's split operands: the MILP's tile does not spill; tf32's favourite tile does
    assert out["milp"]["spill"] == 0 and out["tf32_tile"]["spill"] > 0, (out["milp"], out["tf32_tile"])
