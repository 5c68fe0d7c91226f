"""The campaign report: per problem its best accepted candidate (or why it keeps the reference),
speedups vs eager and vs torch.compile, SOL fraction and every attempt's integrity verdict; over the
set fast_p at p = 0, 1, 1.5, 2, geomean and median speedups (formloop.campaign.metrics: a problem
without an accepted candidate counts 1.0 in geomean/median, never in fast_p). Written as
OUT/report.json, OUT/report.md, OUT/fast_p.svg (always, drawn by hand) and OUT/fast_p.png (with
matplotlib). The report also says which engine ran (process pool or Ray), each problem's dtype (and
why a bf16 problem stayed fp32), and where the time went: per attempt its phase times (load, capture,
recognize, solve, child start, harness incl. Triton JIT, integrity), summed over the campaign.

Every time carries its source. On the interpreter tier the times are host wall times of Triton's
interpreter at SMALL sizes: the speedups are printed, labelled, and are not kernel speedups."""
from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from formloop.campaign.metrics import fast_p, geomean, median
from formloop.optimize.store import OptimizeStore
from formloop.optimize.svgplot import write_svg

PS = (0.0, 1.0, 1.5, 2.0)
INTERPRETER_NOTE = ("interpreter tier: Triton kernels ran in Triton's CPU interpreter at SMALL sizes; the times "
                    "are host wall times and the speedups below are NOT kernel speedups (correctness and "
                    "integrity are real)")


def _row(store: OptimizeStore, name: str) -> dict[str, Any]:
    rec = store.problem(name) or {"status": "missing", "reason": "not bootstrapped"}
    attempts = store.attempts(name)
    best = store.best(name)
    ref = next((a["ref_s"] for a in reversed(attempts) if a["ref_s"]), None)
    boot = rec.get("bootstrap") or {}
    row = {"problem": name, "level": rec.get("level"), "status": rec.get("status"), "reason": rec.get("reason", ""),
           "dtype": boot.get("dtype", "fp32"), "dtype_reason": boot.get("dtype_reason", ""),
           "bootstrap_seconds": boot.get("phase_seconds") or {},
           "phase_seconds": [{"attempt": a["attempt"], **(a["detail"].get("phase_seconds") or {})} for a in attempts],
           "stage_seconds": [a["detail"].get("stage_seconds") or {} for a in attempts],
           "step_seconds": [a["detail"].get("step_seconds") or {} for a in attempts],
           "sol_floor_s": rec.get("sol_floor_s"), "sol_note": rec.get("sol_note", ""), "reference_s": ref,
           "compile_s": rec.get("compile_s"), "compile": rec.get("compile"), "attempts": len(attempts),
           "verdicts": [{"attempt": a["attempt"], "origin": a["origin"], "correct": bool(a["correct"]),
                         "accepted": bool(a["accepted"]), "verdict": a["verdict"],
                         "flags": a["detail"].get("integrity_flags", [])} for a in attempts],
           "retired": [{"attempt": a["attempt"], "verdict": a["verdict"], "time_s": a["time_s"],
                        "why": a.get("retired_for", "")} for a in store.retired(name)],
           "best": None, "speedup_eager": None, "speedup_compile": None, "sol_fraction": None, "regions": [],
           "fallbacks": ((rec.get("bootstrap") or {}).get("recognition") or {}).get("fallbacks", [])}
    if best:
        row["best"] = {"attempt": best["attempt"], "candidate": best["candidate"], "time_s": best["time_s"],
                       "time_source": best["time_source"], "origin": best["origin"]}
        row["regions"] = [{"kind": r["kind"], "nodes": r["nodes"], "design": r.get("design"), "notes": r.get("notes")}
                          for r in best["detail"].get("regions", [])]
        if best["ref_s"]:
            row["speedup_eager"] = best["ref_s"] / best["time_s"]
        if rec.get("compile_s"):
            row["speedup_compile"] = rec["compile_s"] / best["time_s"]
            compile_eager = (rec.get("compile") or {}).get("ref_s")
            if best["ref_s"] and compile_eager:   # each side over the eager time of its own run
                row["speedup_compile_bridged"] = (best["ref_s"] / best["time_s"]) / (compile_eager / rec["compile_s"])
        row["sol_fraction"] = best["sol_fraction"]
        row["timing_rounds"] = timing_rounds(best)
    elif rec.get("compile_s"):   # keeps the reference: eager (what ModelNew is) vs torch.compile, one run's times
        eager = (rec.get("compile") or {}).get("ref_s") or ref
        row["speedup_compile"] = rec["compile_s"] / eager if eager else None
    return row


def timing_rounds(attempt: dict) -> int:
    """How many rounds the harness timed the attempt in (its protocol's; 1 before rounds existed)."""
    protocol = ((attempt.get("detail") or {}).get("harness") or {}).get("protocol") or {}
    return int(protocol.get("timing_rounds", 1))


COMPILE_MEANING = ("speedup vs torch.compile = torch.compile's time / formloop's: a problem with an accepted "
                   "candidate compares its best kernel, a problem that keeps the reference compares eager (its "
                   "ModelNew is the reference) with torch.compile; problems where torch.compile failed or was "
                   "incorrect, or that are not measured yet, are left out (counted beside)")


def _summary(rows: list[dict]) -> dict[str, Any]:
    eager = {r["problem"]: r["speedup_eager"] for r in rows}
    comp = {r["problem"]: r["speedup_compile"] for r in rows if r["speedup_compile"] is not None}
    sol = [r["sol_fraction"] for r in rows if r["sol_fraction"] is not None]
    out = {"problems": len(rows), "with_accepted_candidate": sum(1 for r in rows if r["best"]),
           "kept_reference": sum(1 for r in rows if not r["best"]),
           "not_covered": sum(1 for r in rows if r["status"] == "reference"),
           "pending": sum(1 for r in rows if r["status"] == "ready"),
           "attempts": sum(r["attempts"] for r in rows),
           "integrity_flagged_counted": 0,   # by construction: only accepted attempts become a best
           "vs_eager": {"fast_p": {f"{p:g}": fast_p(eager, p) for p in PS}, "geomean": geomean(eager),
                        "median": median(eager),
                        # what OUT/models gives on the gpu tier: a best slower than eager keeps the reference
                        "geomean_models": geomean({k: max(1.0, v) if v else v for k, v in eager.items()})},
           "median_sol_fraction": statistics.median(sol) if sol else None,
           "dtypes": {d: sum(1 for r in rows if r["dtype"] == d) for d in sorted({r["dtype"] for r in rows})},
           "phase_seconds": _phase_totals(rows),
           "stage_seconds": _sum_seconds(st for r in rows for st in r.get("stage_seconds", [])),
           "step_seconds": _sum_seconds(st for r in rows for st in r.get("step_seconds", [])),
           "baseline_stage_seconds": _sum_seconds((r.get("compile") or {}).get("stage_seconds") or {} for r in rows),
           "baseline_step_seconds": _sum_seconds((r.get("compile") or {}).get("step_seconds") or {} for r in rows),
           "bootstrap_seconds": _sum_seconds(r["bootstrap_seconds"] for r in rows)}
    if comp:
        bridged = {r["problem"]: r["speedup_compile_bridged"] for r in rows if r.get("speedup_compile_bridged")}
        out["vs_compile"] = {"fast_p": {f"{p:g}": fast_p(comp, p) for p in PS}, "geomean": geomean(comp),
                             "median": median(comp), "problems": len(comp), "meaning": COMPILE_MEANING,
                             "kept_reference": sum(1 for r in rows if r["problem"] in comp and not r["best"]),
                             # the same comparison from same-run ratios only: (eager / formloop) over (eager /
                             # torch.compile), each pair timed in one child; beside it the direct ratio of the two
                             # children's times on the same problems
                             "bridged": {"problems": len(bridged), "geomean": geomean(bridged),
                                         "direct_geomean": geomean({k: comp[k] for k in bridged})}
                             if bridged else None}
    else:
        out["vs_compile"] = None
    timed = [r.get("timing_rounds", 1) for r in rows if r["best"] is not None]
    out["timing_protocol"] = {"rounds": sum(1 for k in timed if k > 1), "one_round": sum(1 for k in timed if k == 1)}
    out["children_wall_s"] = _children_wall(rows)
    out["compile_baselines"] = {"measured": sum(1 for r in rows if r["compile_s"]),
                                "failed": sum(1 for r in rows if r["compile_s"] == 0.0),
                                "not_measured": sum(1 for r in rows if r["compile_s"] is None)}
    return out


CHILD_PHASES = ("child start", "compile", "harness", "integrity")   # a verify child's wall, on the device


def _children_wall(rows: list[dict]) -> dict[str, float]:
    """Wall seconds of the sandboxed children that hold the device, over every call of the campaign: the verify
    children of the attempts counted now, and the torch.compile baselines' timing children (their warm compiles
    run in the pool beforehand and are not counted)."""
    verify = sum(v for r in rows for ph in r["phase_seconds"] for k, v in ph.items() if k in CHILD_PHASES)
    baselines = [(r.get("compile") or {}).get("wall_s") for r in rows]
    return {"verify_s": round(verify, 1), "attempts": sum(r["attempts"] for r in rows),
            "baselines_s": round(sum(b for b in baselines if b), 1), "baselines": sum(1 for b in baselines if b)}


def _phase_totals(rows: list[dict]) -> dict[str, float]:
    """Host wall seconds per phase, summed over every attempt of the campaign (all calls)."""
    return _sum_seconds(ph for r in rows for ph in r["phase_seconds"])


def _sum_seconds(parts: Iterable[dict]) -> dict[str, float]:
    """Seconds per key summed over `parts` (an attempt's number under 'attempt' is not a time)."""
    total: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            if k != "attempt" and isinstance(v, (int, float)):
                total[k] = round(total.get(k, 0.0) + v, 3)
    return total


def build_report(store: OptimizeStore, names: list[str], *, tier: str, settings: Any, out: Path,
                 engine: dict | None = None) -> dict[str, Any]:
    rows = [_row(store, n) for n in names]
    report = {"tier": tier, "engine": engine or {}, "store": str(store.path), "campaign": store.campaign,
              "dtype": getattr(settings, "dtype", "fp32"),
              "source": "gpu (CUDA-graph timing, formloop.measure.timer)" if tier == "gpu"
              else "cpu wall time, Triton interpreter", "note": INTERPRETER_NOTE if tier != "gpu" else "",
              "settings": {"budget": settings.budget, "small": settings.small, "chip": settings.chip,
                           "tolerance": settings.tolerance, "eps": settings.policy.eps,
                           "window": settings.policy.window, "workers": settings.workers,
                           "fp32_operands": settings.fp32_operands, "dtype": getattr(settings, "dtype", "fp32")},
              "summary": _summary(rows), "problems": rows, "out": str(out)}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "report.md").write_text(markdown(report))
    report["plot_svg"] = str(write_svg(_curves(rows, tier), out / "fast_p.svg",
                                       title=f"fast_p, formloop optimize ({tier}, {report['dtype']})"))
    report["plot"] = _plot(rows, out / "fast_p.png", tier) or report["plot_svg"]
    return report


def _curves(rows: list[dict], tier: str) -> dict[str, dict]:
    curves = {f"vs eager ({tier})": {r["problem"]: r["speedup_eager"] for r in rows}}
    comp = {r["problem"]: r["speedup_compile"] for r in rows if r["speedup_compile"] is not None}
    if comp:
        curves[f"vs torch.compile ({tier})"] = comp
    return curves


def _x(v: float | None, unit: str = "x") -> str:
    return "-" if v is None else f"{v:.3g}{unit}"


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    tier = report["tier"]
    lines = [f"# formloop optimize ({tier}, {report.get('dtype', 'fp32')})", ""]
    if report["note"]:
        lines += [f"> {report['note']}", ""]
    eng = report.get("engine") or {}
    lines += [f"Engine: {eng.get('engine', '?')} ({eng.get('measurements', '')}); store {report.get('store')} "
              f"(campaign {report.get('campaign')}); this call {eng.get('wall_s', '?')} s wall; dtypes "
              + ", ".join(f"{k}: {v}" for k, v in s.get("dtypes", {}).items()), ""]
    ve = s["vs_eager"]
    lines += [f"Problems {s['problems']}: {s['with_accepted_candidate']} with an accepted candidate, "
              f"{s['kept_reference']} keep the reference ({s['not_covered']} not covered, {s['pending']} with "
              f"attempts left); {s['attempts']} attempts; integrity-flagged candidates counted: "
              f"{s['integrity_flagged_counted']}.", "",
              f"vs eager ({report['source']}): geomean {_x(ve['geomean'])}, median {_x(ve['median'])}, fast_p "
              + ", ".join(f"p={p}: {v:.0%}" for p, v in ve["fast_p"].items())]
    if ve.get("geomean_models") is not None and report["tier"] == "gpu":
        lines.append(f"vs eager, OUT/models as written (a best kernel slower than eager keeps the reference): "
                     f"geomean {_x(ve['geomean_models'])}")
    cb = s.get("compile_baselines") or {}
    if s["vs_compile"]:
        vc = s["vs_compile"]
        lines.append(f"vs torch.compile ({vc['problems']} problems, {vc.get('kept_reference', 0)} of them keeping "
                     f"the reference: eager vs torch.compile): geomean {_x(vc['geomean'])}, median "
                     f"{_x(vc['median'])}, fast_p " + ", ".join(f"p={p}: {v:.0%}" for p, v in vc["fast_p"].items())
                     + f"; torch.compile failed or incorrect on {cb.get('failed', 0)}, not measured yet on "
                     f"{cb.get('not_measured', 0)}")
        lines.append(f"({vc.get('meaning', COMPILE_MEANING)})")
        br = vc.get("bridged")
        if br:
            lines.append(f"vs torch.compile from same-run ratios only ((eager / formloop) / (eager / torch.compile), "
                         f"each pair timed in one child), {br['problems']} problems with both: geomean "
                         f"{_x(br['geomean'])} (the two children's times compared directly: "
                         f"{_x(br['direct_geomean'])})")
    else:
        lines.append(f"vs torch.compile: not measured ({cb.get('not_measured', 0)} problems without a baseline; "
                     "benchmarks/optimize_set.py --compile-only measures them)")
    lines.append(f"rule: {report['settings'].get('tolerance')}; reference for correctness: fp32 math (TF32 off); "
                 "eager timing: PyTorch defaults (cuDNN TF32 on)")
    lines.append(f"median SOL fraction of the chosen kernels: {_x(s['median_sol_fraction'], '')}")
    tp = s.get("timing_protocol") or {}
    if tp.get("rounds") or tp.get("one_round"):
        lines.append(f"timing of the best kernels: {tp.get('rounds', 0)} against their reference in rounds on swapped "
                     f"input buffers (formloop.measure.rounds), {tp.get('one_round', 0)} in one round (earlier "
                     "protocol: a multi-GB stream may then differ by up to 12 % by where its memory lies)")
    if s.get("phase_seconds"):
        lines.append("time per phase, all attempts (host wall s): " + ", ".join(
            f"{k} {v:.3g}" for k, v in sorted(s["phase_seconds"].items(), key=lambda kv: -kv[1])))
    cw = s.get("children_wall_s")
    if cw and (cw["verify_s"] or cw["baselines_s"]):
        who = "device-holding children" if tier == "gpu" else "sandboxed measuring children (interpreter, no device)"
        lines.append(f"{who}, all calls (wall s): {cw['verify_s']:.0f} in the verify children of "
                     f"{cw['attempts']} attempts, {cw['baselines_s']:.0f} in {cw['baselines']} torch.compile "
                     f"baselines' timing children; {(cw['verify_s'] + cw['baselines_s']) / 60:.1f} min in all")
    for key, what in (("stage_seconds", "time per stage of the verify children, all attempts"),
                      ("step_seconds", "the same split by the untrusted code running in a stage"),
                      ("baseline_stage_seconds", "time per stage of the torch.compile baselines' timing children"),
                      ("baseline_step_seconds", "the same split by the untrusted code running in a stage")):
        secs = {k: v for k, v in (s.get(key) or {}).items() if not k.startswith("count: ")}
        if secs:
            lines.append(f"{what} (wall s, as the child reported them): " + ", ".join(
                f"{k} {v:.3g}" for k, v in sorted(secs.items(), key=lambda kv: -kv[1])[:12]))
    for key, who in (("step_seconds", "verify"), ("baseline_step_seconds", "torch.compile baselines' timing")):
        counts = {k[len("count: "):]: v for k, v in (s.get(key) or {}).items() if k.startswith("count: ")}
        if counts:
            lines.append(f"compiles in the {who} children (counts, all calls): " + ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(counts.items())))
    if s.get("bootstrap_seconds"):
        lines.append("bootstrap, all problems (host wall s, in the pool: summed over workers): " + ", ".join(
            f"{k} {v:.3g}" for k, v in sorted(s["bootstrap_seconds"].items(), key=lambda kv: -kv[1])))
    cp = eng.get("compile_phase")
    if cp:
        lines.append(f"torch.compile baselines this call: {cp['pending']} pending, {cp['warmed']} warmed in "
                     f"{cp['warm_wall_s']} s wall (process pool, in parallel), {cp['timed']} timed in "
                     f"{cp['time_wall_s']} s wall (one sandboxed harness child each, from the warm cache)")
    kept = [r for r in report["problems"] if r.get("dtype_reason")]
    if kept:
        lines.append("stayed fp32: " + "; ".join(f"{r['problem']} ({r['dtype_reason']})" for r in kept)[:1200])
    lines += ["", "| problem | status | best (s, source) | vs eager | vs compile | SOL frac | regions | verdicts |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["problems"]:
        best = r["best"]
        t = f"{best['time_s']:.3g} {best['time_source']}" if best else "-"
        regions = "; ".join(f"{g['kind']}({','.join(g['nodes'])})" for g in r["regions"]) or (r["reason"] or "-")
        verdicts = ", ".join(f"a{v['attempt']}:{v['verdict'][:40]}" for v in r["verdicts"]) or "-"
        if r.get("retired"):
            verdicts += f" (+{len(r['retired'])} retired)"
        lines.append(f"| {r['problem']} | {r['status']} | {t} | {_x(r['speedup_eager'])} | "
                     f"{_x(r['speedup_compile'])} | {_x(r['sol_fraction'], '')} | {regions[:160]} | {verdicts[:200]} |")
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict], path: Path, tier: str) -> str | None:
    try:
        from formloop.campaign.plots import plot_fast_p
        return str(plot_fast_p(_curves(rows, tier), path))
    except Exception:  # noqa: BLE001 - matplotlib missing: JSON and markdown stand alone
        return None
