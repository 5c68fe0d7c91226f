"""`formloop dsl check|emit|run FILE`: the kernel spec language, over formloop.api.dsl (the MCP tools
dsl_check and dsl_run answer with the same JSON)."""
from __future__ import annotations

from typing import Optional

import typer

from formloop import api
from formloop.cli import app, args
from formloop.cli.common import console, err_console, friendly, print_json

dsl_app = typer.Typer(no_args_is_help=True, help="kernel specs: check, emit the Triton source, run against torch.")
app.add_typer(dsl_app, name="dsl")

SOLVER_HELP = "solver for the open fields: milp (HiGHS) or enumerate (the joint menu, numpy)"
SPEC = args.existing_file("FILE (spec file)", text=True)
CALIBRATION = args.existing_file("--calibration", text=True)
SOLVER = args.choice("--solver", ("enumerate", "milp"))
SHAPE_HELP = "problem size: gemm MxNxK, batched_gemm BxMxNxK, conv2d NxHxWxCxK (overrides the spec's shape)"


def _refuse(result: dict) -> None:
    for line in result["lines"]:
        err_console.print(f"[bold red]error:[/] {line}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _answered(r: dict, as_json: bool) -> bool:
    """Print the JSON answer (exit 2 when refused) or refuse in words; True when nothing is left to print."""
    if as_json:
        print_json(r)
        if not r["ok"]:
            raise typer.Exit(2)
        return True
    if not r["ok"]:
        _refuse(r)
    return False


def _design_lines(d: dict | None) -> list[str]:
    if not d:
        return []
    out = [f"design: {d.get('text') or d['assignment']}"]
    if d.get("solve"):
        s = d["solve"]
        out.append(f"  {s['solver']} chose {', '.join(d['solved'])}: {s['objective_us']:.2f} us (model), "
                   f"bound {s['bound_us']:.2f} us, solved in {s['seconds']:.2f} s (wall)")
    if d.get("instance_check"):
        ic = d["instance_check"]
        out.append(f"  instance check: {'ok' if ic['ok'] else 'FAILED'} ({ic['conditions']} conditions, "
                   f"{ic['seconds'] * 1e3:.1f} ms wall), certificate {ic['certificate']}")
    if d.get("predicted_us") is not None:
        out.append(f"  predicted: {d['predicted_us']:.2f} us (model, {d['options']['calibration']})")
    out += [f"  note: {n}" for n in d.get("notes", [])]
    return out


def _summary_lines(r: dict) -> list[str]:
    lines = [f"ok: kernel {r['kernel']} = {r['operation']} on {r['arch']} ({r['chip']}); a {r['a']}, b {r['b']}, "
             f"c {r['c']}; epilogue: {r['epilogue'] or 'none'}",
             f"  fixed: {r['fixed'] or 'nothing'}; open (?): {', '.join(r['open']) or 'none'}; "
             f"walls checked: {', '.join(r['walls_checked'])} of {r['template']} {r['template_hash']}"]
    if r["feasible_designs"] is not None:
        lines.append(f"  designs meeting every wall with the fixed fields: {r['feasible_designs']} (enumerated)")
    if r["pipeline"]["before"] or r["pipeline"]["after"]:
        lines.append(f"  pipeline: {r['pipeline']['before']} -> kernel -> {r['pipeline']['after']}")
    return lines


@dsl_app.command("check")
@friendly
def check(file: str = typer.Argument(..., help="spec file", callback=SPEC),
          shape: Optional[str] = typer.Option(None, "--shape", help=SHAPE_HELP),
          calibration: Optional[str] = typer.Option(None, "--calibration", help="calibration JSON for the cost model",
                                                    callback=CALIBRATION),
          solver: str = typer.Option("milp", "--solver", help=SOLVER_HELP, callback=SOLVER),
          as_json: bool = typer.Option(False, "--json", help="print the result as JSON")) -> None:
    """Validate a spec (every rule, before any compile); with a shape, solve its open fields and check the instance."""
    r = api.dsl_check(path=file, shape=shape, calibration=calibration, solver=solver)
    if _answered(r, as_json):
        return
    for line in _summary_lines(r) + _design_lines(r.get("design")):
        console.print(line, highlight=False, soft_wrap=True)


@dsl_app.command("emit")
@friendly
def emit(file: str = typer.Argument(..., help="spec file", callback=SPEC),
         shape: Optional[str] = typer.Option(None, "--shape", help=SHAPE_HELP),
         calibration: Optional[str] = typer.Option(None, "--calibration", help="calibration JSON for the cost model",
                                                    callback=CALIBRATION),
         solver: str = typer.Option("milp", "--solver", help=SOLVER_HELP, callback=SOLVER),
         as_json: bool = typer.Option(False, "--json", help="print the result (with the source) as JSON")) -> None:
    """Print the Triton source of the spec's main kernel."""
    r = api.dsl_emit(path=file, shape=shape, calibration=calibration, solver=solver)
    if _answered(r, as_json):
        return
    typer.echo(r["source"], nl=False)


@dsl_app.command("run")
@friendly
def run(file: str = typer.Argument(..., help="spec file", callback=SPEC),
        shape: Optional[str] = typer.Option(None, "--shape", help=SHAPE_HELP),
        calibration: Optional[str] = typer.Option(None, "--calibration", help="calibration JSON for the cost model",
                                                    callback=CALIBRATION),
        solver: str = typer.Option("milp", "--solver", help=SOLVER_HELP, callback=SOLVER),
        no_timing: bool = typer.Option(False, "--no-timing", help="check correctness only"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON")) -> None:
    """Check against the torch reference, then time on a GPU (else: the interpreter at a reduced shape)."""
    r = api.dsl_run(path=file, shape=shape, calibration=calibration, timing=not no_timing, solver=solver)
    if as_json:
        print_json(r)
        if not r["ok"]:
            raise typer.Exit(2 if r.get("error") else 1)
        return
    if "correct" not in r:
        _refuse(r)
    lines = _summary_lines(r) + _design_lines({**r["design"], "text": r["design_text"]})
    c, s = r["correctness"], r["shape"]
    lines.append(f"tier: {r['tier']}; shape M={s['M']} N={s['N']} K={s['K']} batch={s['batch']}"
                 + ("" if r["tier"] == "gpu" else f" (reduced from M={r['requested_shape']['M']} "
                                                    f"N={r['requested_shape']['N']} K={r['requested_shape']['K']})"))
    lines.append(f"correct: {'yes' if r['correct'] else 'NO'}; relative error {c['rel_error']:.3g} (tolerance "
                 f"{c['tolerance']:.3g}), worst element {c['max_error_rms']:.3g} x RMS, vs {c['reference']}, "
                 f"{c['checks']} fresh input sets")
    if r.get("timing"):
        t, sol = r["timing"], r["sol"]
        lines.append(f"time: {t['graph_us']:.2f} us CUDA graph (p20 {t['graph_p20_us']:.2f}, "
                     f"p80 {t['graph_p80_us']:.2f}),"
                     f" {t['eager_us']:.2f} us eager ({t['source']})")
        lines.append(f"SOL floor: {sol['floor_us']:.2f} us, {sol['bound']}-bound ({sol['source']}); "
                     f"fraction {sol['fraction']:.3f}")
    elif r.get("note"):
        lines.append(f"note: {r['note']}")
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
    if not r["correct"]:
        raise typer.Exit(1)
