"""`formloop templates`, `show`, `solve`, `check`: the library, one contract, the optimum, one design."""
from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from formloop import api
from formloop.cli import app, args
from formloop.cli.common import SHAPE_HELP, console, friendly, parse_options, print_json
from formloop.settings import load_settings

STORE = typer.Option(None, "--store", help="population file (default: $FORMLOOP_STORE or .formloop/population.db)")
OPTION = typer.Option(None, "--option", help="a template factory option NAME=VALUE, e.g. pre=weak; repeat")
DTYPE = typer.Option(None, help="element type: fp32 | tf32 | tf32x3 | bf16 | fp16 (default: the template's; fp32, "
                                "bf16 for the Triton families)")
CHIP = typer.Option(None, help="chip spec name (default: the template's; illustrative, h200 for the Triton families; "
                               "h200/h100: gemm-tiling's GPU contract)")
JSON = typer.Option(False, "--json", help="print one JSON object")
SOLVERS = ("enumerate", "milp")


@app.command()
@friendly
def templates(store: Optional[str] = STORE, json_out: bool = JSON) -> None:
    """List the template library (and, with --json, the population's stored templates)."""
    out = api.list_templates(settings=load_settings().with_overrides(store_path=store))
    if json_out:
        print_json(out)
        return
    table = Table(title="formloop templates")
    for col in ("name", "decisions", "constraints", "preconditions", "content hash"):
        table.add_column(col)
    for t in out["library"]:
        table.add_row(t["name"], ", ".join(t["decisions"]), ", ".join(t["constraints"]),
                      ", ".join(t["preconditions"]), t["hash"])
    console.print(table)


@app.command()
@friendly
def show(template: str = typer.Argument(..., help="a library template name or path/to/file.py:NAME"),
         option: Optional[list[str]] = OPTION, json_out: bool = JSON) -> None:
    """One template's contract: decisions with menus, parameters, rules, descriptor, hash."""
    out = api.show_template(template, parse_options(option))
    if json_out:
        print_json(out)
        return
    console.print(f"[bold]{out['name']}[/] {out['hash']} · {out['doc']} · cost in {out['unit']}", highlight=False)
    table = Table(title="decisions")
    for col in ("decision", "menu", "side", "meaning"):
        table.add_column(col)
    for d in out["decisions"]:
        table.add_row(d["name"], ", ".join(map(str, d["menu"])), d["side"], d["doc"])
    console.print(table)
    console.print("parameters: " + ", ".join(f"{p['name']} ({p['kind']})" for p in out["params"]), highlight=False)
    for key in ("scope", "constraints", "preconditions"):
        console.print(f"{key}: {', '.join(out[key]) or 'none'}", highlight=False)
    console.print(f"descriptor: {out['descriptor']}", highlight=False)


@app.command()
@friendly
def solve(
    template: str = typer.Argument(..., help="template name, e.g. gemm-tiling, or path/to/file.py:NAME"),
    shape: str = typer.Option(..., help=SHAPE_HELP + "; attention: B,Hq,Hkv,D,L[,page=P][,causal=0|1]"),
    pre: Optional[str] = typer.Option(None, help="contract of gemm-tiling: exact | strong | weak (default exact)"),
    solver: str = typer.Option("milp", help="milp (HiGHS) | enumerate", callback=args.choice("--solver", SOLVERS)),
    chip: Optional[str] = CHIP,
    calibration: Optional[str] = typer.Option(None, help="calibration JSON of a Triton family's cost model, or "
                                                          "'prior' (default: the store's latest, else prior)",
                                              callback=args.calibration_file()),
    dtype: Optional[str] = DTYPE,
    op: Optional[str] = typer.Option(None, help="operator of the workload (default: the template's)"),
    option: Optional[list[str]] = OPTION,
    json_out: bool = JSON,
) -> None:
    """Solve a template for one workload and print the chosen design."""
    options = parse_options(option) | ({"pre": pre} if pre is not None else {})
    report = api.solve(template, shape, op=op, dtype=dtype, chip=chip, options=options, solver=solver,
                       calibration=calibration, settings=load_settings())
    if json_out:
        print_json(report)
        return
    d = report["design"]
    # A routed gemm-tiling keeps the name the user gave; its contract is the exact one (the GPU family's).
    contract = pre or (report["contract"] if report["template"] == template else "exact") or "default"
    table = Table(title=f"{template} · {shape} · {contract} contract · chip {report['chip']} · {report['dtype']} "
                        "(times: model)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [(f"design ({','.join(d)})", "(" + ", ".join(str(v) for v in d.values()) + ")")]
    if "bound_class" in report:
        rows += [
            ("modeled time (us, model)", f"{report['objective_us']:.1f}"),
            ("bound class (model)", report["bound_class"]),
            ("T_comp / T_mem (us, model)", f"{report['T_comp_us']:.1f} / {report['T_mem_us']:.1f}"),
            ("shared memory (KiB)", f"{report['smem_bytes'] / 1024:g}")]
    if "calibration_source" in report:
        rows.append(("cost model calibration", report["calibration_source"]))
    else:
        rows.append((f"modeled cost ({report['unit']}, model)", f"{report['objective']:.4g}"))
    if "sol" in report:
        sol = report["sol"]
        rows.append((f"speed-of-light floor (us, sol; {sol['bound']}-bound)", f"{sol['floor_us']:.2f}"))
    rows += [
        (f"objective bound ({report['unit']}, solver)", _num(report["bound"], ".4f")),
        ("gap (relative)", _num(report["gap"], ".2g")),
        ("tied optima (count, enumeration)", str(report["ties"])),
        ("solve time (s, wall)", f"{report['seconds']:.3f}"),
        ("model (variables / binaries / rows)", "{variables} / {binaries} / {rows}".format(**report["model"])),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)


def _num(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


@app.command()
@friendly
def check(
    template: str = typer.Argument(..., help="template name, or path/to/file.py:NAME"),
    design: str = typer.Option(..., help="decision values in the template's order (e.g. 128,128,32,3,1,0) "
                                         "or named (Tm=128,...)"),
    shape: str = typer.Option(..., help=SHAPE_HELP),
    chip: Optional[str] = CHIP,
    dtype: Optional[str] = DTYPE,
    op: Optional[str] = typer.Option(None, help="operator of the workload (default: the template's)"),
    option: Optional[list[str]] = OPTION,
    json_out: bool = JSON,
) -> None:
    """Check one design against the template's scope, menus, constraints and preconditions.
    Exit status 1 when it violates any."""
    out = api.check(template, design, shape, op=op, dtype=dtype, chip=chip, options=parse_options(option))
    if json_out:
        print_json(out)
    else:
        verdict = "[green]valid[/]" if out["valid"] else "[bold red]violates[/]"
        console.print(f"{out['template']} · {out['workload']} · chip {out['chip']} · design {out['design']}: "
                      f"{verdict} ({out['conditions']} conditions in {out['seconds'] * 1e3:.1f} ms, wall)")
        for v in out["violations"]:
            console.print(f"  {v}", highlight=False)
    if not out["valid"]:
        raise typer.Exit(1)
