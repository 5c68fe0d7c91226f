"""`formloop codesign STUDY.toml`: run a co-design study and print its table (Table 12 or 11 layout)."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from formloop.cli import app
from formloop.cli.common import console, friendly, print_json
from formloop.codesign import tables
from formloop.codesign.study import load_study

UNIT = "worst-scenario cycle ratio to the reference program on the reference chip (evaluator: analytic model)"


def run_study(path: str) -> tuple[object, list[dict]]:
    study = load_study(path)
    rows = tables.capacity_rows(study) if study.kind == "capacity" else tables.table11_rows(study)
    return study, rows


def _json_rows(rows: list[dict]) -> list[dict]:
    drop = ("trajectory", "trajectories")
    return [{k: v for k, v in r.items() if k not in drop} | {"unit": UNIT} for r in rows]


@app.command()
@friendly
def codesign(
    study: str = typer.Argument(..., help="study file (TOML), e.g. studies/wall_relaxation_capacity.toml"),
    json_out: bool = typer.Option(False, "--json", help="print a JSON list of rows"),
    plot: str = typer.Option("", help="where to write the Figure 6-style PNG (capacity studies; "
                                      "default .formloop/codesign-<study>.png)"),
) -> None:
    """Co-design study: wall relaxation against fixed, sequential, random and joint search."""
    s, rows = run_study(study)
    png = None
    if s.kind == "capacity":
        png = tables.plot_capacity(s, rows, plot or Path(".formloop") / f"codesign-{s.name}.png")
    if json_out:
        print_json(_json_rows(rows))
        return
    if s.kind == "capacity":
        _print_capacity(s, rows)
    else:
        _print_table11(s, rows)
    if png is not None:
        console.print(f"figure (quality vs distinct inner problems, small starts): {png}")


def _print_capacity(s, rows) -> None:
    cols, grid = tables.capacity_grid(s, rows)
    t = Table(title=f"{s.name}: final ratio (distinct inner problems); {UNIT}", show_lines=False)
    t.add_column("method")
    for c in cols:
        t.add_column(c, justify="right")
    for method, cells in grid.items():
        t.add_row(method, *cells)
    console.print(t)
    scols, sgrid = tables.seed_grid(s)
    if sgrid:
        st = Table(title="seed 000 Table 12 (instruction-simulated Ventus, its programs): orientation only, "
                         "compare shape not value")
        st.add_column("method")
        for c in scols:
            st.add_column(c, justify="right")
        for method, cells in sgrid.items():
            st.add_row(method, *cells)
        console.print(st)
    wr = [r for r in rows if r["method"] in ("wall relaxation", "coupled wall")]
    for r in wr:
        console.print(f"{r['method']} · {r['objective']} · {r['start']}: {r['calls']} SOLVE calls "
                      f"(bound {r['bound']}), final chip {r['chip']} ({r['area_mm2']:.4f} mm2)", highlight=False)
        for u in r["purchases"]:
            console.print(f"    buy {u['move']}: {u['before']} -> {u['after']}, predicted drop "
                          f"{u['predicted_drop']:.4f}, evaluated {u['evaluated_drop']:.4f}; "
                          + "; ".join(u["mechanism"]), highlight=False)


def _print_table11(s, rows) -> None:
    t = Table(title=f"{s.name}: {UNIT}")
    t.add_column("objective")
    for m in tables.TABLE11_METHODS:
        t.add_column(m, justify="right")
    t.add_column("joint speedup over software only", justify="right")
    seed = s.seed_numbers
    for objective in s.problem.objectives:
        by = {r["method"]: r for r in rows if r["objective"] == objective}
        joint = by["joint reference"]
        t.add_row(objective, *(tables.cell(by[m]["evaluated"]) for m in tables.TABLE11_METHODS),
                  f"{joint['speedup_over_software']:.2f}x")
        if objective in seed:
            t.add_row("  seed 000", *(tables.cell(v) for v in seed[objective][:4]),
                      f"{seed[objective][4]:.2f}x" if len(seed[objective]) > 4 else "")
    console.print(t)
    for r in rows:
        if r["method"] == "joint reference":
            console.print(f"joint · {r['objective']}: chip {r['chip_values']} ({r['area_mm2']:.4f} mm2), software "
                          f"{r['software']}; MILP {tables.cell(r['ratio'])} = enumeration "
                          f"{tables.cell(r['enumeration_ratio'])}", highlight=False)
