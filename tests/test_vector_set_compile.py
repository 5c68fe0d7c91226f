"""The designs the MILP picks for the problem set's single vector ops (KernelBench sizes, fp32) compile for
sm_90 on this CPU-only machine without spills, with the 16-byte divisibility a launch on aligned tensors gets
(Triton specializes such pointers and sizes): the flat elementwise walk issues 128-bit loads and stores in
both bodies (EVEN and masked), and the walls refuse the designs that spilled (C7: the 1024 x 32 x 16-warp row
sum). Runs in a fresh interpreter (the kernel tests import the modules in interpreter mode)."""
from __future__ import annotations


import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json, os, re, subprocess, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from formloop.hw.chips import get_chip
from formloop.library import rowwise, rowwise_kernel as rk, vecops, vecops_kernel as vk
from formloop.library.elementwise import solved_design as ew_design
from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig, load_flat

TARGET = GPUTarget("cuda", 90, 32)
DUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def build(fn, sig, consts, warps, stages=1, aligned=()):
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    k = triton.compile(ASTSource(fn, sig, consts, attrs), target=TARGET,
                       options={"num_warps": warps, "num_stages": stages})
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    text = subprocess.run([DUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    regs, st = re.search(r"REG:(\d+).*?STACK:(\d+)", text).groups()
    ptx = k.asm["ptx"]
    return {"regs": int(regs), "stack": int(st), "ld": len(re.findall(r"ld\.global", ptx)),
            "ld_v4": len(re.findall(r"ld\.global\S*\.v4", ptx)), "st": len(re.findall(r"st\.global", ptx)),
            "st_v4": len(re.findall(r"st\.global\S*\.v4", ptx))}


out = []
for chain, M, N in [("relu", 4096, 393216), ("gelu", 4096, 393216), ("mish", 4096, 393216),
                    ("add(name=other)", 131072, 4096), ("silu", 4096, 393216)]:
    d = ew_design(chain, M, N, "fp32")
    prog = ElementwiseProgram(chain, EwConfig.from_assignment(d), "fp32")
    ptrs = [f"{n}_ptr" for n, _ in prog.tensors()]
    sig = {"x_ptr": "*fp32", "c_ptr": "*fp32", **{p: "*fp32" for p in ptrs}, "L": "i32", "BLOCK": "constexpr",
           "EVEN": "constexpr", "INTERPRET": "constexpr"}
    for even in (True, False):
        r = build(load_flat(prog.spec, d["H"]), sig, {"BLOCK": d["BF"], "EVEN": even, "INTERPRET": False}, d["W"],
                  aligned=["x_ptr", "c_ptr", *ptrs, "L"])
        out.append({"name": f"elementwise {chain} {d} even={even}", "flat": d["F"] == 1, **r})
row_sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "R": "i32", "C": "i32", "sx": "i32"}
for op, R, C in [("sum", 32768, 32768), ("max", 32768, 32768), ("softmax", 4096, 393216),
                 ("log-softmax", 4096, 393216), ("logsumexp", 16384, 65536)]:
    d = rowwise.solved_design(op, R, C, "fp32")
    if op in ("softmax", "log-softmax"):
        sig = {**row_sig, "sy": "i32", "LOG": "constexpr", "BC": "constexpr", "RP": "constexpr", "ONE": "constexpr"}
        consts, fn = {"LOG": op == "log-softmax", "BC": d["BC"], "RP": d["RP"], "ONE": d["BC"] >= C}, rk._softmax_kernel
    else:
        sig = {**row_sig, "OP": "constexpr", "BC": "constexpr", "RP": "constexpr"}
        consts, fn = {"OP": rk.RED_CODE[op], "BC": d["BC"], "RP": d["RP"]}, rk._reduce_kernel
    r = build(fn, sig, consts, d["W"], d["S"], aligned=["x_ptr", "y_ptr", "C", "sx", *(["sy"] if "sy" in sig else [])])
    out.append({"name": f"rowwise {op} {R}x{C} {d}", "flat": False, **r})
# the design the model picked before the register-file wall: it spills, and the wall now refuses it
old = {"BC": 1024, "RP": 32, "W": 16, "S": 2}
sig = {**row_sig, "OP": "constexpr", "BC": "constexpr", "RP": "constexpr"}
r = build(rk._reduce_kernel, sig, {"OP": 0, "BC": 1024, "RP": 32}, 16, 2, aligned=["x_ptr", "y_ptr", "C", "sx"])
t = rowwise.make("sum", "fp32")
walls = sorted(v.name for v in t.check(old, rowwise.workload(32768, 32768, "fp32"), get_chip("h200")))
out.append({"name": f"old row-sum pick {old}", "flat": False, "refused_by": walls, **r})
B, D1, D2 = 128, 4096, 4095
d = vecops.solved_design("colreduce", B * D2, D1, B * D1 * D2 * 4 + B * D2 * 8)
sig = {"x_ptr": "*fp32", "y_ptr": "*i64", "D1": "i32", "D2": "i32", "MIN": "constexpr", "BC": "constexpr",
       "RP": "constexpr"}
r = build(vk._colarg_kernel, sig, {"MIN": False, "BC": d["BC"], "RP": d["RP"]}, d["W"], aligned=["x_ptr", "y_ptr"])
out.append({"name": f"colreduce argmax {B}x{D1}x{D2} {d}", "flat": False, **r})
print(json.dumps(out))
"""


@pytest.mark.skipif(not has_ptxas("cuobjdump"), reason="no ptxas/cuobjdump in the triton wheel")
def test_problem_set_picks_compile_vectorized_without_spills():
    rows = run_compile_script(SCRIPT, prelude="", timeout=900)
    old = [x for x in rows if x["name"].startswith("old row-sum")]
    assert old and old[0]["stack"] > 0 and "C7" in old[0]["refused_by"]  # the wall's reason is real
    picks = [x for x in rows if not x["name"].startswith("old")]
    assert len(picks) == 16
    assert not [(x["name"], x["stack"]) for x in picks if x["stack"]], "a picked design spills"
    flat = [x for x in picks if x["flat"]]
    assert len(flat) == 10  # every problem-set elementwise op takes the flat walk
    assert all(x["ld"] == x["ld_v4"] > 0 and x["st"] == x["st_v4"] > 0 for x in flat), flat
