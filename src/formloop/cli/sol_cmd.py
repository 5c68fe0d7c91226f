"""`formloop sol`: speed-of-light report for an operator shape or a problem file."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from formloop import api
from formloop.api.values import with_non_finite
from formloop.cli import app, args
from formloop.cli.common import console, friendly, print_json
from formloop.sol.report import SOLReport
from formloop.workload import EXTENTS


def _ops_table(ops: list[dict]) -> Table:
    t = Table(title="operators of formloop.sol (FLOPs and minimum bytes from the shape)")
    for col in ("op", "shape fields (order of --shape)", "optional (default)", "computes"):
        t.add_column(col)
    for s in ops:
        t.add_row(s["op"], ",".join(s["fields"]), ", ".join(f"{k}={v}" for k, v in s["defaults"].items()), s["doc"])
    return t


def render(report: dict) -> Table:
    """The report's own table (the dict holds every field of a SOLReport)."""
    report = with_non_finite(report)  # a problem that does no work has intensity 0/0: shown, not a crash
    fields = {k: v for k, v in report.items() if k in SOLReport.__dataclass_fields__}
    return SOLReport(**{**fields, "notes": tuple(fields.get("notes", ()))}).table()


@app.command()
@friendly
def sol(
    op: Optional[str] = typer.Argument(None, help="operator (see --ops); omit with --problem"),
    shape: Optional[str] = typer.Option(None, "--shape", help=f"op fields in order, e.g. 4096,4096,4096, or "
                                        f"name=value pairs; extents are {EXTENTS}"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="storage dtype: fp32, bf16, fp16, fp8 "
                                        "(op default fp32; problem default: its own)"),
    chip: str = typer.Option("h100", "--chip", help="chip name (formloop.hw.chips)"),
    clock_mhz: Optional[float] = typer.Option(None, "--clock-mhz", help="locked SM clock, MHz (at most the chip's "
                                              "boost); compute peaks scale with it", parser=args.clock_mhz),
    precision: Optional[str] = typer.Option(None, "--precision",
                                            help="compute precision: tf32 | tf32x3 | fp32 | bf16 | fp16 (default: "
                                                 "tf32 for fp32 GEMMs, else the dtype's)"),
    problem: Optional[Path] = typer.Option(None, "--problem",
                                           help="problem file (Model/get_inputs/get_init_inputs): automatic SOL",
                                           callback=args.existing_file("--problem", suffix=".py")),
    ops: bool = typer.Option(False, "--ops", help="list the operators and their shape fields"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Speed-of-light bound: FLOPs, minimum DRAM bytes, intensity, bound and time floor per precision."""
    if ops:
        listing = api.sol_ops()
        if as_json:
            print_json(listing)
        else:
            console.print(_ops_table(listing["ops"]))
        return
    report = api.sol_report(op, shape, dtype=dtype, chip=chip, clock_mhz=clock_mhz, precision=precision,
                            problem=str(problem) if problem is not None else None)
    if as_json:
        print_json(report)
    else:
        console.print(render(report))
