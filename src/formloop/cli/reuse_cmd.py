"""`formloop reuse STUDY.toml`: copy vs re-solve for a family's held-out workloads (template reuse)."""
from __future__ import annotations

from typing import List, Optional

import typer
from rich.table import Table

from formloop import api
from formloop.cli import app, args
from formloop.cli.common import console, friendly, print_json

STUDY = args.existing_file("STUDY", text=True)


def _us(x: float | None) -> str:
    return "inf" if x is None else f"{x:.2f}"


@app.command()
@friendly
def reuse(
    study: str = typer.Argument(..., help="reuse study file (TOML), e.g. studies/template_reuse_gemm.toml",
                                callback=STUDY),
    solver: Optional[str] = typer.Option(None, help="milp or enumerate (default: the study's)"),
    only: Optional[List[str]] = typer.Option(None, "--only", help="a held-out workload to answer (repeatable)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Template reuse: the nearest solved assignment copied vs the family re-solved, per held-out workload."""
    r = api.template_reuse(study, solver=solver, only=only)
    if json_out:
        print_json(r)
        return
    t = Table(title=f"{r['study']}: {r['template']} on {r['chip']} ({r['solver']}; calibration "
                    f"{'priors' if r['calibration'] == 'priors' else 'study'}); times {r['units']['copied']}")
    for col in ("held-out workload", "copied from", "copied µs", "re-solved µs", "copy/re-solve", "solve s"):
        t.add_column(col, justify="left" if col in ("held-out workload", "copied from") else "right")
    for row in r["rows"]:
        ratio = "inf (breaks " + ", ".join(v.split(":")[0] for v in row["copied_violations"]) + ")" \
            if row["copied_violations"] else f"{row['ratio']:.3f}" + (" (same)" if row["same"] else "")
        t.add_row(row["workload"], row["nearest"], _us(row["copied_us"]), _us(row["resolved_us"]), ratio,
                  f"{row['solve_s']:.2f}")
    console.print(t)
