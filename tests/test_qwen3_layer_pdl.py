"""PDL in the Qwen3 layer: the structural rules hold for every kernel the layer launches as a
programmatic dependent (source, and the GEMMs' PTX compiled for sm_90 here), planted faults are caught
with the kernel, line and statement, the PDL-off source is unchanged, and PD on and off both compute
the layer in the interpreter."""
import json
import os
import subprocess
import sys

import pytest

from formloop.library.gemm_epilogue_emit import KernelSpec, kernel_params, module_source
from formloop.library.gemm_epilogue_ops import parse_chain_text
from formloop.library.pdl_check import PdlViolation, check_ptx
from formloop.library.qwen3_layer_pdl import check_kernel, check_sources, layer_kernels, require

KERNELS = {k.name: k for k in layer_kernels()}


def test_every_layer_kernel_keeps_the_rules_in_its_source():
    rows = check_sources()
    assert len(rows) == len(KERNELS) >= 11
    assert all(r["ok"] for r in rows), rows
    require(rows)


def _inject(k, before: str, line: str) -> str:
    """The kernel's source with `line` inserted before the first line containing `before` (same indent)."""
    src = k.source()
    i = src.index(before)
    start = src.rindex("\n", 0, i) + 1
    indent = src[start:i]
    return src[:start] + indent + line + "\n" + src[start:]


def test_a_store_before_the_wait_is_caught_with_a_trace():
    k = KERNELS["_norm_kernel"]
    bad = _inject(k, "pdl_wait()", "tl.store(y_ptr + tl.arange(0, BC), tl.zeros([BC], tl.float32))")
    v = check_kernel(k, bad)
    assert len(v) == 1
    msg = str(PdlViolation(v))
    assert "_norm_kernel:" in msg and "store before the wait" in msg and "tl.store(y_ptr" in msg
    line = int(str(v[0]).split(":")[1])
    assert "tl.store(y_ptr" in bad.splitlines()[line - 1]  # the line number points at the planted store
    with pytest.raises(PdlViolation):
        require([{"kernel": k.name, "ok": False, "violations": [str(x) for x in v]}])


def test_a_read_of_an_earlier_kernels_buffer_before_the_wait_is_caught():
    k = KERNELS["qwen3_gemm[add(name=residual); L=0]"]
    bad = _inject(k, "pdl_wait()", "early = tl.load(a_ptr + rm)")
    v = check_kernel(k, bad)
    assert v and "read of ['a_ptr']" in str(v[0])
    # through a local: the pointer parameter is tracked across assignments
    bad = _inject(k, "pdl_wait()", "p = residual_ptr + rm")
    bad = bad.replace("    pdl_wait()", "    early = tl.load(p)\n    pdl_wait()", 1)
    assert "residual_ptr" in str(check_kernel(k, bad))
    # the weight is read-only: its prefetch (and a load of it) before the wait is allowed
    ok = _inject(k, "pdl_wait()", "w0 = tl.load(b_ptr + rk)")
    assert check_kernel(k, ok) == []


def test_a_conditional_or_missing_wait_is_caught():
    k = KERNELS["_qk_rope_kernel"]
    src = k.source()
    guarded = src.replace("        pdl_wait()", "        if tl.program_id(0) == 0:\n            pdl_wait()", 1)
    assert "not every program waits" in str(check_kernel(k, guarded))
    missing = src.replace("        pdl_wait()\n", "", 1)
    assert "no unconditional wait" in str(check_kernel(k, missing))
    helper = src.replace("        pdl_wait()", "        _helper(q_ptr)\n        pdl_wait()", 1)
    assert "call of _helper before the wait" in str(check_kernel(k, helper))


PTX_HEAD = ".visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\t.reg .b32 %r<4>;\n\tld.param.b64 %rd1, [k_param_0];\n"


@pytest.mark.parametrize("body, what", [
    ("\tgriddepcontrol.launch_dependents;\n\tprefetch.global.L2 [%rd1];\n\tgriddepcontrol.wait;\n"
     "\tst.global.b32 [%rd1], %r1;\n\tret;\n}", None),
    ("\tst.global.b32 [%rd1], %r1;\n\tgriddepcontrol.wait;\n\tret;\n}", "memory access before the wait"),
    ("\tld.global.b32 %r1, [%rd1];\n\tgriddepcontrol.wait;\n\tret;\n}", "memory access before the wait"),
    ("\t@%p1 bra $L__BB0_2;\n\tgriddepcontrol.wait;\n\tret;\n}", "branch or barrier before the wait"),
    ("\t@%p1 griddepcontrol.wait;\n\tret;\n}", "predicated wait"),
    ("\tst.global.b32 [%rd1], %r1;\n\tret;\n}", "no griddepcontrol.wait"),
])
def test_ptx_check(body, what):
    v = check_ptx(PTX_HEAD + body)
    if what is None:
        assert v == []
    else:
        assert v and what in " ".join(map(str, v)), v


def test_the_kernels_compiled_for_sm90_keep_the_rules():
    """Triton compiles the emitted PDL GEMMs (both load paths and the CUDA-core GEMV, the layer's three chains),
    the norm, the
    rope kernel, decode attention (TMA path, both merges) and the merge to PTX on this machine (no GPU);
    the PTX check finds nothing but index work, the trigger and the GEMMs' prefetches before the wait."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "formloop.library.qwen3_layer_pdl"], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    ptx = [r for r in rows if r["tier"].startswith("ptx")]
    assert len(ptx) == 14 and proc.returncode == 0, (proc.stderr[-2000:], rows)
    assert {r["kernel"] for r in ptx} >= {"_norm_kernel", "_qk_rope_kernel", "_merge_kernel",
                                          "qwen3_gemm[glu(act=silu); Tm=1 (CUDA cores)]"}


def test_pdl_off_source_has_no_pdl():
    spec = KernelSpec(ab="bf16", c="bf16", lb="col", chain=parse_chain_text("add(name=residual)"), name="qwen3_gemm")
    for lp in (0, 1):
        off, on = module_source(spec, lp), module_source(spec, lp, pdl=True)
        assert not any(w in off for w in ("pdl", "b_raw", "PF_SPAN", "l2_prefetch"))
        assert "pdl_wait()" in on and kernel_params(spec, lp, pdl=True)[-1] == "b_raw"
        assert kernel_params(spec, lp) == kernel_params(spec, lp, pdl=True)[:-1]


def test_pd_on_and_off_compute_the_layer_in_the_interpreter():
    """The per-choice reference check with PD on and off (a subprocess: the interpreter's switch)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "formloop.library.qwen3_layer_check", "1,1,1,1", "1,1,1,0",
                           "0,0,0,1"], capture_output=True, text=True, env=env, timeout=900, check=False)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 6 and all(r["ok"] for r in rows), (proc.stderr[-2000:], rows)
    assert {r["fusion"]["PD"] for r in rows} == {0, 1}


FAULTY = '''
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from formloop.library.pdl import pdl_launch_dependents, pdl_wait
from formloop.library.pdl_check import check_ptx


@triton.jit
def faulty(x_ptr, y_ptr, BLOCK: tl.constexpr):
    pdl_launch_dependents()
    tl.store(y_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))  # the planted fault
    pdl_wait()
    tl.store(y_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + tl.arange(0, BLOCK)))


src = ASTSource(faulty, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": "constexpr"},
                constexprs={(2,): 128})
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"launch_pdl": True}).asm["ptx"]
for v in check_ptx(ptx):
    print(v)
'''


def test_a_store_before_the_wait_is_caught_in_compiled_ptx(tmp_path):
    """A kernel with a store planted before the wait, compiled for sm_90 here: the PTX check names it."""
    f = tmp_path / "faulty_kernel.py"
    f.write_text(FAULTY)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(f)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "faulty:" in proc.stdout and "memory access before the wait" in proc.stdout and "st.global" in proc.stdout
