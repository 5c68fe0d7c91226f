"""The vector families' kernels compile for sm_90 on this CPU-only machine (Triton's compiler and the
wheel's ptxas), and the designs the MILP picks at Qwen3-8B / KernelBench sizes do not spill registers
(cuobjdump's STACK is 0): the C1 register wall holds for what is launched. Runs in a fresh interpreter
(the kernel tests import the modules in interpreter mode)."""
from __future__ import annotations

import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json, os, re, subprocess, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from formloop.library import rowwise_kernel as rk, qk_rope_kernel as qk
from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig, load
from formloop.library.gemm_epilogue_emit import tensor_params
from formloop.library.rowwise import solved_design
from formloop.library.elementwise import solved_design as ew_design
from formloop.library.qk_rope import solved_design as qk_design

TARGET = GPUTarget("cuda", 90, 32)
DUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
I = "i32"


def stack(fn, sig, consts, warps, stages=1):
    k = triton.compile(ASTSource(fn, sig, consts), target=TARGET, options={"num_warps": warps, "num_stages": stages})
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    text = subprocess.run([DUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    regs, st = re.search(r"REG:(\d+).*?STACK:(\d+)", text).groups()
    return int(regs), int(st)


out = []
for op, R, C, dt in [("rmsnorm", 4096, 4096, "bf16"), ("rmsnorm", 1, 4096, "bf16"), ("rmsnorm-residual", 2048, 4096,
                     "bf16"), ("layernorm", 4096, 4096, "fp32"), ("groupnorm", 512, 16384, "fp32"),
                     ("rmsnorm", 4096, 8192, "fp32"), ("softmax", 4096, 4096, "fp32"),
                     ("log-softmax", 128, 65536, "fp32"), ("argmax", 4096, 4096, "fp32"),
                     ("logsumexp", 4096, 4096, "fp32"), ("sum", 1, 1000000, "fp32"),
                     ("sum", 32768, 32768, "fp32"), ("rmsnorm-residual", 16, 65536, "bf16")]:
    d = solved_design(op, R, C, dt)
    ty = "*bf16" if dt == "bf16" else "*fp32"
    one = d["BC"] >= C
    if op in rk.NORM_CODE:
        sig = {n: ty for n in ("x_ptr", "r_ptr", "w_ptr", "b_ptr", "y_ptr", "ro_ptr")}
        sig.update({n: I for n in ("R", "C", "sx", "sr", "sy", "sro")}, eps="fp32", G=I, CG=I, HW=I)
        consts = {"OP": rk.NORM_CODE[op], "BC": d["BC"], "RP": d["RP"], "ONE": one}
        fn = rk._norm_kernel
    elif op in ("softmax", "log-softmax"):
        sig = {"x_ptr": ty, "y_ptr": ty, "R": I, "C": I, "sx": I, "sy": I}
        consts = {"LOG": op == "log-softmax", "BC": d["BC"], "RP": d["RP"], "ONE": one}
        fn = rk._softmax_kernel
    else:
        sig = {"x_ptr": ty, "y_ptr": "*i64" if op.startswith("arg") else ty, "R": I, "C": I, "sx": I}
        consts = {"OP": rk.RED_CODE[op], "BC": d["BC"], "RP": d["RP"], "ACC64": False}
        fn = rk._reduce_kernel
    sig.update({k: "constexpr" for k in consts})
    out.append([f"{op} {R}x{C} {dt} {d}", *stack(fn, sig, consts, d["W"], d["S"])])
for chain, M, N in [("gelu(approx=tanh) >> bias(axis=row,name=b)", 8192, 4096), ("silu >> mul(name=other)", 2048, 12288),
                    ("mish >> scale(by=2.0) >> hardtanh(lo=-1.0,hi=1.0)", 4096, 4096),
                    ("scale(by=col,name=s) >> cast(dtype=bf16) >> sigmoid", 1024, 1000)]:
    d = ew_design(chain, M, N, "bf16")
    prog = ElementwiseProgram(chain, EwConfig.from_assignment(d), "bf16")
    ptrs, strides = tensor_params(prog.spec)
    sig = {"x_ptr": "*bf16", "c_ptr": "*bf16", **{p: "*bf16" for p in ptrs}, "M": I, "N": I, "sxm": I, "scm": I,
           **{s: I for s in strides}, "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
    out.append([f"{chain} {M}x{N} {d}", *stack(load(prog.spec), sig, {"BLOCK_M": d["BM"], "BLOCK_N": d["BN"]}, d["W"])])
for T in (1, 2048):
    d = qk_design(T, 32, 8, 128)
    names = ["q_ptr", "k_ptr", "v_ptr", "qw_ptr", "kw_ptr", "cos_ptr", "sin_ptr", "pos_ptr", "slot_ptr", "qo_ptr",
             "kc_ptr", "vc_ptr"]
    sig = dict(zip(names, ["*bf16"] * 5 + ["*fp32", "*fp32", "*i64", "*i64"] + ["*bf16"] * 3))
    sig.update({n: I for n in ("Hq", "Hkv", "st_q", "sh_q", "st_k", "sh_k", "st_v", "sh_v", "st_o", "sh_o", "Lc",
                               "sb_k", "sl_k", "sh_kc", "sb_v", "sl_v", "sh_vc", "s_cs")}, eps="fp32", D="constexpr",
               HP="constexpr")
    out.append([f"qk-norm-rope-kv T={T} {d}", *stack(qk._qk_rope_kernel, sig, {"D": 128, "HP": d["HP"]}, d["W"])])
print(json.dumps(out))
"""


@pytest.mark.skipif(not has_ptxas("cuobjdump"), reason="no ptxas/cuobjdump in the triton wheel")
def test_solved_designs_compile_for_sm90_without_spills():
    rows = run_compile_script(SCRIPT, prelude="", timeout=900)
    assert len(rows) == 19
    spilled = [(name, regs, st) for name, regs, st in rows if st != 0]
    assert not spilled, spilled
