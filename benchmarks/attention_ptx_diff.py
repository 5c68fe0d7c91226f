"""Compare the attention kernels' PTX for sm_90 with an earlier revision's (no GPU: Triton's compiler on the CPU).

    PYTHONPATH=src python3 benchmarks/attention_ptx_diff.py --base REV

Builds the decode split kernel (attention_decode_jit) and the prefill kernel (attention_prefill_kernel) of REV
(`git show REV:path`) and of the working tree at a few designs, and prints per design the instruction lines that
differ: the PTX with its debug sections, location directives, parameter declarations and temporary labels left
out (the kernels' parameter lists may grow while their instructions stay the same). A refactor that must not
change what runs shows 0 lines everywhere. The RoPE-inside decode kernel (ROPE) exists only where the revision
has it; on the copy engine it reads [1, Bn, D] tiles of [B·Hkv, L − 1, D] descriptors where the kernel has HEAD3."""
from __future__ import annotations

import argparse
import difflib
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from formloop.library import attention_decode_jit, attention_prefill_kernel

ROOT = Path(__file__).resolve().parents[1]
CONSTEXPRS = ("G", "QP", "BH", "BN", "D", "PAGE", "SPLIT", "IN_LAUNCH", "TM", "KSP", "WIDEN", "PDL", "WAIT", "ROPE",
              "HEAD3", "BR", "BC", "CAUSAL", "GQ")
# (TM, MG, KS, Bn, QP, W, S, ROPE) decode; (TM, Br, Bc, W, S) prefill
DECODE = ((1, 2, 12, 64, 4, 8, 4, False), (1, 2, 12, 256, 4, 8, 2, False), (0, 1, 8, 128, 2, 4, 3, False),
          (1, 0, 16, 128, 4, 8, 3, False), (1, 2, 12, 64, 4, 8, 4, True), (0, 1, 8, 128, 2, 4, 3, True))
PREFILL = ((1, 64, 64, 4, 3), (0, 128, 64, 8, 2), (1, 128, 128, 8, 3))


def old_module(rev: str, path: str, name: str, tmp: Path):
    text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    f = tmp / f"{name}.py"
    f.write_text(text)
    spec = importlib.util.spec_from_file_location(name, f)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def instructions(fn, const: dict, blocks: dict, warps: int, stages: int) -> list[str]:
    if const.get("HEAD3") and "HEAD3" in fn.arg_names:  # RoPE inside on the copy engine: [B·Hkv, L − 1, D] tiles
        blocks = {n: t.replace("bf16[", "bf16[1, ") for n, t in blocks.items()}
    sig = {}
    for n in fn.arg_names:
        if n in blocks:
            sig[n] = blocks[n]
        elif n in ("ws_ptr", "cos_ptr", "sin_ptr"):
            sig[n] = "*fp32"
        elif n in ("cnt_ptr", "table_ptr"):
            sig[n] = "*i32"
        elif n.endswith(("_ptr", "_src")):
            sig[n] = "*bf16"
        elif n in ("qk_scale", "eps"):
            sig[n] = "fp32"
        elif n in CONSTEXPRS and (n != "BH" or "BN" in fn.arg_names):  # prefill's BH is a runtime count
            sig[n] = "constexpr"
        else:
            sig[n] = "i32"
    k = triton.compile(ASTSource(fn, sig, {c: v for c, v in const.items() if c in fn.arg_names}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    out = []
    for line in k.asm["ptx"].split(".section")[0].splitlines():
        line = line.strip()
        if line and not line.startswith(("//", ".loc", ".file", "$L__tmp", ".param")):
            out.append(re.sub(r"_param_\d+", "_param_N", re.sub(r"\$L__tmp\d+", "T", line)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the revision to compare with")
    args = ap.parse_args()
    changed = compared = 0
    with tempfile.TemporaryDirectory() as tmp:
        old_dec = old_module(args.base, "src/formloop/library/attention_decode_jit.py", "old_decode_jit", Path(tmp))
        old_pre = old_module(args.base, "src/formloop/library/attention_prefill_kernel.py", "old_prefill", Path(tmp))
        cases = []
        for tm, mg, ks, bn, qp, w, s, rope in DECODE:
            const = dict(G=4, QP=qp, BH=max(16, qp), BN=bn, D=128, PAGE=0, SPLIT=ks > 1, IN_LAUNCH=mg == 1,
                         TM=bool(tm), KSP=triton.next_power_of_2(ks), WIDEN=False, PDL=mg == 2, WAIT=True, ROPE=rope,
                         HEAD3=bool(tm and rope))
            blocks = {n: f"tensordesc<bf16[{bn}, 128]>" for n in ("k_ptr", "v_ptr")} if tm else {}
            label = f"decode TM{tm} MG{mg} KS{ks} Bn{bn} QP{qp} W{w} S{s}{' ROPE' if rope else ''}"
            cases.append((label, old_dec._decode_kernel, attention_decode_jit._decode_kernel, const, blocks, w, s))
        for tm, br, bc, w, s in PREFILL:
            const = dict(G=4, BR=br, BC=bc, D=128, CAUSAL=True, GQ=False, TM=bool(tm), WIDEN=False)
            blocks = {"q_src": f"tensordesc<bf16[{br}, 128]>", "k_src": f"tensordesc<bf16[{bc}, 128]>",
                      "v_src": f"tensordesc<bf16[{bc}, 128]>"} if tm else {}
            cases.append((f"prefill TM{tm} Br{br} Bc{bc} W{w} S{s}", old_pre._prefill_kernel,
                          attention_prefill_kernel._prefill_kernel, const, blocks, w, s))
        for label, old, new, const, blocks, w, s in cases:
            if const.get("ROPE") and "ROPE" not in old.arg_names:
                print(f"{label}: not in {args.base}")
                continue
            a, b = instructions(old, const, blocks, w, s), instructions(new, const, blocks, w, s)
            diff = [d for d in difflib.unified_diff(a, b, lineterm="", n=0)
                    if d.startswith(("+", "-")) and not d.startswith(("+++", "---"))]
            changed, compared = changed + bool(diff), compared + 1
            print(f"{label}: {len(a)} / {len(b)} instruction lines, {len(diff)} differ")
    print(f"{changed} of {compared} builds compared differ from {args.base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
