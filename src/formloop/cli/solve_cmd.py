"""`formloop templates`, `formloop solve`, `formloop demo`."""
from __future__ import annotations

import typer
from rich.table import Table

from formloop.cli import app
from formloop.cli.common import console, friendly, parse_shape, print_json
from formloop.hw.chips import get_chip
from formloop.library import get_template, template_names
from formloop.solve import SOLVERS, enumerate_designs
from formloop.errors import InvalidInput


@app.command()
@friendly
def templates() -> None:
    """List the template library."""
    table = Table(title="formloop templates")
    for col in ("name", "decisions", "constraints", "preconditions", "content hash"):
        table.add_column(col)
    for name in template_names():
        t = get_template(name)
        table.add_row(name, ", ".join(t.decision_names), ", ".join(c.name for c in t.constraints),
                      ", ".join(c.name for c in t.preconditions), t.content_hash)
    console.print(table)


def solve_report(template_name: str, shape: tuple[int, ...], pre: str, solver: str, chip_name: str, dtype: str) -> dict:
    """Solve one workload and return the report the CLI prints (also used by studies)."""
    from formloop.library import gemm_tiling

    if solver not in SOLVERS:
        raise InvalidInput("solver", solver, sorted(SOLVERS))
    if template_name != gemm_tiling.NAME:
        get_template(template_name)  # unknown names fail here with the list of known ones
        raise InvalidInput("template", template_name, [gemm_tiling.NAME], fix="only gemm-tiling takes --shape M,N,K")
    from formloop.library.gemm_tiling_gpu import HOPPER_CHIPS

    if chip_name.lower() in HOPPER_CHIPS:  # the Hopper contract: the Triton family's decisions and cost model
        from formloop.cli.measure_cmd import solve_gpu_contract

        if pre != "exact":
            raise InvalidInput(f"contract (--pre) with --chip {chip_name}", pre, ["exact"],
                               fix="the Triton family's schedule is fixed (P = S-1, beta = 1)")
        return solve_gpu_contract(shape, solver, chip_name, dtype)[0]
    template = get_template(template_name, pre=pre, dtype=dtype)
    f = template.formulate(gemm_tiling.workload(shape, dtype), get_chip(chip_name))
    return design_report(f, SOLVERS[solver](f), shape=shape, chip=chip_name, dtype=dtype, contract=pre,
                         bound_class=gemm_tiling.bound_class)


def design_report(f, sol, *, shape, chip: str, dtype: str, contract: str, bound_class, **extra) -> dict:
    """What `solve` (and `measure`) report about one solved GEMM formulation; `source` says every
    time in it is the model's."""
    ties = sol.ties if sol.ties is not None else enumerate_designs(f).ties
    return {
        "template": f.template.name, "template_hash": f.template.content_hash, "contract": contract,
        "chip": chip, "shape": {"M": shape[0], "N": shape[1], "K": shape[2]}, "dtype": dtype, **extra,
        "solver": sol.solver, "status": sol.status.value, "design": dict(sol.assignment),
        "objective_us": sol.objective, "bound_us": sol.bound, "gap": sol.gap, "ties": len(ties),
        "bound_class": bound_class(sol.terms), "smem_bytes": int(sol.terms["smem_bytes"]),
        "T_comp_us": sol.terms["T_comp_us"], "T_mem_us": sol.terms["T_mem_us"],
        "solve_seconds": sol.seconds, "model": sol.model.as_dict(), "source": "model",
    }


@app.command()
@friendly
def solve(
    template: str = typer.Argument(..., help="template name, e.g. gemm-tiling"),
    shape: str = typer.Option(..., help="GEMM extents M,N,K"),
    pre: str = typer.Option("exact", help="contract: exact | strong | weak"),
    solver: str = typer.Option("milp", help="milp (HiGHS) | enumerate"),
    chip: str = typer.Option("illustrative", help="chip spec name"),
    dtype: str = typer.Option("fp32", help="element type: fp32 | tf32 | bf16 | fp16"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Solve a template for one workload and print the chosen design."""
    report = solve_report(template, parse_shape(shape), pre, solver, chip, dtype)
    if json_out:
        print_json(report)
        return
    d = report["design"]
    table = Table(title=f"{template} · {shape} · {pre} contract · chip {chip} (times: model)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [
        (f"design ({','.join(d)})", "(" + ", ".join(str(v) for v in d.values()) + ")"),
        ("modeled time (us, model)", f"{report['objective_us']:.1f}"),
        ("bound class (model)", report["bound_class"]),
        ("T_comp / T_mem (us, model)", f"{report['T_comp_us']:.1f} / {report['T_mem_us']:.1f}"),
        ("shared memory (KiB)", f"{report['smem_bytes'] / 1024:g}"),
        ("objective bound (us, solver)", f"{report['bound_us']:.4f}"),
        ("gap (relative)", f"{report['gap']:.2g}"),
        ("tied optima (count, enumeration)", str(report["ties"])),
        ("solve time (s, wall)", f"{report['solve_seconds']:.3f}"),
        ("model (variables / binaries / rows)", "{variables} / {binaries} / {rows}".format(**report["model"])),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
