"""The vecops kernels compile for sm_90 on this CPU-only machine with the designs `formloop optimize` chooses
for the shipped problems at their full (KernelBench) sizes, and do not spill registers (cuobjdump's STACK
is 0). Runs in a fresh interpreter (the kernel tests import the modules in interpreter mode)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sm90 import has_ptxas

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = r"""
import json, os, re, subprocess, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from formloop.library import vecops_gather as vg, vecops_kernel as vk
from formloop.optimize.capture import capture
from formloop.optimize.recognize import implementers, recognize
from formloop.sol.problem import load_problem

TARGET = GPUTarget("cuda", 90, 32)
DUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
I, F, P = "i32", "*fp32", "*fp32"


def stack(fn, sig, consts, warps):
    sig = {**sig, **{k: "constexpr" for k in consts}}
    k = triton.compile(ASTSource(fn, sig, consts), target=TARGET, options={"num_warps": warps, "num_stages": 1})
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    text = subprocess.run([DUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    regs, st = re.search(r"REG:(\d+).*?STACK:(\d+)", text).groups()
    return int(regs), int(st)


impls = {i.name: i for i in implementers()}
out = []
for name in ("group_norm", "instance_norm", "batch_norm", "cumsum", "argmax_dim", "cross_entropy", "max_pool2d",
             "unfold_patches"):
    cap = capture(load_problem(os.path.join("problems", "level1", name + ".py")))
    region = recognize(cap).regions[0]
    d = impls[region.implementer].choose(region, tier="gpu")
    if "stats" in d:
        s, a = d["stats"], d["apply"]
        sig = dict(x_ptr=P, cnt_ptr=P, mean_ptr=P, m2_ptr=P, ROWS=I, HW=I, CHUNK=I, SPLIT=I)
        out.append([f"{name} stats {s}", *stack(vk._stats_kernel, sig, {"BC": s["BC"], "RP": s["RP"]}, s["W"])])
        sig = dict(cnt_ptr=P, mean_ptr=P, m2_ptr=P, smean_ptr=P, srstd_ptr=P, rm_ptr=P, rv_ptr=P, A=I, ASTRIDE=I,
                   STAT_MUL=I, SPLIT=I, eps="fp32", momentum="fp32")
        out.append([f"{name} combine", *stack(vk._combine_kernel, sig, {"UPDATE": True, "BLOCK": 1024}, 4)])
        sig = dict(x_ptr=P, y_ptr=P, smean_ptr=P, srstd_ptr=P, w_ptr=P, b_ptr=P, ROWS=I, HW=I, CHUNK=I, CH=I, SN=I,
                   CG=I)
        out.append([f"{name} apply {a}", *stack(vk._apply_kernel, sig, {"AFFINE": True, "BC": a["BC"], "RP": a["RP"]},
                                                a["W"])])
        continue
    c = d["config"]
    tile = {"BC": c["BC"], "RP": c["RP"]}
    if name == "cumsum":
        out.append([f"{name} {c}", *stack(vk._scan_kernel, dict(x_ptr=P, y_ptr=P, R=I, C=I), tile, c["W"])])
        lx = vk.torch_scan_log_x(32768, 32768)   # the ModelNew's kernel: PyTorch's CUDA order
        out.append([f"{name} torch order", *stack(vk._scan_torch_kernel, dict(x_ptr=P, y_ptr=P, R=I, C=I),
                                                  {"LOGX": lx, "RP": vk.torch_scan_rows(c, lx)}, c["W"])])
    elif name == "argmax_dim":
        out.append([f"{name} {c}", *stack(vk._colarg_kernel, dict(x_ptr=P, y_ptr="*i64", D1=I, D2=I),
                                          {"MIN": False, **tile}, c["W"])])
    elif name == "cross_entropy":
        sig = dict(x_ptr=P, t_ptr="*i64", loss_ptr=P, valid_ptr=P, R=I, C=I, IGNORE=I)
        out.append([f"{name} {c}", *stack(vg._xent_rows_kernel, sig, tile, c["W"])])
        out.append([f"{name} mean", *stack(vg._mean_kernel, dict(loss_ptr=P, valid_ptr=P, out_ptr=P, R=I),
                                           {"BLOCK": 1024}, 4)])
    else:
        geo = dict(SH=I, SW=I, PH=I, PW=I, DH=I, DW=I)
        if name == "unfold_patches":
            sig = dict(x_ptr=P, y_ptr=P, ROWS=I, L=I, C=I, H=I, W=I, OW=I, **geo)
            fn = vg._unfold_kernel
        else:
            sig = dict(x_ptr=P, y_ptr=P, ROWS=I, OH=I, OW=I, H=I, W=I, **geo)
            fn = vg._maxpool_kernel
        kk = {"KH": 16, "KW": 16} if name == "unfold_patches" else {"KH": 3, "KW": 3}
        if name == "max_pool2d" and c.get("GL"):   # window-row loads: the 3x3/2 pool's SW, DW, Q, SWP as constants
            sig = {k: v for k, v in sig.items() if k not in ("SW", "DW")}
            fn, kk = vg._maxpool_rows_kernel, {**kk, "SW": 2, "DW": 1, "Q": 2, "SWP": 2}
        out.append([f"{name} {c}", *stack(fn, sig, {**kk, **tile}, c["W"])])
print(json.dumps(out))
"""


@pytest.mark.skipif(not has_ptxas(), reason="no ptxas/cuobjdump in the triton wheel")
def test_vecops_designs_compile_for_sm90_without_spills():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(rows) == 16
    spilled = [(name, regs, st) for name, regs, st in rows if st != 0]
    assert not spilled, spilled
