"""`formloop measure`: solve the tiling template's GPU contract and measure the chosen instance.

With a CUDA device the instance is built (Triton), checked against a float64 reference and timed
(tier gpu); without one the command says so and reports the model tier, labelled as such."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from formloop.cli import app
from formloop.cli.common import console, err_console, friendly, parse_shape, print_json
from formloop.errors import InvalidInput



def gpu_template(dtype: str, calibration: str | None = None):
    """The gemm-tiling-gpu template, with a stored calibration's efficiency terms if given."""
    from formloop.evaluate.calibrate import Calibration
    from formloop.library import get_template

    if calibration is None:
        return get_template("gemm-tiling-gpu", dtype=dtype), None
    path = Path(calibration)
    if not path.is_file():
        raise InvalidInput("calibration", calibration, "a calibration JSON written by benchmarks/gemm.py")
    cal = Calibration.load(path)
    return get_template("gemm-tiling-gpu", dtype=dtype, calibration=cal.values, calibration_id=cal.key), cal


def solve_gpu_contract(shape: tuple[int, ...], solver: str, chip_name: str, dtype: str,
                       calibration: str | None = None) -> tuple[dict, object, object, dict]:
    """Solve gemm-tiling's GPU contract; returns (report, template, chip, workload)."""
    from formloop.hw.chips import get_chip
    from formloop.library import gemm_tiling_gpu as gpu
    from formloop.cli.solve_cmd import design_report
    from formloop.solve import SOLVERS

    if chip_name.lower() not in gpu.HOPPER_CHIPS:
        raise InvalidInput("chip", chip_name, gpu.HOPPER_CHIPS, fix="the Triton family's contract is written for Hopper")
    if solver not in SOLVERS:
        raise InvalidInput("solver", solver, sorted(SOLVERS))
    template, cal = gpu_template(dtype, calibration)
    chip = get_chip(chip_name)
    workload = gpu.workload(shape, "bf16" if dtype == "bf16" else dtype)
    f = template.formulate(workload, chip)
    report = design_report(f, SOLVERS[solver](f), shape=shape, chip=chip_name, dtype=dtype,
                           contract="gpu (Triton family)", bound_class=gpu.bound_class,
                           calibration=cal.key if cal else "priors")
    return report, template, chip, workload


@app.command()
@friendly
def measure(
    template: str = typer.Argument(..., help="gemm-tiling"),
    shape: str = typer.Option(..., help="GEMM extents M,N,K"),
    chip: str = typer.Option("h200", help="chip spec: h200 | h100"),
    dtype: str = typer.Option("bf16", help="bf16 | fp16 | tf32 | fp32"),
    solver: str = typer.Option("milp", help="milp (HiGHS) | enumerate"),
    calibration: str = typer.Option(None, help="calibration JSON (from benchmarks/gemm.py) for the cost model"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Pick an instance with the MILP and measure it (gpu tier on a CUDA device, else model tier)."""
    from formloop.evaluate import ModelEvaluator, best_available, gpu_available

    if template != "gemm-tiling":
        raise InvalidInput("template", template, ["gemm-tiling"])
    report, t, chip_spec, workload = solve_gpu_contract(parse_shape(shape), solver, chip, dtype, calibration)
    if gpu_available():
        evaluator = best_available()
        fallback = ""
    else:
        evaluator = ModelEvaluator()
        fallback = "no CUDA device here: measured on the model tier (the template's cost), not on a GPU"
        if not json_out:
            err_console.print(f"[yellow]note:[/] {fallback}")
    m = evaluator.evaluate(t, report["design"], workload, chip_spec)
    report["measurement"] = m.as_dict()
    report["fallback"] = fallback
    if json_out:
        print_json(report)
        return
    tier = m.tier
    table = Table(title=f"gemm-tiling on {chip} · {shape} · {dtype} (design: MILP on the gpu contract)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    d = report["design"]
    rows = [
        ("design (Tm,Tn,Tk,S,W,KS,G,L)", "(" + ", ".join(str(d[k]) for k in t.decision_names) + ")"),
        ("modeled time (us, model)", f"{report['objective_us']:.2f}"),
        (f"latency (us, {tier})", f"{m.latency_us:.2f}" if m.ok else f"failed: {m.failure}"),
        ("source of the latency", f"{tier} tier on {m.provenance.device}"),
        ("correctness (rel. error vs float64, gpu)",
         f"{m.correctness.rel_error:.2e} (tol {m.correctness.tolerance:g})" if m.correctness else "not checked (model tier)"),
        ("calibration", report["calibration"]),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
