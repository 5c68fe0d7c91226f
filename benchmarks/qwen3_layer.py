"""The complete Qwen3-8B decoder layer on one GPU: formloop's plan (fusion by the qwen3-layer MILP,
every part from its template) against torch in the same run.

    python3 benchmarks/qwen3_layer.py --out DIR          (GPU: the eight scenarios, ~7 minutes)
    python3 benchmarks/qwen3_layer.py --out DIR --dry-run (CPU: tiny config in the Triton interpreter)

Per scenario (prefill 128/512/2048/4096, decode history 512/2048/4096/8192; batch 1, bf16):
  1. plan: part designs and fusion (model us), the layer's speed-of-light floor (sol us) and, decode, its bytes at
     the run's measured memory ceiling (benchmarks/ceilings.py memory_ceiling; issue 17's floor)
  2. correctness first: output and KV cache of formloop's layer vs the fp32 reference (fresh random
     inputs, NaN-poisoned output); the baselines' outputs vs the same reference
  3. time (formloop.measure.timer; us, gpu): formloop eager and CUDA graph, with programmatic dependent
     launch (PD, the template's decision) off AND on -- both checked first, PD on also by the PDL rules
     on the compiled PTX; HF-math torch eager, eager + CUDA graph, torch.compile default and
     max-autotune-no-cudagraphs, each + CUDA graph. `formloop` is the faster of the two (PD as measured);
     the measured saving per PDL hand-over is the template's t_pdl for this scenario; with --norm-fusion and
     NF = 1 planned, the layer with the norms launched apart (NF = 0) is checked and timed too, the faster kept;
     the same with --rope-fusion and RA = 1 planned (the rope kernel apart, RA = 0).
     Before that, attention and each GEMM part (decode; prefill up to --gemm-candidates-rows tokens) may
     take a faster design of its family measured alone (--attn-candidates, --gemv-candidates, --gemm-candidates)
  4. every part of formloop's layer alone (graph) with its SOL fraction
Then a 36-layer decode stack (history 4096): tokens/s of formloop (the faster PD) vs the best baseline.
Writes DIR/qwen3_layer.json (after every scenario) and prints the table. SM clock and power are in
every timing's `device` record (before/after, mean power)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

# decode first: its GEMM shapes are the same in all four (max-autotune tunes them once)
SCENARIOS = ("decode:512", "decode:2048", "decode:4096", "decode:8192",
             "prefill:128", "prefill:512", "prefill:2048", "prefill:4096")
DRY_SCENARIOS = ("prefill:8", "decode:40")
STACK_HISTORY = 4096


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for qwen3_layer.json")
    ap.add_argument("--dry-run", action="store_true", help="tiny config on the CPU (Triton interpreter)")
    ap.add_argument("--scenario", action="append", help="a subset (repeatable); default: all eight")
    ap.add_argument("--budget-s", type=float, default=400.0, help="wall budget: max-autotune is skipped (with a "
                    "note) for scenarios it would push past this")
    ap.add_argument("--no-stack", action="store_true", help="skip the 36-layer decode stack")
    ap.add_argument("--norm-fusion", action="store_true", help="the layer template's option norm_fusion: decode "
                    "may run the two RMSNorms inside the QKV and GateUp GEMVs (decision NF)")
    ap.add_argument("--rope-fusion", action="store_true", help="the layer template's option rope_fusion: decode "
                    "attention may take the q/k norm + RoPE + KV write inside (decision RA)")
    ap.add_argument("--gemv-candidates", type=int, default=5, help="decode: time each GEMV part's plan design and "
                    "this many of the gemv model's next designs alone, and take the fastest")
    ap.add_argument("--gemm-candidates", type=int, default=6, help="prefill: the same for each tensor-core GEMM "
                    "part (gemm-epilogue-gpu's model, one design per tile shape and split)")
    ap.add_argument("--gemm-candidates-rows", type=int, default=4096, help="measure GEMM candidates only in scenarios "
                    "of at most this many tokens (default: every scenario; 512 until round 12's call 6 measured "
                    "12-14 %% faster designs at 2048 and 4096)")
    ap.add_argument("--gemm-calibration", help="JSON whose 'values' are gemm-epilogue-gpu's fitted terms "
                    "(benchmarks/prefill_gemms.py writes one): the prefill GEMM candidates are that model's best "
                    "designs (the plan keeps the priors' pick)")
    ap.add_argument("--gemv-calibration", help="JSON whose 'values' are gemv-epilogue-gpu's fitted terms "
                    "(benchmarks/decode_gemv.py writes one); default: priors")
    ap.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1), help="processes for the solves")
    ap.add_argument("--attn-candidates", type=int, default=6, help="time the plan's attention design and "
                    "this many of the attention model's candidates alone in the layer's context, and use the fastest "
                    "(0 = the plan's design, not measured)")
    return ap.parse_args(argv)


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else None
if ARGS is not None:
    import torch

    if ARGS.dry_run or not torch.cuda.is_available():
        ARGS.dry_run = True
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported

import torch  # noqa: E402

from formloop.library.qwen3_layer import get_model, new_state, new_weights, parse_scenario, \
    reference  # noqa: E402
from formloop.library.qwen3_layer_baseline import make_layer, rope_cache, weight_args  # noqa: E402
from formloop.library.qwen3_layer_check import check_fusion, rel_err, tiny_designs  # noqa: E402
from formloop.library.qwen3_layer_pdl import check_sources  # noqa: E402
from formloop.library.qwen3_layer_plan import layer_floor, plan_many  # noqa: E402
from formloop.measure.timer import time_launches  # noqa: E402

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


COMPILED: dict = {}  # (scenario, variant) -> the function, reused by the stack (no second compile)
FINAL: dict = {}  # scenario -> the plan as measured (attention design and PD), reused by the stack
GEMV_CALIBRATION: dict = {}  # "values": gemv-epilogue-gpu's fitted terms (--gemv-calibration), or None
GEMM_CALIBRATION: dict = {}  # "values": gemm-epilogue-gpu's fitted terms (--gemm-calibration), or None
MEMORY: dict = {}  # "mem_bandwidth": this run's measured memory ceiling, bytes/s (benchmarks/ceilings.py)


def choose_attention(p, device, w, n: int):
    """The plan's attention design and `n` of its template's next designs (qwen3_layer_tune.attention_menu),
    each checked and timed alone in the layer's context; the plan with the fastest (if >= 3 % faster) and the
    record (qwen3_layer_tune.tune_attention, as `formloop layer --tune` does)."""
    from formloop.library.qwen3_layer_tune import tune_attention  # noqa: PLC0415

    return tune_attention(p, device, n, w, log=log)


GEMM_TIMES: dict = {}  # (part, M, design) -> the measurement (decode's GEMM shapes do not depend on history)


def choose_gemms(p, device, n: int, calibration, max_rows: int = 1 << 30, gemm_calibration=None):
    """Each GEMM part's plan design against its family's next `n` designs, timed alone; the fastest where >= 3 %
    faster (formloop.library.qwen3_layer_tune, the library's `formloop layer --tune`): the plan and the record.
    `calibration`: the GEMV family's fitted terms; `gemm_calibration`: the tensor-core family's, ranking its
    candidates while the plan keeps the priors' pick."""
    from formloop.library.qwen3_layer_tune import tune_gemms  # noqa: PLC0415

    return tune_gemms(p, device, n, calibration, gemm_calibration, max_rows, log=log, cache=GEMM_TIMES)


def baseline_runs(cfg, sc, w, device, allow_autotune: bool):
    """(name -> callable(i)) for the baselines over operand sets, and their compile seconds."""
    fn = make_layer(cfg, sc)
    cos, sin = rope_cache(cfg, sc, device)
    wargs = weight_args(cfg, w)
    variants = {"eager": fn}
    compile_s = {}
    if device != "cpu":
        import torch._inductor.config as ic

        # limit the search: aten and Triton's default configs (knobs this torch may not have are skipped)
        for knob, value in (("max_autotune_gemm_backends", "ATEN,TRITON"), ("max_autotune_gemm_search_space",
                                                                             "DEFAULT")):
            try:
                setattr(ic, knob, value)
            except (AttributeError, ValueError) as exc:
                log(f"  inductor knob {knob} not set ({type(exc).__name__})")
        import torch._dynamo

        # each scenario is its own static shape: eight scenarios x two modes recompile `layer` 16 times
        torch._dynamo.config.recompile_limit = max(64, torch._dynamo.config.recompile_limit)
        variants["compile"] = torch.compile(fn, fullgraph=True, dynamic=False)
        if allow_autotune:
            variants["max-autotune"] = torch.compile(fn, mode="max-autotune-no-cudagraphs", fullgraph=True,
                                                     dynamic=False)
    COMPILED.update({(sc.text, k): v for k, v in variants.items()})
    return variants, (cos, sin), wargs, compile_s


def time_baselines(cfg, sc, w, device, sets, allow_autotune: bool, want) -> dict:
    variants, (cos, sin), wargs, _ = baseline_runs(cfg, sc, w, device, allow_autotune)
    rows = {}
    x0, kc0, vc0 = new_state(cfg, sc, device=device, seed=11)
    for name, fn in variants.items():
        t = time.time()
        kc, vc = kc0.clone(), vc0.clone()
        out = fn(x0, kc, vc, cos, sin, *wargs)
        if device != "cpu":
            torch.cuda.synchronize()
        row = {"first_call_s": time.time() - t, "out_rel_err": rel_err(out, want[0]),
               "k_rel_err": rel_err(kc[:, :, sc.history: sc.kv_len], want[1][:, :, sc.history: sc.kv_len])}
        launch = lambda i, f=fn: f(sets[i][0], sets[i][1], sets[i][2], cos, sin, *wargs)  # noqa: E731
        dev = device if device != "cpu" else "cpu"
        e = time_launches(launch, len(sets), device=dev, mode="eager")
        row["eager_us"] = e.timing.seconds * 1e6
        row["source"] = e.timing.source
        if device != "cpu":
            g = time_launches(launch, len(sets), device=dev, mode="graph")
            row["graph_us"] = g.timing.seconds * 1e6
            row["graph_timing"] = g.timing.as_dict()
        rows[name] = row
        log(f"  baseline {name}: eager {row['eager_us']:.1f} us, graph {row.get('graph_us', float('nan')):.1f} us "
            f"({row['source']}), first call {row['first_call_s']:.1f} s, out rel err {row['out_rel_err']:.2e}")
    return rows


def best_baseline(rows: dict) -> tuple[str, float]:
    cands = [(f"{n}+graph", r["graph_us"]) for n, r in rows.items() if r.get("graph_us")]
    cands += [(n, r["eager_us"]) for n, r in rows.items()]
    return min(cands, key=lambda c: c[1])


def pdl_ab(p, device, w) -> tuple[dict, dict]:
    """formloop's layer with PD off and on (same fusion and designs, same weights): each checked, then
    timed; (the faster's measurement, the A/B record with the saving per hand-over)."""
    from formloop.library.qwen3_layer_measure import measure  # noqa: PLC0415

    sc = p.scenario
    runs = {}
    for pd in (0, 1):
        q = p.with_fusion(p.fusion.with_pdl(bool(pd)))
        try:
            runs[pd] = measure(q, device=device, weights=w)
        except Exception as exc:  # noqa: BLE001 (a failing variant is recorded, the other still measured)
            runs[pd] = {"check": {"ok": False}, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        m = runs[pd]
        if m["check"]["ok"]:
            log(f"{sc.text} PD={pd}: formloop {m['graph_us']:.1f} us graph / {m['eager_us']:.1f} us eager (gpu); "
                f"out rel err {m['check']['out_rel_err']:.2e}; PDL rules on PTX "
                f"{m['check'].get('pdl_rules_ok', 'n/a')}")
        else:
            log(f"{sc.text} PD={pd}: formloop's layer is WRONG or failed ({m.get('error') or m['check']}); not timed")
    ok = [pd for pd in (0, 1) if runs[pd]["check"]["ok"]]
    ab = {"off": runs[0], "on": runs[1], "handovers": p.fusion.handovers(sc.kind == "prefill"),
          "t_pdl_prior_us": p.layer.get("t_pdl_us"), "source": "gpu"}
    if len(ok) == 2:
        for mode in ("graph", "eager"):
            d = runs[0][f"{mode}_us"] - runs[1][f"{mode}_us"]
            ab[f"saving_{mode}_us"] = d
            ab[f"t_pdl_{mode}_us"] = d / ab["handovers"]
        log(f"{sc.text}: PDL saves {ab['saving_graph_us']:.1f} us graph ({ab['t_pdl_graph_us']:.2f} us per hand-over, "
            f"prior {ab['t_pdl_prior_us']}), {ab['saving_eager_us']:.1f} us eager (gpu)")
    best = min(ok, key=lambda pd: runs[pd]["graph_us"]) if ok else 0
    ab["chosen_pd"] = best
    return runs[best], ab


WHAT = {"NF": "norm fusion", "RA": "rope in attention"}


def decision_ab(p, device, w, fused: dict, name: str) -> tuple:
    """With the fusion decision `name` (NF: the norms inside the GEMVs, RA: the rope inside attention) chosen = 1
    (its measurement `fused`): the same plan with it 0 (same PD, other decisions and designs), checked and timed;
    (the plan and measurement of the faster, the A/B record)."""
    from dataclasses import replace  # noqa: PLC0415

    from formloop.library.qwen3_layer_measure import measure  # noqa: PLC0415

    q = p.with_fusion(replace(p.fusion, **{name: 0}))
    try:
        apart = measure(q, device=device, weights=w)
    except Exception as exc:  # noqa: BLE001 (a failing variant is recorded, the fused one stands)
        apart = {"check": {"ok": False}, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    ab = {f"{name}=1": fused, f"{name}=0": apart, "source": "gpu", f"chosen_{name.lower()}": 1}
    if apart["check"]["ok"] and fused["check"]["ok"]:
        ab["saving_graph_us"] = apart["graph_us"] - fused["graph_us"]
        ab["saving_eager_us"] = apart["eager_us"] - fused["eager_us"]
        log(f"{p.scenario.text}: {WHAT[name]} {name}=1 {fused['graph_us']:.1f} us vs {name}=0 {apart['graph_us']:.1f} "
            f"us graph (gpu, {p.fusion.text}): saves {ab['saving_graph_us']:.1f} us")
    if apart["check"]["ok"] and (not fused["check"]["ok"] or apart["graph_us"] < fused["graph_us"]):
        ab[f"chosen_{name.lower()}"] = 0
        return q, apart, ab
    return p, fused, ab


def run_scenario(p, device, allow_autotune: bool) -> dict:
    from formloop.library.qwen3_layer_measure import operand_sets  # noqa: PLC0415
    from formloop.hw.chips import get_chip

    cfg, sc = p.cfg, p.scenario
    row = {"scenario": sc.text, "plan": p.as_dict(), "sol": layer_floor(cfg, sc)}
    w = new_weights(cfg, device, seed=0)
    if ARGS is not None and ARGS.attn_candidates > 0:
        try:
            p, row["attention_in_context"] = choose_attention(p, device, w, ARGS.attn_candidates)
        except Exception as exc:  # noqa: BLE001 (the diagnostic must not cost the scenario)
            row["attention_in_context"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            log(f"{sc.text}: attention in context failed ({row['attention_in_context']['error']}); the plan's design")
        row["plan_measured_attention"] = p.parts["attn"].design
    n_gemm = (ARGS.gemv_candidates if sc.kind == "decode" else ARGS.gemm_candidates) if ARGS is not None else 0
    if n_gemm > 0 and sc.tokens <= ARGS.gemm_candidates_rows:
        try:
            p, row["gemm_alone"] = choose_gemms(p, device, n_gemm, GEMV_CALIBRATION.get("values"),
                                                ARGS.gemm_candidates_rows, GEMM_CALIBRATION.get("values"))
        except Exception as exc:  # noqa: BLE001 (the diagnostic must not cost the scenario)
            row["gemm_alone"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            log(f"{sc.text}: GEMM choice by measurement failed ({row['gemm_alone']['error']}); the plan's designs")
    m, row["pdl_ab"] = pdl_ab(p, device, w)
    p = p.with_fusion(p.fusion.with_pdl(bool(row["pdl_ab"]["chosen_pd"])))
    for name in ("NF", "RA"):
        if getattr(p.fusion, name) and m["check"]["ok"]:
            p, m, row[f"{name.lower()}_ab"] = decision_ab(p, device, w, m, name)
    FINAL[sc.text] = p
    row["formloop"] = m
    if not m["check"]["ok"]:
        log(f"{sc.text}: formloop's layer is WRONG ({m['check']}); not timed")
        return row
    log(f"{sc.text}: formloop (PD={row['pdl_ab']['chosen_pd']}) {m['graph_us']:.1f} us graph / {m['eager_us']:.1f} us "
        f"eager (gpu), model {p.model_us:.1f} us, floor {row['sol']['floor_us']:.1f} us (sol); out rel err "
        f"{m['check']['out_rel_err']:.2e}")
    x, kc, vc = new_state(cfg, sc, device=device, seed=11)
    want = reference(cfg, sc, w, x, kc, vc)
    sets = [s[:3] for s in operand_sets(p, device, get_chip("h200"))]
    row["baselines"] = time_baselines(cfg, sc, w, device, sets, allow_autotune, want)
    if not allow_autotune:
        row["note"] = "max-autotune skipped: the run's wall budget (--budget-s) would be exceeded"
    name, us = best_baseline(row["baselines"])
    row["best_baseline"] = {"name": name, "us": us, "speedup": us / m["graph_us"]}
    row["floor_fraction"] = row["sol"]["floor_us"] / m["graph_us"]
    if MEMORY.get("mem_bandwidth") and sc.kind == "decode":  # issue 17's decode floor: bytes at the measured ceiling
        row["mem_floor_us"] = row["sol"]["bytes"] / MEMORY["mem_bandwidth"] * 1e6
        row["mem_floor_fraction"] = row["mem_floor_us"] / m["graph_us"]
    return row


def stack(plan, device, best_name: str, layers: int) -> dict:
    """A decode stack of `layers` layers (own weights and caches each): tokens/s of formloop's
    layers vs the baseline mode `best_name`, both in one CUDA graph per token."""
    from formloop.library.qwen3_layer_kernels import LayerKernels  # noqa: PLC0415

    cfg, sc = plan.cfg, plan.scenario
    designs = {n: q.design for n, q in plan.parts.items()}  # plan.fusion carries the measured PD
    ws = [new_weights(cfg, device, seed=1000 + i) for i in range(layers)]
    states = [new_state(cfg, sc, device=device, seed=2000 + i) for i in range(layers)]
    ours = [LayerKernels(cfg, sc, plan.fusion, designs, w, device) for w in ws]
    outs = [torch.empty(sc.tokens, cfg.hidden, dtype=torch.bfloat16, device=device) for _ in range(layers)]
    x0 = states[0][0]

    def run_ours(_):
        x = x0
        for i in range(layers):
            ours[i](x, states[i][1], states[i][2], outs[i])
            x = outs[i]
        return x

    t_ours = time_launches(run_ours, 1, device=device, mode="graph")
    base = best_name.split("+")[0]
    fn = COMPILED.get((sc.text, base)) or make_layer(cfg, sc)
    cos, sin = rope_cache(cfg, sc, device)
    wargs = [weight_args(cfg, w) for w in ws]

    def run_base(_):
        x = x0
        for i in range(layers):
            x = fn(x, states[i][1], states[i][2], cos, sin, *wargs[i])
        return x

    mode = "graph" if best_name.endswith("+graph") else "eager"
    t_base = time_launches(run_base, 1, device=device, mode=mode)
    a, b = t_ours.timing.seconds, t_base.timing.seconds
    return {"layers": layers, "scenario": sc.text, "pdl": plan.fusion.PD, "formloop_us": a * 1e6,
            "formloop_tokens_s": 1 / a,
            "baseline": f"{base} ({mode})", "baseline_us": b * 1e6, "baseline_tokens_s": 1 / b, "speedup": b / a,
            "source": "gpu", "formloop_timing": t_ours.timing.as_dict(), "baseline_timing": t_base.timing.as_dict()}


def dry_run(out_dir: Path) -> int:
    """The CPU path: the tiny config planned by the same MILPs, the planned fusion checked in the
    Triton interpreter vs fp32 torch, the torch baseline run eagerly (host wall time, source cpu)."""
    cfg = get_model("tiny")
    pdl_rows = check_sources()
    scs = [parse_scenario(s) for s in DRY_SCENARIOS]
    plans = plan_many(cfg, scs, workers=1)
    rows = []
    for p in plans:
        sc = p.scenario
        checks = {pd: check_fusion(cfg, sc, p.fusion.with_pdl(bool(pd)), tiny_designs(sc, bool(pd))) for pd in (0, 1)}
        chk = checks[p.fusion.PD]
        w = new_weights(cfg)
        x, kc, vc = new_state(cfg, sc, seed=11)
        want = reference(cfg, sc, w, x, kc, vc)
        sets = [new_state(cfg, sc, seed=20)]
        base = time_baselines(cfg, sc, w, "cpu", sets, False, want)
        rows.append({"scenario": sc.text, "fusion": p.fusion.as_dict(), "model_us": p.model_us, "check": chk,
                     "check_pd": {f"PD={k}": v for k, v in checks.items()}, "pdl_sources": pdl_rows,
                     "baselines": base, "tier": "interpreter (tiny config; designs fixed small for the interpreter)"})
        for pd, c in checks.items():
            log(f"{sc.text}: fusion {p.fusion.with_pdl(bool(pd)).text}, model {p.model_us:.2f} us (model, tiny "
                f"config, planned PD={p.fusion.PD}), check {'ok' if c['ok'] else 'WRONG'} (interpreter, out rel err "
                f"{c['out_rel_err']:.2e} vs fp32)")
    log(f"PDL rules on the kernels' source: {sum(r['ok'] for r in pdl_rows)}/{len(pdl_rows)} kernels ok (ast)")
    (out_dir / "qwen3_layer_dry.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0 if all(c["ok"] for r in rows for c in r["check_pd"].values()) and all(r["ok"] for r in pdl_rows) else 1


def table(rows: list[dict]) -> list[str]:
    cols = ("scenario", "fusion", "model", "ours", "pdl off", "pdl on", "pdl off e", "pdl on e", "eager", "eager+g",
            "comp+g", "ma+g", "best", "speedup", "floor", "floor%", "mem fl", "mem fl%")
    out = ["times in us: model = template costs; ours (the faster PD) and baselines = gpu (graph unless named; e = "
           "eager calls); floor = sol (datasheet bandwidth); mem fl = the same bytes at this run's measured "
           "memory ceiling (gpu, decode); fusion = R1 GL R2 PD (PD as measured), N = NF 1, R = RA 1 (as measured)",
           "  ".join(f"{c:>10}" for c in cols)]
    for r in rows:
        if "best_baseline" not in r:
            out.append(f"{r['scenario']:>10}  WRONG or not timed")
            continue
        b, m, fu = r["baselines"], r["formloop"], r["plan"]["fusion"]
        g = lambda n: b[n].get("graph_us", float("nan")) if n in b else float("nan")  # noqa: E731
        ab = r.get("pdl_ab", {})
        v = lambda k, mode: ab.get(k, {}).get(f"{mode}_us", float("nan"))  # noqa: E731
        nf = r.get("nf_ab", {}).get("chosen_nf", fu.get("NF", 0))
        ra = r.get("ra_ab", {}).get("chosen_ra", fu.get("RA", 0))
        vals = (r["scenario"], f"{fu['R1']}{fu['GL']}{fu['R2']}{ab.get('chosen_pd', fu.get('PD', 0))}"
                + ("N" if nf else "") + ("R" if ra else ""),
                f"{r['plan']['model_us']:.1f}", f"{m['graph_us']:.1f}", f"{v('off', 'graph'):.1f}",
                f"{v('on', 'graph'):.1f}", f"{v('off', 'eager'):.1f}", f"{v('on', 'eager'):.1f}",
                f"{b['eager']['eager_us']:.1f}", f"{g('eager'):.1f}", f"{g('compile'):.1f}",
                f"{g('max-autotune'):.1f}", f"{r['best_baseline']['us']:.1f} ({r['best_baseline']['name']})",
                f"{r['best_baseline']['speedup']:.3f}", f"{r['sol']['floor_us']:.1f}",
                f"{100 * r['floor_fraction']:.1f}%", f"{r.get('mem_floor_us', float('nan')):.1f}",
                f"{100 * r.get('mem_floor_fraction', float('nan')):.1f}%")
        out.append("  ".join(f"{v:>10}" for v in vals))
    sp = [r["best_baseline"]["speedup"] for r in rows if "best_baseline" in r]
    if sp:
        geo = math.exp(sum(map(math.log, sp)) / len(sp))
        out.append(f"geomean speedup vs the best baseline per scenario: {geo:.3f} (min {min(sp):.3f})")
    return out


def main() -> int:
    args = ARGS
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        return dry_run(out_dir)
    from formloop.measure.device import device_facts

    cfg = get_model("qwen3-8b")
    scs = [parse_scenario(s) for s in (args.scenario or SCENARIOS)]
    log(f"planning {len(scs)} scenarios ({args.workers} processes)")
    gemv_cal = json.loads(Path(args.gemv_calibration).read_text())["values"] if args.gemv_calibration else None
    GEMV_CALIBRATION["values"] = gemv_cal
    plans = plan_many(cfg, scs, workers=args.workers, gemv_calibration=gemv_cal, norm_fusion=args.norm_fusion,
                      rope_fusion=args.rope_fusion)
    log(f"GEMV calibration: {'fitted, ' + args.gemv_calibration if gemv_cal else 'priors'}")
    if args.gemm_calibration:
        GEMM_CALIBRATION["values"] = json.loads(Path(args.gemm_calibration).read_text())["values"]
        log(f"prefill GEMM candidates ranked by the fit in {args.gemm_calibration}")
    log("planned: " + "; ".join(f"{p.scenario.text} {p.fusion.text} {p.model_us:.1f} us (model)" for p in plans))
    result = {"device": device_facts(), "config": cfg.as_dict(), "scenarios": [], "stack": None}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ceilings import memory_ceiling, warm_up  # noqa: PLC0415

    warm_up()
    MEMORY.update(memory_ceiling())
    result["memory_ceiling"] = {k: v / 1e12 for k, v in MEMORY.items()} | {"unit": "TB/s (gpu, measured)"}
    log("memory ceiling (gpu, measured; decode's floor): " + ", ".join(f"{k} {v / 1e12:.2f} TB/s"
                                                                        for k, v in MEMORY.items()))
    path = out_dir / "qwen3_layer.json"
    base_s, tune_s = [], []   # per scenario: time without max-autotune's first call, and that call
    for i, p in enumerate(plans):
        left = args.budget_s - (time.time() - T0)
        base = sum(base_s) / len(base_s) if base_s else 0.0
        tune = max(tune_s) if tune_s else 0.0
        allow = not base_s or left - base * (len(plans) - i) - (60.0 if args.no_stack else 90.0) > tune
        t = time.time()
        r = run_scenario(p, "cuda", allow)
        result["scenarios"].append(r)
        at = r.get("baselines", {}).get("max-autotune", {}).get("first_call_s", 0.0)
        base_s.append(time.time() - t - at)
        if at:
            tune_s.append(at)
        path.write_text(json.dumps(result, indent=1, default=str))
    if not args.no_stack:
        dec = [r for r in result["scenarios"] if r["scenario"] == f"decode:{STACK_HISTORY}" and "best_baseline" in r]
        if dec:
            p = FINAL[f"decode:{STACK_HISTORY}"]  # the measured attention design and the faster PD of the A/B
            result["stack"] = stack(p, "cuda", dec[0]["best_baseline"]["name"], cfg.layers)
            s = result["stack"]
            log(f"36-layer decode stack (history {STACK_HISTORY}, PD={p.fusion.PD}): formloop "
                f"{s['formloop_tokens_s']:.1f} tokens/s, "
                f"{s['baseline']} {s['baseline_tokens_s']:.1f} tokens/s, speedup {s['speedup']:.3f} (gpu)")
    path.write_text(json.dumps(result, indent=1, default=str))
    for line in table(result["scenarios"]):
        print(line)
    for r in result["scenarios"]:
        for q in r.get("formloop", {}).get("parts", []):
            print(f"  {r['scenario']:<13} {q['part']:<11} {q['gpu_us']:8.1f} us (gpu, alone)  model "
                  f"{q['model_us']:8.1f}  floor {q['sol_floor_us']:7.1f}  SOL {100 * (q['sol_fraction'] or 0):5.1f}%")
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
