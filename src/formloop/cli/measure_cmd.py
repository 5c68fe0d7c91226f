"""`formloop measure` (solve gemm-tiling's GPU contract and measure its pick) and `formloop evaluate`
(one given design on a tier). Without a CUDA device the number is the model tier's, labelled so."""
from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from formloop import api
from formloop.cli import app, args
from formloop.settings import TIERS
from formloop.cli.common import SHAPE_HELP, console, err_console, friendly, parse_options, print_json
from formloop.settings import load_settings


@app.command()
@friendly
def measure(
    template: str = typer.Argument(..., help="gemm-tiling | attention-decode | attention-prefill"),
    shape: str = typer.Option(..., help=SHAPE_HELP + "; attention: B,Hq,Hkv,D,L[,page=P][,causal=0|1]"),
    chip: Optional[str] = typer.Option(None, help="chip spec: h200 | h100 (default: the template's, h200)"),
    dtype: Optional[str] = typer.Option(None, help="bf16 | fp16 | tf32 | tf32x3 | fp32 "
                                                   "(default: the template's, bf16)"),
    solver: str = typer.Option("milp", help="milp (HiGHS) | enumerate",
                               callback=args.choice("--solver", ("enumerate", "milp"))),
    calibration: str = typer.Option(None, help="calibration JSON (benchmarks/gemm.py, benchmarks/attention.py) for "
                                               "the cost model, or 'prior' (default: the store's latest, else prior)",
                                    callback=args.calibration_file()),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Pick an instance with the MILP and measure it (gpu tier on a CUDA device, else model tier)."""
    report = api.measure(template, shape, chip=chip, dtype=dtype, solver=solver, calibration=calibration,
                         settings=load_settings())
    if json_out:
        print_json(report)
        return
    if report["fallback"]:
        err_console.print(f"[yellow]note:[/] {report['fallback']}")
    m = report["measurement"]
    tier, c = m["tier"], m["correctness"]
    table = Table(title=f"{template} on {report['chip']} · {shape} · {report['dtype']} "
                        f"(design: {report['solver']} on the gpu contract)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    d = report["design"]
    rows = [
        (f"design ({','.join(d)})", "(" + ", ".join(str(v) for v in d.values()) + ")"),
        ("modeled time (us, model)", f"{report['objective_us']:.2f}"),
        (f"latency (us, {tier})", f"{m['latency_us']:.2f}" if m["ok"] else f"failed: {m['failure']}"),
        ("source of the latency", f"{tier} tier on {m['provenance']['device']}"),
        ("correctness (rel. error vs float64, gpu)",
         f"{c['rel_error']:.2e} (tol {c['tolerance']:g})" if c else "not checked (model tier)"),
        ("cost model calibration", report.get("calibration_source", report["calibration"])),
    ]
    g = (m.get("details") or {}).get("eager")
    if g:
        rows.insert(3, ("eager latency (us, gpu; launch path included)", f"{g['median_us']:.2f}"))
    loss = report.get("design_loss") or {}
    for key in ("representation", "precondition", "selection", "model_error", "spread", "total"):
        if key in loss:
            v = loss[key]
            src = loss["sources"].get(key, "")
            label = f"design loss: {key.replace('_', ' ')} (ln ratio, {src})"
            rows.append((label, "n/a" if v is None else f"{v:+.3f}"))
    learned = report.get("learned") or {}
    if learned.get("note"):
        rows.append(("calibration update", learned["note"]))
    if "sol" in report:
        sol = report["sol"]
        rows.append((f"speed-of-light floor (us, sol; {sol['bound']}-bound)", f"{sol['floor_us']:.2f}"))
    r = report.get("rates") or {}
    if "kv_tb_s" in r:
        rows.append((f"KV read rate (TB/s, {r['source']})",
                     f"{r['kv_tb_s']:.2f} ({r['copy_fraction']:.1%} of the copy bandwidth)"))
    elif "tflop_s" in r:
        rows.append((f"tensor rate (TFLOP/s, {r['source']})", f"{r['tflop_s']:.0f} ({r['peak_fraction']:.1%} of peak)"))
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


@app.command()
@friendly
def evaluate(
    template: str = typer.Argument(..., help="template name, or path/to/file.py:NAME"),
    design: str = typer.Option(..., help="decision values in the template's order, or named (Tm=128,...)"),
    shape: str = typer.Option(..., help=SHAPE_HELP),
    chip: Optional[str] = typer.Option(None, help="chip spec name (default: the template's; h200/h100: gemm-tiling's "
                                                  "GPU contract)"),
    dtype: Optional[str] = typer.Option(None, help="element type: fp32 | tf32 | tf32x3 | bf16 | fp16 "
                                                   "(default: the template's)"),
    op: Optional[str] = typer.Option(None, help="operator of the workload (default: the template's)"),
    option: Optional[list[str]] = typer.Option(None, "--option", help="a template option NAME=VALUE; repeat"),
    tier: Optional[str] = typer.Option(None, help="auto | model | gpu (default: $FORMLOOP_TIER or auto)",
                                       callback=args.choice("--tier", TIERS)),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Evaluate one design on a tier and say which tier and device produced the number.
    Exit status 1 when the design fails (infeasible, or its measurement failed)."""
    out = api.evaluate(template, design, shape, op=op, dtype=dtype, chip=chip, options=parse_options(option),
                       tier=tier, settings=load_settings())
    if json_out:
        print_json(out)
    else:
        m = out["measurement"]
        latency = f"{m['latency_us']:.2f} us" if m["ok"] else f"failed: {m['failure'] or 'correctness check failed'}"
        console.print(f"{out['template']} · {out['workload']} · chip {out['chip']} · design {m['assignment']}: "
                      f"{latency} ({m['tier']} tier on {m['provenance']['device']})", highlight=False)
    if not out["measurement"]["ok"]:
        raise typer.Exit(1)  # an infeasible or failing design is never a result
