"""`formloop problems DIR`: every problem's speed of light and its measured reference times, one table."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from formloop.cli import app, args
from formloop.cli.common import console, err_console, friendly, print_json
from formloop.errors import InvalidInput


def _us(seconds) -> str:
    return "" if seconds is None else f"{seconds * 1e6:.4g}"


def _ratio(x) -> str:
    return "" if x is None else f"{x:.2f}"


def problems_table(rows: list[dict], chip: str, device: str) -> Table:
    """SOL columns always; the timing columns only when some row was measured (else one caption)."""
    measured = any(r.get("eager_s") is not None for r in rows)
    t = Table(title=f"problems: speed of light on {chip} (sol: counted on meta tensors)"
              + (f"; reference times on {device} (gpu)" if measured else ""))
    cols = [("problem", "left"), ("FLOP (sol)", "right"), ("min byte (sol)", "right"), ("bound", "left"),
            ("floor µs (sol)", "right")]
    if measured:
        cols += [("eager µs (gpu)", "right"), ("compiled µs (gpu)", "right"), ("eager ÷ SOL", "right"),
                 ("compiled ÷ SOL", "right")]
    for col, justify in cols + [("note", "left")]:
        t.add_column(col, justify=justify, no_wrap=col == "problem", overflow="fold", min_width=min(len(col), 8))
    for r in rows:
        if r.get("sol_error"):
            t.add_row(r["id"], *[""] * (len(cols) - 1), f"SOL failed: {r['sol_error']}")
            continue
        notes = ["LOWER bound: uncounted " + ", ".join(r["uncounted"])] if r["lower_bound"] else []
        for n in (r["eager_note"], r["compiled_note"]):
            if n and n not in notes and measured:
                notes.append(n)
        cells = [r["id"], f"{r['flops']:.3g}", f"{r['bytes']:.3g}", r["bound"], _us(r["floor_s"])]
        if measured:
            cells += [_us(r["eager_s"]), _us(r["compiled_s"]), _ratio(r["eager_over_floor"]),
                      _ratio(r["compiled_over_floor"])]
        t.add_row(*cells, "; ".join(notes))
    if not measured:
        reasons = sorted({r["eager_note"] for r in rows if r.get("eager_note")})
        t.caption = "reference times: " + ("; ".join(reasons) or "none")
    return t


@app.command("problems")
@friendly
def problems_cmd(
    directory: Path = typer.Argument(..., help="problem set: level1/ level2/ level3/ folders or problem files",
                                     callback=args.directory("DIRECTORY", may_create=False)),
    chip: str = typer.Option("h100", "--chip", help="chip the SOL bound is computed for (formloop.hw.chips)"),
    clock_mhz: Optional[float] = typer.Option(None, "--clock-mhz", help="locked SM clock for the SOL bound, MHz",
                                              parser=args.clock_mhz),
    level: list[int] = typer.Option([], "--level", help="only this level (repeatable): 1, 2 or 3",
                                    parser=args.int_range("--level", 1, 3)),
    small: bool = typer.Option(False, "--small", help="the problems' SMALL (CPU-test) sizes"),
    measure: bool = typer.Option(True, "--measure/--no-measure", help="time the references where CUDA is present"),
    compile_too: bool = typer.Option(True, "--compile/--no-compile", help="also time torch.compile of each reference"),
    budget_s: Optional[float] = typer.Option(
        None, "--budget-s", help="skip torch.compile timings once this many seconds of timing are spent "
        "(0 < s <= 86400)", parser=args.float_range("--budget-s", 0, 86400)),
    as_json: bool = typer.Option(False, "--json", help="print the rows as JSON"),
) -> None:
    """For every problem file in DIRECTORY: the automatic SOL (FLOPs, minimum bytes, bound, floor; no
    tensor allocated) and the reference's eager and torch.compile times, measured on the GPU only."""
    from formloop.evaluate.reference import UNITS, _device_name, problem_rows
    from formloop.sol import resolve_chip

    resolve_chip(chip, clock_mhz)                      # a bad chip or clock fails before any work
    if budget_s is not None and budget_s < 0:
        raise InvalidInput("--budget-s", budget_s, "a number of seconds >= 0")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("problems", total=None)

        def advance(row: dict, i: int, total: int) -> None:
            progress.update(task, total=total, completed=i, description=row["id"])

        rows = problem_rows(directory, chip, measure=measure, compile_too=compile_too, small=small,
                            levels=tuple(level), budget_s=budget_s, on_row=advance, clock_mhz=clock_mhz)
    device = _device_name()
    if as_json:
        print_json({"chip": chip, "clock_mhz": clock_mhz, "device": device, "small": small, "units": UNITS,
                    "rows": rows})
    else:
        console.print(problems_table(rows, chip, device))
