"""`formloop optimize`, `optimize-status`, `optimize-submit`: problem files to verified ModelNew kernels."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from formloop import api
from formloop.cli import app
from formloop.cli.common import console, friendly, print_json
from formloop.errors import InvalidInput


def _rule(text: str, field: str, integer: bool = False):
    if text in ("off", "none"):
        return None
    try:
        return int(text) if integer else float(text)
    except ValueError:
        raise InvalidInput(field, text, ("an integer" if integer else "a number") + " or 'off'") from None


@app.command("optimize")
@friendly
def optimize_cmd(
    paths: List[str] = typer.Argument(..., help="problem directories (recursively) or problem .py files"),
    out: str = typer.Option(".formloop/optimize", "--out", help="output directory (models, report, record)"),
    budget: int = typer.Option(2, "--budget", help="attempts per problem at most"),
    small: bool = typer.Option(False, "--small", help="the problems' SMALL (CPU-test) sizes"),
    tier: str = typer.Option("auto", "--tier", help="auto | gpu | interpreter"),
    chip: str = typer.Option("h200", "--chip", help="chip of the SOL floor and the MILP"),
    tolerance: str = typer.Option("kernelbench", "--tolerance", help="kernelbench | formloop"),
    eps: str = typer.Option("0.1", "--eps", help="SOL-gap stopping rule: stop at t_best <= (1+eps) t_SOL ('off')"),
    window: str = typer.Option("2", "--window", help="no-progress rule: attempts without improvement ('off')"),
    workers: int = typer.Option(2, "--workers", help="process pool size for capture, MILP and assembly"),
    fp32_operands: str = typer.Option("auto", "--fp32-operands",
                                      help="GEMM operands of fp32 problems: auto | tf32 | tf32x3 | fp32 (auto: the "
                                           "fastest whose error bound fits the tolerance)"),
    deadline_s: Optional[float] = typer.Option(None, "--deadline-s", help="start no attempt after this many "
                                               "seconds (the next call resumes)"),
    store: Optional[str] = typer.Option(None, "--store", help="population store holding the campaign's record "
                                        "(default: FORMLOOP_STORE or .formloop/population.db)"),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 | bf16 (models, inputs, baselines cast to bf16)"),
    ray: Optional[str] = typer.Option(None, "--ray", help="Ray cluster: auto | local | ADDRESS (default: a local "
                                      "process pool)"),
    json_out: bool = typer.Option(False, "--json", help="the report as JSON"),
):
    """Capture each problem, implement its regions with formloop's templates, verify, schedule by SOL gap."""
    report = api.optimize(paths, out=out, budget=budget, small=small, tier=tier, chip=chip, tolerance=tolerance,
                          eps=_rule(eps, "eps"), window=_rule(window, "window", True), workers=workers,
                          fp32_operands=fp32_operands, progress=not json_out, deadline_s=deadline_s, store=store,
                          dtype=dtype, ray=ray)
    if json_out:
        print_json(report)
        return
    typer.echo((Path(out) / "report.md").read_text())
    typer.echo(f"models: {Path(out) / 'models'}  report: {Path(out) / 'report.json'}"
                  + (f"  plot: {report['plot']}" if report.get("plot") else ""))


@app.command("optimize-status")
@friendly
def optimize_status_cmd(
    problem: str = typer.Argument(..., help="a problem file"),
    out: str = typer.Option(".formloop/optimize", "--out", help="the campaign's directory"),
    chip: str = typer.Option("h200", "--chip"),
    store: Optional[str] = typer.Option(None, "--store", help="population store (default: the settings')"),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 | bf16: which campaign"),
    small: bool = typer.Option(False, "--small", help="the SMALL-size campaign"),
    json_out: bool = typer.Option(False, "--json"),
):
    """A problem's SOL report and its campaign record (best accepted candidate, every verdict)."""
    r = api.optimize_status(problem, out=out, chip=chip, store=store, dtype=dtype, small=small)
    if json_out:
        print_json(r)
        return
    best = r["best"]
    console.print(f"{r['problem']}: SOL floor {r['sol'].get('time_floor_s')} s (model); best: "
                  + (f"attempt {best['attempt']} ({best['origin']}), {best['time_s']:.4g} s {best['time_source']}"
                     if best else "none"), highlight=False)
    for a in r["attempts"]:
        console.print(f"  a{a['attempt']} {a['origin']}: {'accepted' if a['accepted'] else 'not accepted'} "
                      f"[{a['verdict']}]", highlight=False, markup=False)


@app.command("optimize-submit")
@friendly
def optimize_submit_cmd(
    problem: str = typer.Argument(..., help="a problem file"),
    candidate: Optional[str] = typer.Option(None, "--candidate", help="a ModelNew .py file"),
    spec: Optional[str] = typer.Option(None, "--spec", help="a kernel spec file (the DSL) for its GEMM regions"),
    out: str = typer.Option(".formloop/optimize", "--out", help="the campaign's directory"),
    small: bool = typer.Option(False, "--small"),
    tier: str = typer.Option("auto", "--tier"),
    store: Optional[str] = typer.Option(None, "--store", help="population store (default: the settings')"),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32 | bf16: which campaign"),
    json_out: bool = typer.Option(False, "--json"),
):
    """Check, measure and store a candidate exactly as formloop's own (harness + integrity, sandboxed)."""
    if (candidate is None) == (spec is None):
        raise InvalidInput("candidate", "both" if candidate else "neither", "exactly one of --candidate or --spec")
    path = Path(candidate or spec)
    if not path.is_file():
        raise InvalidInput("--candidate" if candidate else "--spec", str(path), "an existing file")
    text = path.read_text()
    r = api.optimize_submit(problem, out=out, source=text if candidate else None, spec=text if spec else None,
                            small=small, tier=tier, store=store, dtype=dtype)
    if json_out:
        print_json(r)
        return
    sp = f", {r['speedup']:.3g}x vs eager ({r['speedup_source']})" if r["speedup"] else ""
    console.print(f"{r['problem']} attempt {r['attempt']}: {'ACCEPTED' if r['accepted'] else 'not accepted'} "
                  f"[{r['verdict']}]{sp}", highlight=False, markup=False)
