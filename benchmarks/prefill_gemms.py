"""The Qwen3-8B layer's GEMMs at prefill row counts on the GPU, same timer, same run: the gemm-epilogue
family's MILP pick (the design the layer plan launches), the model's next designs (one per tile shape
and split: `ranked_designs` with distinct Tm, Tn, Tk, KS, W), and cuBLAS (torch.nn.functional.linear,
the epilogue in torch after it). It answers whether the family holds a faster design than its pick
(the model's error at these shapes) and how far the best is from cuBLAS.

    PYTHONPATH=src python3 benchmarks/prefill_gemms.py --out DIR [--rows 128 --rows 512] [--per-part 12]

Shapes: qkv (6144×4096), oproj + residual (4096×4096), gateup + SiLU·mul (24576×4096), down + residual
(4096×12288), bf16, M rows of A. Each design is checked against fp32 torch on NaN-poisoned output first,
then timed by formloop.measure.timer (CUDA graph over weight sets that exceed the L2, and eager: every
eager call goes through EpiloguePlan.launch). Then the family's chip-side terms are fitted to every measured
point and each part re-solved with the fit. Writes DIR/prefill_gemms.json and DIR/gemm_calibration.json (for
`benchmarks/qwen3_layer.py --gemm-calibration`); µs (gpu) unless marked (model)."""
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

import decode_gemv as dg  # noqa: E402 (benchmarks/ is on the path when run as a script)

from formloop.library.qwen3_layer_tune import gemm_menu as family_menu  # noqa: E402 (one menu with the layer's)

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, action="append", help="M, rows of A (repeatable; default 128 and 512)")
    ap.add_argument("--part", action="append", choices=sorted(dg.PARTS), help="parts to run (default: all)")
    ap.add_argument("--per-part", type=int, default=12, help="designs measured per part and row count")
    ap.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, shapes / 64 (code path only)")
    args = ap.parse_args(argv)
    device = "cpu" if args.dry_run else "cuda"
    parts = {k: dg.PARTS[k] for k in (args.part or dg.PARTS)}
    rows_list = args.rows or [128, 512]
    if args.dry_run:
        parts = {k: (n // 64, k_ // 64, c) for k, (n, k_, c) in parts.items()}
        rows_list = [16]
    from formloop.evaluate.calibrate import Point, spearman
    from formloop.hw.chips import get_chip
    from formloop.library import gemm_epilogue

    l2 = get_chip("h200").l2_bytes
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter, dry run)",
              "torch": torch.__version__, "runs": {}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fmt = lambda r: f"{r['graph_us']:.1f}/{r['eager_us']:.1f}" if r and r.get("graph_us") else "—"  # noqa: E731
    for M in rows_list:
        for name, (N, K, chain) in parts.items():
            width = N // 2 if "glu" in chain else N
            sets = dg.operand_sets(N, K, device, l2, M=M)
            floor_us = (N * K + M * K + M * width) * 2 / 4.21e12 * 1e6
            cublas = dg.measure(dg.cublas_launcher(chain), sets, chain, width, device)
            designs, model = family_menu(chain, M, N, K, args.per_part)
            fam = []
            for d, m in zip(designs, model):
                try:
                    row = dg.measure(dg.family_launcher(N, K, chain, d, device, M=M), sets, chain, width, device)
                except Exception as exc:  # noqa: BLE001 - a design that fails to compile is a finding
                    row = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
                fam.append({"design": d, "model_us": m, **row})
            del sets
            good = [r for r in fam if r.get("graph_us")]
            best = min(good, key=lambda r: r["graph_us"]) if good else None
            rec = {"M": M, "N": N, "K": K, "chain": chain, "floor_us_at_4.21TBs": floor_us, "cublas": cublas,
                   "family": fam, "pick": fam[0], "best": best, "wrong": sum(not r.get("ok") for r in fam)}
            if len(good) > 2:
                rec["spearman_model"] = spearman([r["model_us"] for r in good], [r["graph_us"] for r in good])
            result["runs"][f"{name}@{M}"] = rec
            log(f"{name} M={M}: floor {floor_us:.1f} us; cublas g/e {fmt(cublas)}; pick {fmt(fam[0])} "
                f"{fam[0]['design']} model {fam[0]['model_us']:.1f}; best of {len(good)} {fmt(best)} "
                f"{best['design'] if best else ''} model {best['model_us'] if best else 0:.1f}; spearman "
                f"{rec.get('spearman_model', float('nan')):.2f}; wrong {rec['wrong']}")
            (out / "prefill_gemms.json").write_text(json.dumps(result, indent=1))
    points = [Point(x["design"], gemm_epilogue.workload(r["M"], r["N"], r["K"], "bf16", pb_=r["K"]), x["graph_us"])
              for r in result["runs"].values() for x in r["family"] if x.get("graph_us")]
    if len(points) > 30:
        refit(result, points, out)
    (out / "prefill_gemms.json").write_text(json.dumps(result, indent=1))
    return 0


def refit(result: dict, points: list, out: Path) -> None:
    """Fit gemm-epilogue-gpu's chip-side terms to every measured point (one fit across the parts: the
    chains change only the epilogue's few terms), then re-solve each part with the fit: its pick, its
    model rank order against the measurements, and the pick's measured time where the menu holds it.
    Writes DIR/gemm_calibration.json (for `benchmarks/qwen3_layer.py --gemm-calibration`)."""
    from formloop.evaluate.calibrate import Point, fit, predict, spearman
    from formloop.hw.chips import get_chip
    from formloop.library import gemm_epilogue, get_template

    chip = get_chip("h200")
    cal = fit(get_template(gemm_epilogue.NAME, dtype="bf16"), chip, points, near_best=1.5, chip_label="h200")
    result["fit"] = f = {"values": cal.values, "points": cal.points, "rms_log_error_before": cal.rms_log_error_before,
                         "rms_log_error_after": cal.rms_log_error_after}
    log(f"fit: rms log error {f['rms_log_error_before']:.3f} -> {f['rms_log_error_after']:.3f} over {f['points']} "
        f"points")
    for key, r in result["runs"].items():
        good = [x for x in r["family"] if x.get("graph_us")]
        t = get_template(gemm_epilogue.NAME, dtype="bf16", epilogue=r["chain"], calibration=cal.values,
                         calibration_id="given")
        wl = gemm_epilogue.workload(r["M"], r["N"], r["K"], "bf16", pb_=r["K"])
        r["spearman_fit"] = spearman(list(predict(t, chip, [Point(x["design"], wl, 1.0) for x in good])),
                                     [x["graph_us"] for x in good])
        pick = family_menu(r["chain"], r["M"], r["N"], r["K"], 1, cal.values)[0][0]
        same = next((x for x in good if all(x["design"][k] == pick[k] for k in pick if k != "G")), None)
        r["pick_fit"] = {"design": pick, "graph_us": same["graph_us"] if same else None}
        log(f"{key}: pick with the fit {pick} measured {same['graph_us'] if same else float('nan'):.1f} us (pick "
            f"{r['pick']['graph_us']:.1f}, best {r['best']['graph_us']:.1f}); spearman {r.get('spearman_model', 0):.2f}"
            f" -> {r['spearman_fit']:.2f}")
    (out / "gemm_calibration.json").write_text(json.dumps(f, indent=1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
