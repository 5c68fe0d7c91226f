"""Template reuse on the GPU (issue 18 part 2; seed 000 Tables 20-21): a family calibrated and solved on one
model family's workloads, then, for held-out workloads, the nearest solved assignment copied unchanged vs
the family re-solved, both measured in the same process beside the library baseline.

    PYTHONPATH=src python3 benchmarks/template_reuse.py --out $OUT       # on the GPU (a few minutes)
    PYTHONPATH=src python3 benchmarks/template_reuse.py --families gemm --cal-top 0 --solver enumerate --out $OUT
                                                          # GEMM only, priors, enumerated solves: about 1-2 min
    PYTHONPATH=src python3 benchmarks/template_reuse.py --dry-run --out DIR  # anywhere: interpreter, tiny shapes

Studies: studies/template_reuse_gemm.toml (GPU GEMM family solved on Qwen3-8B's projections at six
token counts; held out: Llama-3-70B and Mistral-7B projections at M = 64, 1024, 3000; baseline
torch.matmul = cuBLAS) and studies/template_reuse_attention.toml (decode attention solved at KV lengths
1024, 4096, 16384; held out: six other lengths and Llama-3-70B's heads; baseline torch SDPA, the faster
of its cuDNN and flash backends). Steps, per family:
  1. calibrate on the solved workloads only: the model's --cal-top designs of each are checked and
     timed (CUDA graph) and the efficiency terms fitted (evaluate.calibrate.fit; --cal-top 0: priors);
  2. `api.template_reuse` under that calibration: copy vs re-solve per held-out workload (model, MILP);
  3. every distinct design of step 2 is checked (fresh random inputs, NaN-poisoned output, error vs a
     float64/float32 reference), then timed eager and CUDA graph (formloop.measure.timer through
     evaluate.gpu.time_runnable; GEMM through the plan/run launch path), the baseline likewise.
Ratios: copied / re-solved time (> 1: re-solving wins) and baseline / ours (> 1: ours faster).
Writes template_reuse.json; prints one table per family (every number names its source)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDIES = {"gemm": os.path.join(ROOT, "studies", "template_reuse_gemm.toml"),
           "attention": os.path.join(ROOT, "studies", "template_reuse_attention.toml")}
CAL_TOP = {"gemm": 2, "attention": 8}  # >= the family's calibrated terms + 1 points over its solved workloads
DRY = {  # interpreter-sized studies for --dry-run
    "gemm": 'name = "dry-gemm"\ntemplate = "gemm-tiling-gpu"\nsolver = "enumerate"\n[options]\ndtype = "bf16"\n'
            '[solved]\n"s.m16" = { M = 16, N = 48, K = 64 }\n[held_out]\n"h.m40" = { M = 40, N = 80, K = 64 }\n',
    "attention": 'name = "dry-attention"\ntemplate = "attention-decode"\nsolver = "enumerate"\n'
                 '[solved]\n"s.L32" = { B = 1, Hq = 4, Hkv = 2, D = 16, L = 32 }\n'
                 '[held_out]\n"h.L80" = { B = 1, Hq = 4, Hkv = 2, D = 16, L = 80 }\n',
}


def key(a) -> tuple:
    return tuple(sorted((k, int(v)) for k, v in a.items()))


def ranked(template, params, chip, n: int) -> list[dict]:
    """The model's n cheapest admitted designs of one workload (model order)."""
    import numpy as np

    from formloop.solve.enumerate import assignment_at, feasible_mask, term_grid

    f = template.formulate(params, chip)
    flat = np.flatnonzero(feasible_mask(f))
    cost = term_grid(f, f.cost).ravel()[flat]
    return [dict(assignment_at(f, int(i))) for i in flat[np.argsort(cost, kind="stable")[:n]]]


def measure(template, a, params, ctx) -> dict:
    """Check, then time eager and graph (GPU) or host wall time (interpreter) of one design."""
    from formloop.evaluate.gpu import check

    rec: dict = {"design": dict(a)}
    try:
        runnable = template.program(a, params)
        c = check(runnable, ctx["device"], ctx["gen"])
        rec["check"] = {"passed": c.passed, "rel_error": c.rel_error, "tolerance": c.tolerance}
        if c.passed:
            rec.update(_times(runnable, ctx))
    except Exception as exc:  # noqa: BLE001 - a compile or launch failure is a result
        rec["failure"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return rec


def _times(runnable, ctx) -> dict:
    from formloop.evaluate.gpu import time_runnable

    t = time_runnable(runnable, ctx["device"], ctx["gen"], ctx["policy"], ctx["l2"], eager=True)
    dev = t.get("device") or {}
    return {"graph_us": t["median_us"], "eager_us": t["eager"]["median_us"], "timing": t["timing"],
            "sm_mhz": (dev.get("after") or {}).get("sm_mhz"), "power_w": dev.get("mean_power_w")}


def baseline(family: str, params, ctx) -> dict:
    """cuBLAS (GEMM) or the faster SDPA backend (attention) on the same workload, checked then timed."""
    from formloop.evaluate.gpu import check

    if ctx["device"] == "cpu":
        return {"note": "no baseline off the GPU"}
    if family == "gemm":
        import torch

        from formloop.library.gemm_tiling_instance import TorchGemm

        inst = TorchGemm(params["M"], params["N"], params["K"], "bf16")
        inst.launch = lambda case: torch.matmul(case.a, case.b, out=case.c)
        out = {"name": "torch.matmul (cuBLAS)", "check": check(inst, ctx["device"], ctx["gen"]).passed}
        return {**out, **_times(inst, ctx)}
    from formloop.library.attention_baselines import first_working

    best: dict = {"notes": []}
    for backend in ("cudnn", "flash"):
        inst, notes = first_working(backend, params["B"], params["Hq"], params["Hkv"], params["D"], params["L"],
                                    decode=True)
        best["notes"] += notes
        if inst is None or not check(inst, ctx["device"], ctx["gen"]).passed:
            continue
        t = _times(inst, ctx)
        if "graph_us" not in best or t["graph_us"] < best["graph_us"]:
            best.update(t, name=inst.name)
    return best


def calibrate(family, study, template_of, chip, ctx, top: int, workers: int) -> tuple[dict | None, dict]:
    """Fit the family's efficiency terms to graph timings of the model's `top` designs of each solved
    workload (never a held-out one)."""
    from formloop.evaluate.calibrate import Point, fit

    if top <= 0:
        return None, {"note": "priors (--cal-top 0)"}
    t = template_of(None)
    points, failures = [], 0
    chosen = [(params, a) for params in study.solved.values() for a in ranked(t, params, chip, top)]
    if family == "gemm" and ctx["gpu"]:
        from gemm import precompile

        precompile([(a, (w["M"], w["N"], w["K"]), "bf16") for w, a in chosen], workers)
    for params, a in chosen:
        rec = measure(t, a, params, ctx)
        if "graph_us" in rec:
            points.append(Point(a, params, rec["graph_us"]))
        else:
            failures += 1
    try:
        cal = fit(t, chip, points, near_best=1.5, starts=3, iterations=40)  # bounded CPU time on the GPU host
    except Exception as exc:  # noqa: BLE001 - too few points or a failed fit: priors, said so
        return None, {"note": f"priors: fit failed ({type(exc).__name__}: {str(exc)[:160]})", "points": len(points)}
    return dict(cal.values), {"note": f"fitted to {len(points)} graph timings of the solved workloads "
                                      f"({failures} designs failed)", "rms_log_error_before": cal.rms_log_error_before,
                              "rms_log_error_after": cal.rms_log_error_after, "values": dict(cal.values)}


def run_family(family: str, path: str, ctx, args) -> dict:
    from formloop import api
    from formloop.codesign.reuse import load_reuse_study
    from formloop.hw.chips import get_chip

    study = load_reuse_study(path)
    chip = get_chip(study.chip)
    top = CAL_TOP[family] if args.cal_top is None else args.cal_top
    cal, cal_note = calibrate(family, study, study.family, chip, ctx, top if ctx["gpu"] else 0, args.workers)
    t0 = time.time()
    r = api.template_reuse(path, solver=args.solver if ctx["gpu"] else "enumerate", calibration=cal)
    model_s = time.time() - t0
    template = study.family(cal)
    designs = {}
    for row in r["rows"]:
        for a in (row["copied"], row["resolved"]):
            designs.setdefault((row["workload"], key(a)), a)
    if ctx["gpu"] and family == "gemm":
        from gemm import precompile

        jobs = [(a, tuple(study.held_out[w][k] for k in ("M", "N", "K")), "bf16") for (w, _), a in designs.items()]
        r["precompile"] = precompile(jobs, args.workers)
    for row in r["rows"]:
        params = study.held_out[row["workload"]]
        copied = measure(template, row["copied"], params, ctx) if not row["copied_violations"] else \
            {"design": row["copied"], "failure": "breaks a wall: " + "; ".join(row["copied_violations"])}
        resolved = copied if row["same"] else measure(template, row["resolved"], params, ctx)
        row["gpu"] = {"copied": copied, "resolved": resolved, "baseline": baseline(family, params, ctx)}
        for mode in ("graph", "eager"):
            c, s = copied.get(f"{mode}_us"), resolved.get(f"{mode}_us")
            row["gpu"][f"copy_over_resolve_{mode}"] = c / s if c and s else None
            b = row["gpu"]["baseline"].get(f"{mode}_us")
            row["gpu"][f"baseline_over_resolved_{mode}"] = b / s if b and s else None
        print(f"[{time.time() - ctx['t0']:6.1f} s] {family} {row['workload']} done", flush=True)
    r["calibration_fit"], r["model_seconds"] = cal_note, model_s
    return r


def _f(x, spec=".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def print_table(family: str, r: dict, source: str) -> None:
    print(f"\n{family}: {r['study']} ({r['template']} on {r['chip']}); calibration: {r['calibration_fit']['note']}")
    print(f"times µs ({source}) graph/eager; model µs (model); copy/re = copied / re-solved; base/re = baseline / "
          f"re-solved; solve s = wall time of the {r['solver']} solve")
    print(f"{'held-out':>24} {'copied from':>20} {'copied g/e':>15} {'re-solved g/e':>15} {'copy/re g/e':>11} "
          f"{'model copy/re':>13} {'base g/e':>15} {'base/re g':>9} {'solve s':>7}")
    for row in r["rows"]:
        g = row["gpu"]
        c, s, b = g["copied"], g["resolved"], g["baseline"]
        print(f"{row['workload']:>24} {row['nearest']:>20} {_f(c.get('graph_us')):>7}/{_f(c.get('eager_us')):<7} "
              f"{_f(s.get('graph_us')):>7}/{_f(s.get('eager_us')):<7} "
              f"{_f(g['copy_over_resolve_graph'], '.3f'):>5}/{_f(g['copy_over_resolve_eager'], '.3f'):<5} "
              f"{_f(row['ratio'], '.3f') + (' =' if row['same'] else ''):>13} "
              f"{_f(b.get('graph_us')):>7}/{_f(b.get('eager_us')):<7} "
              f"{_f(g['baseline_over_resolved_graph'], '.3f'):>9} "
              f"{row['solve_s']:7.2f}")
    ratios = [row["gpu"]["copy_over_resolve_graph"] for row in r["rows"] if row["gpu"]["copy_over_resolve_graph"]]
    if ratios:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"geomean copied/re-solved (graph, {source}): {geo:.3f} over {len(ratios)} workloads; re-solve slower "
              f"in {sum(x < 1 for x in ratios)}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--dry-run", action="store_true", help="no GPU: Triton interpreter on tiny studies")
    p.add_argument("--families", default="gemm,attention", help="comma list of gemm, attention")
    p.add_argument("--cal-top", type=int, default=None, help="designs timed per solved workload for the fit "
                   f"(0: priors; default {CAL_TOP})")
    p.add_argument("--solver", choices=("milp", "enumerate"), default=None, help="the solves of step 2 (default: "
                   "the study's, milp; enumerate finds the same optimum in about a second for the 42 GEMM solves)")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    args = p.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    bad = [f for f in families if f not in STUDIES]
    if bad or not families:
        p.error(f"--families: {bad or families} not allowed; allowed: gemm, attention")
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    os.makedirs(args.out, exist_ok=True)
    import torch

    from formloop.measure.timer import TimingPolicy

    gpu = not args.dry_run and torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    ctx = {"gpu": gpu, "device": device, "gen": torch.Generator(device=device).manual_seed(0), "t0": time.time(),
           "policy": TimingPolicy(graph_ms=1.5, budget_ms=20.0, min_reps=5, max_reps=20, max_calls=150) if gpu else
           TimingPolicy(budget_ms=1.0, min_reps=2, max_calls=2, max_sets=1), "l2": 1 << 20}
    result: dict = {"command": " ".join(sys.argv), "source": "gpu" if gpu else "interpreter (cpu wall time)"}
    if gpu:
        from formloop.measure.device import device_facts

        result["device"] = device_facts()
        ctx["l2"] = result["device"]["l2_bytes"]
    studies = dict(STUDIES)
    if not gpu:
        for f in families:
            studies[f] = os.path.join(args.out, f"dry_{f}.toml")
            with open(studies[f], "w") as fh:
                fh.write(DRY[f])
    for f in families:
        result.setdefault("families", {})[f] = run_family(f, studies[f], ctx, args)
    result["seconds"] = time.time() - ctx["t0"]
    with open(os.path.join(args.out, "template_reuse.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    for f in families:
        print_table(f, result["families"][f], "gpu" if gpu else "interpreter")
    print(f"total {result['seconds']:.0f} s (wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
