"""`formloop sol`: speed-of-light report for an operator shape or a problem file."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from formloop.cli import app
from formloop.cli.common import console, friendly, print_json
from formloop.errors import InvalidInput
from formloop.sol.ops import OPS, get_op


def parse_op_shape(op: str, text: str) -> dict:
    """'4096,4096,4096' (the op's fields in order) or 'M=64,N=128,K=32,act=gelu' into a shape dict."""
    spec = get_op(op)
    out, positional = {}, True
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise InvalidInput("shape", text, f"{op} fields {','.join(spec.fields)}")
    for i, part in enumerate(parts):
        if "=" in part:
            positional = False
            key, value = (s.strip() for s in part.split("=", 1))
        elif not positional:
            raise InvalidInput("shape", text, "positional values before name=value pairs")
        elif i >= len(spec.fields):
            raise InvalidInput(f"shape of {op}", text, f"at most {len(spec.fields)} values ({','.join(spec.fields)})")
        else:
            key, value = spec.fields[i], part
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _ops_table() -> Table:
    t = Table(title="operators of formloop.sol (FLOPs and minimum bytes from the shape)")
    for col in ("op", "shape fields (order of --shape)", "optional (default)", "computes"):
        t.add_column(col)
    for name in sorted(OPS):
        s = OPS[name]
        opt = ", ".join(f"{k}={v}" for k, v in (s.defaults or {}).items())
        t.add_row(name, ",".join(s.fields), opt, s.doc)
    return t


@app.command()
@friendly
def sol(
    op: Optional[str] = typer.Argument(None, help="operator (see --ops); omit with --problem"),
    shape: Optional[str] = typer.Option(None, "--shape", help="op fields in order, e.g. 4096,4096,4096, or name=value pairs"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="storage dtype: fp32, bf16, fp16, fp8 (op default fp32; problem default: its own)"),
    chip: str = typer.Option("h100", "--chip", help="chip name (formloop.hw.chips)"),
    clock_mhz: Optional[float] = typer.Option(None, "--clock-mhz", help="locked SM clock; compute peaks scale with it"),
    precision: Optional[str] = typer.Option(None, "--precision", help="compute precision (default: tf32 for fp32 GEMMs, else the dtype's)"),
    problem: Optional[Path] = typer.Option(None, "--problem", help="problem file (Model/get_inputs/get_init_inputs): automatic SOL"),
    ops: bool = typer.Option(False, "--ops", help="list the operators and their shape fields"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Speed-of-light bound: FLOPs, minimum DRAM bytes, intensity, bound and time floor per precision."""
    if ops:
        console.print(_ops_table())
        return
    if problem is not None:
        if op is not None or shape is not None:
            raise InvalidInput("arguments", f"{op or ''} --shape {shape or ''}".strip(),
                               "either OP --shape ... or --problem PATH, not both")
        from formloop.sol.auto import sol_for_problem

        report = sol_for_problem(problem, chip, dtype, clock_mhz=clock_mhz, compute_precision=precision)
    else:
        from formloop.sol import sol_report

        if op is None:
            raise InvalidInput("operator", None, sorted(OPS), fix="give an operator with --shape, or --problem PATH")
        spec = get_op(op)
        if shape is None:
            raise InvalidInput("--shape", None, f"{op} fields {','.join(spec.fields)}")
        report = sol_report(op, parse_op_shape(op, shape), dtype or "fp32", chip, clock_mhz=clock_mhz,
                            compute_precision=precision)
    if as_json:
        print_json(report.as_dict())
    else:
        console.print(report.table())
