"""`formloop layer MODEL --scenario prefill:N --scenario decode:H [--json]`: a whole decoder layer,
planned per scenario (over formloop.api.layer)."""
from __future__ import annotations

from typing import Optional

import typer

from formloop import api
from formloop.cli import app
from formloop.cli.common import console, friendly, print_json
from formloop.settings import load_settings


def _lines(r: dict) -> list[str]:
    out = [f"{r['model']} on {r['chip']}: hidden {r['config']['hidden']}, heads {r['config']['heads']}/"
           f"{r['config']['kv_heads']}, head dim {r['config']['head_dim']}, intermediate {r['config']['intermediate']}"]
    for s in r["scenarios"]:
        fu = ", ".join(f"{k}={v}" for k, v in s["fusion"].items())
        out.append(f"{s['scenario']}: fusion {fu} (HiGHS, {s['layer_solve']['status']}); layer "
                   f"{s['model_us']:.1f} us (model), floor {s['sol']['floor_us']:.1f} us (sol)")
        for p in s["parts"]:
            design = ",".join(f"{k}={v}" for k, v in p["design"].items())
            out.append(f"  {p['part']:<11} {p['model_us']:9.2f} us (model)  {design}")
        best = s["layer_solve"]["choices"]
        solve = s["layer_solve"]
        keys = ("R1", "GL", "R2", "PD") + (("NF",) if solve.get("norm_fusion") else ()) \
            + (("RA",) if solve.get("rope_fusion") else ())
        out.append("  choices: " + "; ".join("".join(str(c["fusion"].get(k, 0)) for k in keys)
                                             + f" {c['model_us']:.1f}" for c in best)
                   + f" ({' '.join(keys)}: us, model)")
        for part, t in (s.get("tuned") or {}).items():
            if t.get("best_us") is not None:
                out.append(f"  tuned {part}: plan {t['plan_us']:.1f} us, best of {len(t['rows'])} "
                           f"{t['best_us']:.1f} us (gpu, graph, alone) -> {t['chosen']}")
        m = s.get("measured")
        if m:
            ok = "ok" if m["check"]["ok"] else "WRONG"
            line = f"  measured: check {ok} (out rel err {m['check']['out_rel_err']:.2e} vs fp32)"
            if "graph_us" in m:
                line += f"; {m['graph_us']:.1f} us graph, {m['eager_us']:.1f} us eager (gpu)"
            out.append(line)
    for name, source in r.get("calibrations", {}).items():
        out.append(f"cost model of {name}: {source}")
    if r["measured_note"]:
        out.append(f"note: {r['measured_note']}")
    return out


@app.command("layer")
@friendly
def layer(model: str = typer.Argument(..., help="model: qwen3-8b (or tiny, the check config)"),
          scenario: Optional[list[str]] = typer.Option(None, "--scenario", help="prefill:N or decode:H (repeatable)"),
          chip: str = typer.Option("h200", "--chip", help="chip the parts are solved for"),
          measure: str = typer.Option("auto", "--measure", help="auto (on a CUDA device), yes or no"),
          norm_fusion: bool = typer.Option(False, "--norm-fusion", help="decode may run the two RMSNorms inside the "
                                           "QKV and GateUp GEMVs (the layer template's decision NF)"),
          rope_fusion: bool = typer.Option(False, "--rope-fusion", help="decode attention may take the q/k RMSNorm "
                                           "+ RoPE + KV-cache write inside (the layer template's decision RA)"),
          tune: int = typer.Option(0, "--tune", help="on a GPU: time each GEMM part's and the attention's design "
                                   "against its family's next N designs alone and launch the fastest (>= 3 % faster)"),
          as_json: bool = typer.Option(False, "--json", help="print the result as JSON")) -> None:
    """Plan a whole decoder layer per scenario: fusion by MILP, parts by their templates; measure on a GPU."""
    r = api.layer(model, scenario or [], chip=chip, measure=measure, norm_fusion=norm_fusion, tune=tune,
                  settings=load_settings(), rope_fusion=rope_fusion)
    if as_json:
        print_json(r)
        return
    for line in _lines(r):
        console.print(line, highlight=False, soft_wrap=True)
