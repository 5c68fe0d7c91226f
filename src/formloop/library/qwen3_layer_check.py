"""Every fusion choice computes the layer: run a choice's kernels on fresh random inputs and compare
the output and the KV cache with the fp32 reference (qwen3_layer.reference).

On the CPU this runs the Triton interpreter at the tiny config with small fixed designs (the
check is about what the fusion computes, not the tiles); on a GPU it takes the plan's designs.
`python -m formloop.library.qwen3_layer_check` prints one JSON line per (choice, scenario) and is
what the template's obligation runs (in a subprocess, with TRITON_INTERPRET=1 without a GPU)."""
from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping

from formloop.library.qwen3_layer import MODELS, Qwen3Config, Scenario, new_state, new_weights, parse_scenario, \
    reference
from formloop.library.qwen3_layer_template import Fusion, all_fusions

# bf16 storage between the kernels (h, qkv, q, attention, h1, h2, act) against one fp32 pass:
# about 2^-8 relative per rounding, a few of them compounding; the residual stream dominates `out`.
OUT_TOLERANCE = 2e-2
KV_TOLERANCE = 2e-2
CHECK_SCENARIOS = ("prefill:8", "decode:40")

# small designs the interpreter runs quickly (pointer loads: the interpreter has no copy engine)
TINY_DESIGNS = {
    "gemm": {"Tm": 16, "Tn": 32, "Tk": 32, "S": 1, "W": 4, "KS": 1, "G": 4, "L": 0},
    "gemv": {"Tm": 1, "Tn": 8, "Tk": 32, "S": 2, "W": 4, "KS": 2, "G": 1, "L": 0},   # gemv-epilogue-gpu's
    "gemv_norm": {"Tm": 1, "Tn": 8, "Tk": 32, "S": 2, "W": 4, "KS": 1, "G": 1, "L": 0},   # its a_norm (one split)
    "norm": {"BC": 256, "RP": 2, "W": 4, "S": 1},
    "ew": {"BN": 64, "BM": 4, "W": 4},
    "rope": {"HP": 2, "W": 4},
    "prefill": {"Br": 16, "Bc": 16, "S": 1, "W": 4, "GQ": 1, "TM": 0},
    "decode": {"Bn": 16, "KS": 2, "QP": 1, "S": 1, "W": 4, "MG": 1, "TM": 0},
    "relayout": {"BT": 32},
}
KIND_OF = {"qkv": "gemm", "oproj": "gemm", "oproj_add": "gemm", "gateup": "gemm", "gateup_glu": "gemm",
           "down": "gemm", "down_add": "gemm", "norm1": "norm", "norm2": "norm", "addnorm2": "norm", "add1": "ew",
           "add2": "ew", "silu_mul": "ew", "rope": "rope", "relayout": "relayout", "qkv_norm": "gemv_norm",
           "gateup_norm": "gemv_norm", "gateup_glu_norm": "gemv_norm"}


def tiny_designs(sc: Scenario, pdl: bool = False) -> dict[str, dict[str, int]]:
    """The small designs; with `pdl`, decode attention merges in a second kernel (MG = 0), so the chain's
    dependent merge launch is exercised too, and decode's GEMMs are CUDA-core GEMVs (one-row tiles,
    split-K), as the H200 plan picks them (without `pdl` the tensor-core tiles)."""
    gemv = pdl and sc.kind == "decode"
    out = {p: dict(TINY_DESIGNS["gemv" if gemv and k == "gemm" else k]) for p, k in KIND_OF.items()}
    out["attn"] = dict(TINY_DESIGNS["prefill" if sc.kind == "prefill" else "decode"])
    if gemv:
        out["attn"]["MG"] = 0
    return out


def rel_err(got, want) -> float:
    g, w = got.double(), want.double()
    return float((g - w).norm() / max(float(w.norm()), 1e-30))


def check_fusion(cfg: Qwen3Config, sc: Scenario, fusion: Fusion, designs: Mapping[str, Mapping[str, int]],
                 device="cpu", seed: int = 0, kernels=None) -> dict:
    """Run the choice once on fresh inputs (output poisoned with NaN) and compare with the fp32
    reference: relative error of out and of the new cache rows, history rows bit-equal, no NaN."""
    import torch

    from formloop.library.qwen3_layer_kernels import LayerKernels  # noqa: PLC0415 (triton)

    w = new_weights(cfg, device="cpu", seed=seed)
    x, kc, vc = new_state(cfg, sc, device="cpu", seed=seed + 1)
    want, kw, vw = reference(cfg, sc, w, x, kc, vc)
    layer = kernels or LayerKernels(cfg, sc, fusion, designs, w, device)
    xd, kd, vd = x.to(device), kc.to(device), vc.to(device)
    out = torch.full((sc.tokens, cfg.hidden), float("nan"), dtype=torch.bfloat16, device=device)
    layer(xd, kd, vd, out)
    kd, vd, out = kd.cpu(), vd.cpu(), out.cpu()
    new = slice(sc.history, sc.kv_len)
    res = {"fusion": fusion.as_dict(), "scenario": sc.text, "out_rel_err": rel_err(out, want),
           "k_rel_err": rel_err(kd[:, :, new], kw[:, :, new]), "v_rel_err": rel_err(vd[:, :, new], vw[:, :, new]),
           "history_kept": bool(torch.equal(kd[:, :, : sc.history], kc[:, :, : sc.history])
                                and torch.equal(vd[:, :, : sc.history], vc[:, :, : sc.history])),
           "nan": bool(torch.isnan(out).any() or torch.isnan(kd).any() or torch.isnan(vd).any()),
           "tolerance": {"out": OUT_TOLERANCE, "kv": KV_TOLERANCE}, "reference": "fp32 torch"}
    ok = (not res["nan"]) and res["history_kept"] and res["out_rel_err"] <= OUT_TOLERANCE
    ok = ok and max(res["k_rel_err"], res["v_rel_err"]) <= KV_TOLERANCE and all(
        math.isfinite(res[k]) for k in ("out_rel_err", "k_rel_err", "v_rel_err"))
    res["ok"] = bool(ok)
    return res


def check_all(model: str = "tiny", scenarios=CHECK_SCENARIOS, fusions=None, norm_fusion: bool = False,
              rope_fusion: bool = False) -> list[dict]:
    """Each choice on each scenario; with `norm_fusion` also the NF = 1 choices, with `rope_fusion` the RA = 1
    ones (decode only)."""
    cfg = MODELS[model]
    out = []
    for text in scenarios:
        sc = parse_scenario(text)
        nf = (0, 1) if norm_fusion and sc.kind == "decode" else (0,)
        ra = (0, 1) if rope_fusion and sc.kind == "decode" else (0,)
        for fu in fusions or all_fusions((0, 1), nf, ra):
            if (fu.NF or fu.RA) and sc.kind == "prefill":
                continue
            out.append(check_fusion(cfg, sc, fu, tiny_designs(sc, bool(fu.PD))))
    return out


def main(argv: list[str]) -> int:
    norm_fusion, rope_fusion = "--norm-fusion" in argv, "--rope-fusion" in argv
    argv = [a for a in argv if a not in ("--norm-fusion", "--rope-fusion")]
    fusions = None
    if argv:
        fusions = [Fusion(*map(int, a.split(","))) for a in argv]   # R1,GL,R2,PD[,NF[,RA]]
    if os.environ.get("TRITON_INTERPRET") != "1":
        print(json.dumps({"error": "set TRITON_INTERPRET=1 (the check runs the tiny config on the CPU)"}))
        return 2
    ok = True
    for r in check_all(fusions=fusions, norm_fusion=norm_fusion, rope_fusion=rope_fusion):
        ok = ok and r["ok"]
        print(json.dumps(r), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
