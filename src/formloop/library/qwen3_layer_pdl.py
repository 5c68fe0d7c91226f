"""The PDL obligation of the Qwen3 layer: every kernel the layer launches as a programmatic dependent
(PD = 1) keeps pdl.py's rules, checked on its Triton source (any machine) and on its compiled PTX
(after a run on a GPU).

Per kernel: where its source lives, the constexprs of its PDL launch, its pointer parameters and
which of them no earlier kernel of the layer writes (weights, RoPE tables, positions). The GEMMs are
the emitted source of each chain the layer uses (plain, add(residual), glu(silu)) on both load paths.
Reading a module's source needs no triton (the text is parsed, not imported)."""
from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from formloop.library.gemm_epilogue_emit import CONSTEXPRS, PDL_CONSTEXPRS, KernelSpec, kernel_params, module_source
from formloop.library.gemm_epilogue_ops import parse_chain_text
from formloop.library.pdl_check import PdlViolation, Violation, check_ptx, check_source

GEMM_CHAINS = ("", "add(name=residual)", "glu(act=silu)")


@dataclass(frozen=True)
class PdlKernel:
    """One kernel launched as a programmatic dependent: where its source is and what it may read early."""

    name: str
    module: str            # dotted module holding the def (or '' with `text`)
    constexprs: dict
    pointers: tuple[str, ...]
    read_only: tuple[str, ...] = ()
    text: str = field(default="", repr=False)

    def source(self) -> str:
        if self.text:
            return self.text
        spec = importlib.util.find_spec(self.module)
        return Path(spec.origin).read_text()


def _gemm(chain: str, load_path: int, simt: bool = False, a_norm: bool = False) -> PdlKernel:
    spec = KernelSpec(ab="bf16", c="bf16", lb="col", chain=parse_chain_text(chain), name="qwen3_gemm", a_norm=a_norm)
    params = kernel_params(spec, load_path, pdl=True)
    ints = {"M", "N", "K", "GROUP_M", "SPLIT_K"}
    pointers = tuple(p for p in params if p.endswith(("_ptr", "_desc", "_raw")) and p not in ints)
    read_only = ("b_raw", "b_desc" if load_path else "b_ptr", *(("anorm_ptr",) if a_norm else ()))
    name = _gemm_name(chain, load_path, simt) + (" + a_norm" if a_norm else "")
    return PdlKernel(name, "", {"INTERPRET": False, "PF_SPAN": 512, "PF_LINE": 64},
                     pointers, read_only, module_source(spec, load_path, pdl=True, simt=simt))


def _gemm_name(chain: str, load_path: int, simt: bool) -> str:
    return f"qwen3_gemm[{chain or 'plain'}; {'Tm=1 (CUDA cores)' if simt else f'L={load_path}'}]"


# (load path, CUDA-core GEMV) of the GEMM kernels the layer may launch: both tensor-core load paths, and
# gemv-epilogue-gpu's one-row tiles (decode)
GEMM_VARIANTS = ((0, False), (1, False), (0, True))


def layer_kernels() -> list[PdlKernel]:
    """Every kernel the layer launches with PD = 1 (decode and prefill)."""
    norm = PdlKernel("_norm_kernel", "formloop.library.rowwise_kernel", {"PDL": True},
                     ("x_ptr", "r_ptr", "w_ptr", "b_ptr", "y_ptr", "ro_ptr"), ("w_ptr", "b_ptr"))
    rope = PdlKernel("_qk_rope_kernel", "formloop.library.qk_rope_kernel", {"PDL": True},
                     ("q_ptr", "k_ptr", "v_ptr", "qw_ptr", "kw_ptr", "cos_ptr", "sin_ptr", "pos_ptr", "slot_ptr",
                      "qo_ptr", "kc_ptr", "vc_ptr"), ("qw_ptr", "kw_ptr", "cos_ptr", "sin_ptr", "pos_ptr", "slot_ptr"))
    attn = [PdlKernel(f"_decode_kernel[MG={2 if pdl else 0}]", "formloop.library.attention_decode_jit",
                      {"WAIT": True, "PDL": pdl},
                      ("q_ptr", "k_ptr", "v_ptr", "o_ptr", "ws_ptr", "cnt_ptr", "table_ptr")) for pdl in (False, True)]
    merge = PdlKernel("_merge_kernel", "formloop.library.attention_decode_jit", {"PDL": True, "TRIGGER": True},
                      ("o_ptr", "ws_ptr"))
    gemms = [_gemm(c, lp, simt) for c in GEMM_CHAINS for lp, simt in GEMM_VARIANTS]
    gemms += [_gemm(c, 0, True, a_norm=True) for c in ("", "glu(act=silu)")]   # NF = 1: QKV and GateUp
    return [norm, rope, *attn, merge, *gemms]


def check_kernel(k: PdlKernel, text: str | None = None) -> list[Violation]:
    """The source check of one kernel (`text` replaces its source: how a test injects a fault)."""
    fn_name = k.name.split("[")[0]
    out = check_source(k.source() if text is None else text, fn_name, constexprs=k.constexprs, pointers=k.pointers,
                       read_only=k.read_only)
    return [Violation(k.name, v.line, v.what, v.text) for v in out]


def check_sources(kernels: Iterable[PdlKernel] | None = None) -> list[dict]:
    """One row per kernel: its name, ok, and the violations (kernel:line: what: statement)."""
    rows = []
    for k in kernels if kernels is not None else layer_kernels():
        v = check_kernel(k)
        rows.append({"kernel": k.name, "ok": not v, "violations": [str(x) for x in v], "tier": "source (ast)"})
    return rows


def compiled_ptx(jit_fn) -> list[tuple[str, str]]:
    """(name, PTX) of every kernel Triton compiled from `jit_fn` with launch_pdl (its in-process cache)."""
    out = []
    for entry in getattr(jit_fn, "device_caches", {}).values():
        cache = entry[0] if isinstance(entry, tuple) else entry
        for kernel in list(cache.values()):
            md = getattr(kernel, "metadata", None)
            if md is not None and getattr(md, "launch_pdl", False) and "ptx" in getattr(kernel, "asm", {}):
                out.append((getattr(md, "name", getattr(jit_fn, "__name__", "?")), kernel.asm["ptx"]))
    return out


def check_compiled(layer) -> list[dict]:
    """The PTX check of every PDL kernel a run of `layer` (qwen3_layer_kernels.LayerKernels) compiled."""
    from formloop.library.attention_decode_kernel import _decode_kernel, _merge_kernel  # noqa: PLC0415 (triton)
    from formloop.library.qk_rope_kernel import _qk_rope_kernel  # noqa: PLC0415
    from formloop.library.rowwise_kernel import _norm_kernel  # noqa: PLC0415

    fns = [_norm_kernel, _qk_rope_kernel, _decode_kernel, _merge_kernel, *(g.kernel for g in layer.gemms.values())]
    rows, seen = [], set()
    for fn in fns:
        for name, ptx in compiled_ptx(fn):
            key = hash(ptx)
            if key in seen:
                continue
            seen.add(key)
            v = check_ptx(ptx)
            rows.append({"kernel": name, "ok": not v, "violations": [str(x) for x in v], "tier": "ptx (gpu compile)"})
    return rows


def require(rows: list[dict]) -> None:
    """PdlViolation listing every violation of the rows, if any."""
    bad = [Violation(r["kernel"], 0, "violations", "; ".join(r["violations"])) for r in rows if not r["ok"]]
    if bad:
        raise PdlViolation(bad)


def _compile_ptx(fn, sig: dict, const: dict, arch: int, **options) -> str:
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

    sig = {**sig, **{k: "constexpr" for k in const}}
    src = ASTSource(fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in const.items()})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"launch_pdl": True, **options}).asm["ptx"]


def gemm_ptx(chain: str, load_path: int, arch: int = 90, simt: bool = False) -> str:
    """The PTX of the layer's PDL GEMM (Tm 16, Tn 128, Tk 128, split-K, 8 warps; `simt`: Tm 1, Tn 8,
    Tk 512) compiled for sm_`arch` by Triton without a GPU (ASTSource; a process without TRITON_INTERPRET)."""
    from formloop.library.gemm_epilogue_kernel import load_kernel  # noqa: PLC0415 (triton)
    from formloop.library.gemm_tiling_kernel import PRECISION  # noqa: PLC0415 (triton)

    spec = KernelSpec(ab="bf16", c="bf16", lb="col", chain=parse_chain_text(chain), name="qwen3_gemm")
    fn = load_kernel(spec, load_path, pdl=True, simt=simt)
    bm, bn, bk = (1, 8, 512) if simt else (16, 128, 128)
    sig = {p: {"a_desc": f"tensordesc<bf16[{bm}, {bk}]>", "b_desc": f"tensordesc<bf16[{bn}, {bk}]>",
               "ws_ptr": "*fp32", "cnt_ptr": "*i32"}.get(p, "*bf16" if p.endswith(("_ptr", "_raw")) else "i32")
           for p in kernel_params(spec, load_path, pdl=True)}
    const = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, ALIGN=8, PRECISION=PRECISION["bf16"], TO_WORKSPACE=True,
                 WIDEN=False, INTERPRET=False, C_DESC=False, EPI_SPLIT=False, PF_SPAN=512, PF_LINE=64)
    assert set(const) == set(CONSTEXPRS + PDL_CONSTEXPRS)
    return _compile_ptx(fn, sig, const, arch, num_warps=8, num_stages=4)


def vector_ptx(arch: int = 90) -> list[tuple[str, str]]:
    """(name, PTX) of the norm, rope, decode-attention (TMA path, split) and merge kernels with their PDL
    constexprs at the layer's decode shapes, compiled for sm_`arch` without a GPU."""
    from formloop.library.attention_decode_kernel import _decode_kernel, _merge_kernel  # noqa: PLC0415 (triton)
    from formloop.library.qk_rope_kernel import _qk_rope_kernel  # noqa: PLC0415
    from formloop.library.rowwise_kernel import _norm_kernel  # noqa: PLC0415

    def sig(fn, types: dict, n: int) -> dict:
        return {a: types.get(a, "*bf16" if a.endswith("_ptr") else "i32") for a in fn.arg_names[:n]}

    out = []
    norm = sig(_norm_kernel, {"eps": "fp32"}, 16)
    out.append(("_norm_kernel", _compile_ptx(_norm_kernel, norm, dict(OP=0, BC=4096, RP=1, ONE=True, PDL=True), arch,
                                             num_warps=16)))
    rope = sig(_qk_rope_kernel, {"cos_ptr": "*fp32", "sin_ptr": "*fp32", "pos_ptr": "*i32", "slot_ptr": "*i32",
                                 "eps": "fp32"}, 31)
    out.append(("_qk_rope_kernel", _compile_ptx(_qk_rope_kernel, rope, dict(D=128, HP=32, PDL=True), arch,
                                                num_warps=16)))
    dec = sig(_decode_kernel, {"k_ptr": "tensordesc<bf16[16, 128]>", "v_ptr": "tensordesc<bf16[16, 128]>",
                               "ws_ptr": "*fp32", "cnt_ptr": "*i32", "qk_scale": "fp32"}, 23)
    for pdl in (False, True):
        const = dict(G=4, QP=4, BH=16, BN=16, D=128, PAGE=0, SPLIT=True, IN_LAUNCH=False, TM=True, KSP=16,
                     WIDEN=False, PDL=pdl, WAIT=True)
        out.append((f"_decode_kernel[MG={2 if pdl else 0}]", _compile_ptx(_decode_kernel, dec, const, arch,
                                                                          num_warps=8, num_stages=6)))
    merge = sig(_merge_kernel, {"ws_ptr": "*fp32"}, 6)
    out.append(("_merge_kernel", _compile_ptx(_merge_kernel, merge, dict(G=4, QP=4, KSP=16, D=128, PDL=True,
                                                                         TRIGGER=True), arch, num_warps=4)))
    return out


def main() -> int:
    """`python -m formloop.library.qwen3_layer_pdl`: the source rows, then the PTX rows of the GEMMs
    compiled for sm_90 here (no GPU needed), one JSON line each; exit 1 on a violation."""
    rows = check_sources()
    ptx = [(_gemm_name(c, lp, simt), gemm_ptx(c, lp, simt=simt)) for c in GEMM_CHAINS for lp, simt in GEMM_VARIANTS]
    for name, text in ptx + vector_ptx():
        v = check_ptx(text)
        rows.append({"kernel": name, "ok": not v, "violations": [str(x) for x in v],
                     "tier": "ptx (sm_90 compile, no GPU)"})
    for r in rows:
        print(json.dumps(r), flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
