"""The Qwen3-8B decode layer's four GEMMs (M = 1): the MILP's picks against a measured menu, a
calibration of the gemm-epilogue template fitted to that menu, and the layer re-planned with it.

    python3 benchmarks/qwen3_decode_gemms.py --out DIR            (GPU, ~3-5 minutes)
    python3 benchmarks/qwen3_decode_gemms.py --out DIR --dry-run  (CPU: menus, model and fit only)

1. menu: for each GEMM part (qkv, oproj+residual, gateup+SiLU·mul, down+residual), every design of a
   grid the template accepts (template.check), ranked by the template's model; the model's best per
   (Tn, KS, Tk), and the MILP's pick (priors).
2. each menu design alone on the GPU (correctness first: NaN-poisoned output vs an fp32 torch
   reference; then formloop.measure.timer, CUDA graph, operand sets whose weights exceed the L2).
3. fit the template's calibrated terms to the measured menu (evaluate.calibrate.fit), re-solve the
   four parts with the fit, and report model rank quality (Spearman) before and after.
4. the layer at the scenario, planned with priors and with the fit, checked against the fp32
   reference, timed (graph and eager) in the same run with torch.compile (default) + graph.
Writes DIR/qwen3_decode_gemms.json; prints tables. Times are us (gpu) unless marked (model)."""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

GRID = {"Tm": (16,), "Tn": (32, 64, 128, 256), "Tk": (64, 128, 256), "S": (3, 4, 5, 6), "W": (4, 8),
        "KS": (1, 2, 3, 4, 6, 8), "G": (8,), "L": (1,)}
PARTS = ("qkv", "oproj_add", "gateup_glu", "down_add")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for qwen3_decode_gemms.json")
    ap.add_argument("--scenario", default="decode:4096", help="a decode scenario (decode:HISTORY)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: menus, model and a fit on model times only")
    ap.add_argument("--per-part", type=int, default=32, help="menu designs measured per part (at most)")
    return ap.parse_args(argv)


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else None
if ARGS is not None:
    import torch

    if ARGS.dry_run or not torch.cuda.is_available():
        ARGS.dry_run = True
        os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

from formloop.evaluate.calibrate import Point, fit, predict, spearman  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import gemm_epilogue, get_template  # noqa: E402
from formloop.library.qwen3_layer import get_model, parse_scenario  # noqa: E402
from formloop.library.qwen3_layer_plan import part_specs, plan_many  # noqa: E402

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def menu(spec, chip, pick: dict, per_part: int) -> tuple[list[dict], list[float]]:
    """Accepted grid designs, the model's best per (Tn, KS, Tk), the MILP pick first."""
    t = get_template(gemm_epilogue.NAME, dtype="bf16", epilogue=spec.chain)
    wl = gemm_epilogue.workload(spec.M, spec.N, spec.K, "bf16", pb_=spec.K)
    names = list(GRID)
    designs = [dict(zip(names, v)) for v in itertools.product(*GRID.values())]
    designs = [d for d in designs if not t.check(d, wl, chip)]
    pts = [Point(d, wl, 1.0) for d in designs]
    model = predict(t, chip, pts)
    best: dict[tuple, tuple[float, dict]] = {}
    for d, m in zip(designs, model):
        k = (d["Tn"], d["KS"], d["Tk"])
        if k not in best or m < best[k][0]:
            best[k] = (float(m), d)
    chosen = [pick] + [d for _, d in sorted(best.values(), key=lambda x: x[0]) if d != pick][: per_part - 1]
    return chosen, list(predict(t, chip, [Point(d, wl, 1.0) for d in chosen]))


def measure_part(spec, design: dict, device, chip) -> dict:
    """One design alone: correctness vs fp32 torch, then the graph time over L2-exceeding weight sets."""
    from formloop.library.qwen3_layer_kernels import _gemm  # noqa: PLC0415
    from formloop.measure.timer import time_launches  # noqa: PLC0415

    plan = _gemm(design, spec.M, spec.N, spec.K, spec.chain)
    wbytes = spec.N * spec.K * 2
    n_sets = max(2, math.ceil(2 * chip.l2_bytes / wbytes) + 1)
    g = torch.Generator(device=device).manual_seed(7)
    sets = []
    for _ in range(n_sets):
        a = torch.randn(spec.M, spec.K, device=device, generator=g).to(torch.bfloat16)
        w = (torch.randn(spec.N, spec.K, device=device, generator=g) / math.sqrt(spec.K)).to(torch.bfloat16)
        r = torch.randn(spec.M, spec.N, device=device, generator=g).to(torch.bfloat16)
        out = torch.full((spec.M, plan.out_width), float("nan"), device=device, dtype=torch.bfloat16)
        sets.append((a, w, r, out))
    ws = plan.new_workspace(device)

    def launch(i):
        a, w, r, out = sets[i]
        ops = {"a": a, "b": w.T}
        if "residual" in spec.chain:
            ops["residual"] = r
        plan.launch(ops, out, ws)

    launch(0)
    torch.cuda.synchronize()
    a, w, r, out = sets[0]
    acc = a.float() @ w.float().T
    if "glu" in spec.chain:
        acc = torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2]
    elif "residual" in spec.chain:
        acc = acc + r.float()
    err = float((out.float() - acc).norm() / acc.norm())
    row = {"design": design, "rel_err": err, "ok": bool(err < 2e-2 and not torch.isnan(out).any())}
    if row["ok"]:
        t = time_launches(launch, n_sets, device=device, mode="graph")
        row["gpu_us"] = t.timing.seconds * 1e6
        row["device"] = t.timing.as_dict().get("device")
    return row


def fit_and_replan(cfg, sc, chip, rows_by_part: dict, specs: dict) -> dict:
    t = get_template(gemm_epilogue.NAME, dtype="bf16")
    points, per_part = [], {}
    for name, rows in rows_by_part.items():
        spec = specs[name]
        wl = gemm_epilogue.workload(spec.M, spec.N, spec.K, "bf16", pb_=spec.K)
        pts = [Point(r["design"], wl, r["gpu_us"]) for r in rows if r.get("gpu_us")]
        per_part[name] = pts
        points += pts
    cal = fit(t, chip, points, near_best=1.5, chip_label="h200")
    quality = {}
    for name, pts in per_part.items():
        te = get_template(gemm_epilogue.NAME, dtype="bf16", epilogue=specs[name].chain)
        meas = [p.latency_us for p in pts]
        before = predict(te, chip, pts)
        after = predict(te, chip, pts, cal.values)
        quality[name] = {"spearman_priors": spearman(before, meas), "spearman_fit": spearman(after, meas),
                         "best_measured_us": min(meas)}
    return {"calibration": {"values": cal.values, "priors": cal.priors, "points": cal.points,
                            "rms_log_error_before": cal.rms_log_error_before,
                            "rms_log_error_after": cal.rms_log_error_after}, "quality": quality}


def time_layer(p, w, device) -> dict:
    from formloop.library.qwen3_layer_measure import measure  # noqa: PLC0415

    m = measure(p, device=device, weights=w, parts=True)
    return {"check": m["check"], "graph_us": m.get("graph_us"), "eager_us": m.get("eager_us"),
            "parts": {q["part"]: q["gpu_us"] for q in m.get("parts", [])},
            "designs": {n: p.parts[n].design for n in PARTS}}


def main() -> int:
    args = ARGS
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg, sc = get_model("qwen3-8b"), parse_scenario(args.scenario)
    if sc.kind != "decode":
        raise SystemExit(f"--scenario: {args.scenario!r} is not a decode scenario (decode:HISTORY)")
    chip = get_chip("h200")
    specs = part_specs(cfg, sc)
    base = plan_many(cfg, [sc], workers=min(8, os.cpu_count() or 1))[0]
    result: dict = {"scenario": sc.text, "tier": "model only (dry run)" if args.dry_run else "gpu", "parts": {}}
    rows_by_part = {}
    for name in PARTS:
        designs, model = menu(specs[name], chip, base.parts[name].design, args.per_part)
        log(f"{name}: {len(designs)} menu designs, MILP pick {base.parts[name].design} "
            f"{base.parts[name].time_us:.1f} us (model)")
        rows = []
        for d, m in zip(designs, model):
            if args.dry_run:
                r = {"design": d, "ok": True, "gpu_us": None}
            else:
                try:
                    r = measure_part(specs[name], d, "cuda", chip)
                except Exception as exc:  # noqa: BLE001 - a design that fails to compile is a finding
                    r = {"design": d, "ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            r["model_us"] = float(m)
            rows.append(r)
        rows_by_part[name] = rows
        good = [r for r in rows if r.get("gpu_us")]
        if good:
            b = min(good, key=lambda r: r["gpu_us"])
            log(f"  pick {rows[0].get('gpu_us') or float('nan'):.1f} us, best measured {b['gpu_us']:.1f} us "
                f"{b['design']} (gpu); wrong: {sum(not r['ok'] for r in rows)}")
        result["parts"][name] = rows
    if args.dry_run:
        # the fit's code path on model times (a self-consistency check, not a measurement)
        for rows in rows_by_part.values():
            for r in rows:
                r["gpu_us"] = r["model_us"] * (1.1 + 0.05 * (r["design"]["KS"] % 3))
    result["fit"] = fit_and_replan(cfg, sc, chip, rows_by_part, specs)
    log(f"fit: rms log error {result['fit']['calibration']['rms_log_error_before']:.3f} -> "
        f"{result['fit']['calibration']['rms_log_error_after']:.3f} over {result['fit']['calibration']['points']} points")
    fitted = plan_many(cfg, [sc], workers=min(8, os.cpu_count() or 1),
                       gemm_calibration=result["fit"]["calibration"]["values"])[0]
    result["refit_designs"] = {n: fitted.parts[n].design for n in PARTS}
    result["refit_model_us"] = {n: fitted.parts[n].time_us for n in PARTS}
    if not args.dry_run:
        from formloop.library.qwen3_layer import new_weights  # noqa: PLC0415
        w = new_weights(cfg, "cuda", seed=0)
        result["layer_priors"] = time_layer(base, w, "cuda")
        result["layer_fit"] = time_layer(fitted, w, "cuda")
        for k in ("layer_priors", "layer_fit"):
            r = result[k]
            log(f"layer ({k}): {r['graph_us']:.1f} us graph / {r['eager_us']:.1f} us eager (gpu), "
                f"check {'ok' if r['check']['ok'] else 'WRONG'}; parts " +
                ", ".join(f"{n} {v:.1f}" for n, v in r["parts"].items()))
    (out_dir / "qwen3_decode_gemms.json").write_text(json.dumps(result, indent=1, default=str))
    for name in PARTS:
        q = result["fit"]["quality"][name]
        print(f"{name:<11} spearman priors {q['spearman_priors']:.2f} fit {q['spearman_fit']:.2f}; "
              f"refit pick {result['refit_designs'][name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
