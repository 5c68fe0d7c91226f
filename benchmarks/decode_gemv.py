"""Decode GEMMs (M = 1) on the GPU, same timer, same run: gemv-epilogue-gpu (the CUDA-core GEMV
family: its MILP pick with priors, a menu of its designs, and the pick re-solved with a calibration
fitted to that menu), the gemm-epilogue family's best tensor-core designs of the round-3 menu
(RESULTS.md, "The layer's decode GEMMs"), a hand-written GEMV kernel (this file's `_gemv`, a few
configurations: the reference the family's emitted kernel should match), and cuBLAS
(torch.nn.functional.linear, the epilogue in torch after it).

    PYTHONPATH=src python3 benchmarks/decode_gemv.py --out DIR   (GPU, ~2-4 minutes)

Shapes: the Qwen3-8B decode layer's qkv (6144×4096), oproj + residual (4096×4096), gateup + SiLU·mul
(24576×4096, gate and up rows interleaved), down + residual (4096×12288), bf16. Each design is checked
against fp32 torch on NaN-poisoned output first, then timed by formloop.measure.timer (CUDA graph over
weight sets that exceed the L2, and eager: the family through gemm_epilogue_launch.run, thin once bound). Writes
DIR/decode_gemv.json and DIR/gemv_calibration.json
(the fit, for `benchmarks/qwen3_layer.py --gemv-calibration`); µs (gpu) unless marked (model)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__" and "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"   # before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from formloop.library.qwen3_layer_tune import (  # noqa: E402,F401 (the benchmark's names for them)
    GEMV_MENU as MENU, family_launcher, gemv_menu, measure, operand_sets, reference,
)

PARTS = {  # name: (N, K, chain)
    "qkv": (6144, 4096, ""),
    "oproj_add": (4096, 4096, "add(name=residual)"),
    "gateup_glu": (24576, 4096, "glu(act=silu)"),
    "down_add": (4096, 12288, "add(name=residual)"),
}
MENU_BEST = {  # the round-3 menu's best tensor-core design per part (RESULTS.md)
    "qkv": {"Tm": 16, "Tn": 64, "Tk": 128, "S": 5, "W": 8, "KS": 1, "G": 8, "L": 1},
    "oproj_add": {"Tm": 16, "Tn": 64, "Tk": 128, "S": 5, "W": 8, "KS": 2, "G": 8, "L": 1},
    "gateup_glu": {"Tm": 16, "Tn": 256, "Tk": 128, "S": 3, "W": 8, "KS": 1, "G": 8, "L": 1},
    "down_add": {"Tm": 16, "Tn": 64, "Tk": 128, "S": 5, "W": 8, "KS": 2, "G": 8, "L": 1},
}
HAND = [{"BN": 4, "BK": 1024, "W": 4, "S": 3}, {"BN": 8, "BK": 1024, "W": 4, "S": 3},
        {"BN": 8, "BK": 1024, "W": 4, "S": 2}]  # the best of a 40-configuration sweep in the first call
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


@triton.jit
def _gemv(x_ptr, w_ptr, r_ptr, out_ptr, N, K, BN: tl.constexpr, BK: tl.constexpr, EPI: tl.constexpr):
    """out[n] = Σ_k w[n, k]·x[k] for BN rows (EPI 1: + r[n]; EPI 2: rows (2j, 2j+1) -> silu(g)·u)."""
    pid = tl.program_id(0)
    rn = pid * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    w_ptrs = w_ptr + rn[:, None].to(tl.int64) * K + rk[None, :]
    x_ptrs = x_ptr + rk
    acc = tl.zeros((BN, BK), dtype=tl.float32)
    for _ in range(0, K, BK):
        x = tl.load(x_ptrs).to(tl.float32)
        w = tl.load(w_ptrs).to(tl.float32)
        acc += w * x[None, :]
        w_ptrs += BK
        x_ptrs += BK
    y = tl.sum(acc, axis=1)
    if EPI == 2:
        g, u = tl.split(tl.reshape(y, (BN // 2, 2)))
        v = g / (1.0 + tl.exp(-g)) * u
        ro = pid * (BN // 2) + tl.arange(0, BN // 2)
        tl.store(out_ptr + ro, v.to(out_ptr.dtype.element_ty))
    else:
        if EPI == 1:
            y += tl.load(r_ptr + rn).to(tl.float32)
        tl.store(out_ptr + rn, y.to(out_ptr.dtype.element_ty))


def gemv_launcher(N, K, chain, cfg):
    epi = 2 if "glu" in chain else (1 if "residual" in chain else 0)

    def launch(s, out):
        x, w, r = s
        _gemv[(N // cfg["BN"],)](x, w, r, out, N, K, BN=cfg["BN"], BK=cfg["BK"], EPI=epi,
                                 num_warps=cfg["W"], num_stages=cfg["S"])
    return launch


def cublas_launcher(chain):
    def launch(s, out):
        x, w, r = s
        y = torch.nn.functional.linear(x, w)
        if "glu" in chain:
            y = torch.nn.functional.silu(y[:, 0::2]) * y[:, 1::2]
        elif "residual" in chain:
            y = y + r
        out.copy_(y)
    return launch


def fit_gemv(points):
    from formloop.evaluate.calibrate import fit
    from formloop.hw.chips import get_chip
    from formloop.library import gemv_epilogue as gv, get_template

    cal = fit(get_template(gv.NAME), get_chip("h200"), points, near_best=1.5, chip_label="h200")
    return {"values": cal.values, "priors": cal.priors, "points": cal.points,
            "rms_log_error_before": cal.rms_log_error_before, "rms_log_error_after": cal.rms_log_error_after}


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--part", action="append", choices=sorted(PARTS), help="parts to run (default: all)")
    ap.add_argument("--per-part", type=int, default=28, help="gemv-epilogue designs measured per part")
    ap.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, shapes / 64 (code path only)")
    args = ap.parse_args(argv)
    device = "cpu" if args.dry_run else "cuda"
    if args.dry_run:
        PARTS.update({k: (n // 64, k_ // 64, c) for k, (n, k_, c) in PARTS.items()})
        MENU.update(Tk=(16, 32, 64), Tn=(2, 4, 8))
        HAND[:] = [{"BN": 4, "BK": 32, "W": 4, "S": 2}]
    from formloop.evaluate.calibrate import Point, predict, spearman
    from formloop.hw.chips import get_chip
    from formloop.library import gemv_epilogue as gv, get_template

    l2 = get_chip("h200").l2_bytes
    names = args.part or list(PARTS)
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter, dry run)",
              "torch": torch.__version__, "triton": triton.__version__, "parts": {}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    points, sets_of = [], {}
    fmt = lambda r: f"{r['graph_us']:.1f}/{r['eager_us']:.1f}" if r and r.get("graph_us") else "—"  # noqa: E731
    for name in names:
        N, K, chain = PARTS[name]
        width = N // 2 if "glu" in chain else N
        sets_of[name] = sets = operand_sets(N, K, device, l2)
        floor_us = N * K * 2 / 4.21e12 * 1e6
        rows = {"cublas": measure(cublas_launcher(chain), sets, chain, width, device),
                "tensor_core_best": measure(family_launcher(N, K, chain, MENU_BEST[name], device), sets, chain,
                                            width, device)}
        hand = [{"config": c, **measure(gemv_launcher(N, K, chain, c), sets, chain, width, device)} for c in HAND]
        menu, model, wl = gemv_menu(chain, N, K, args.per_part)
        fam = []
        for d, m in zip(menu, model):
            try:
                row = measure(family_launcher(N, K, chain, gv.design_config(d), device), sets, chain, width, device)
            except Exception as exc:  # noqa: BLE001 - a design that fails to compile is a finding
                row = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
            fam.append({"design": d, "model_us": float(m), **row})
            if row.get("graph_us"):
                points.append(Point(d, wl, row["graph_us"]))
        good = [r for r in fam if r.get("graph_us")]
        best = min(good, key=lambda r: r["graph_us"]) if good else None
        hand_best = min((h for h in hand if h.get("graph_us")), key=lambda h: h["graph_us"], default=None)
        result["parts"][name] = {"N": N, "K": K, "chain": chain, "floor_us_at_4.21TBs": floor_us, **rows,
                                 "hand_gemv": hand, "gemv_family": fam, "gemv_pick_priors": fam[0],
                                 "gemv_best": best, "wrong": sum(not r.get("ok") for r in fam + hand)}
        log(f"{name}: floor {floor_us:.1f} us; cublas g/e {fmt(rows['cublas'])}; tensor-core "
            f"{fmt(rows['tensor_core_best'])}; hand gemv {fmt(hand_best)}; gemv pick (priors) {fmt(fam[0])} {fam[0]['design']} "
            f"model {fam[0]['model_us']:.1f}; gemv best {fmt(best)} {best['design'] if best else ''}; "
            f"wrong {result['parts'][name]['wrong']}")
        (out / "decode_gemv.json").write_text(json.dumps(result, indent=1))
    if len(points) > len(gv.CALIBRATED) + 1:
        result["fit"] = f = fit_gemv(points)
        log(f"fit: rms log error {f['rms_log_error_before']:.3f} -> {f['rms_log_error_after']:.3f} over "
            f"{f['points']} points: {f['values']}")
        (out / "gemv_calibration.json").write_text(json.dumps(f, indent=1))
        for name in names:
            N, K, chain = PARTS[name]
            r = result["parts"][name]
            t = get_template(gv.NAME, epilogue=chain)
            meas = [x for x in r["gemv_family"] if x.get("graph_us")]
            pts = [Point(x["design"], gv.workload(1, N, K), x["graph_us"]) for x in meas]
            r["spearman_priors"] = spearman(predict(t, get_chip("h200"), pts), [p.latency_us for p in pts])
            r["spearman_fit"] = spearman(predict(t, get_chip("h200"), pts, f["values"]), [p.latency_us for p in pts])
            menu, model, _ = gemv_menu(chain, N, K, 1, f["values"])
            known = next((x for x in meas if x["design"] == menu[0]), None)
            width = N // 2 if "glu" in chain else N
            row = known or measure(family_launcher(N, K, chain, gv.design_config(menu[0]), device), sets_of[name],
                                   chain, width, device)
            r["gemv_pick_fit"] = {"design": menu[0], "model_us": float(model[0]), **row}
            log(f"{name}: pick with the fit {fmt(row)} {menu[0]} (model {model[0]:.1f}); spearman "
                f"{r['spearman_priors']:.2f} -> {r['spearman_fit']:.2f}")
    (out / "decode_gemv.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
