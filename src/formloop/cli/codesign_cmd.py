"""`formloop codesign STUDY.toml` (a study's table, Table 12 or 11 layout) and `formloop wall-relax`
(wall relaxation from one start of a study)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from formloop import api
from formloop.cli import app, args
from formloop.cli.common import console, friendly, print_json

STUDY = args.existing_file("STUDY", text=True)


def _plot(value):
    return value if not value else args.new_file("--plot")(value)


PLOT = _plot


def cell(ratio: float | None, n: int | None = None) -> str:
    text = "inf" if ratio is None else f"{ratio:.3f}"  # a ratio is null in JSON only when it was infinite
    return text if n is None else f"{text} ({n})"


@app.command()
@friendly
def codesign(
    study: str = typer.Argument(..., help="study file (TOML), e.g. studies/wall_relaxation_capacity.toml",
                                callback=STUDY),
    json_out: bool = typer.Option(False, "--json", help="print a JSON list of rows"),
    plot: str = typer.Option("", help="where to write the Figure 6-style PNG (capacity studies; "
                                      "default .formloop/codesign-<study>.png)", callback=PLOT),
) -> None:
    """Co-design study: wall relaxation against fixed, sequential, random and joint search."""
    out = api.codesign_study(study, plot=plot or str(Path(".formloop") / "codesign-{study}.png"))
    if json_out:
        print_json(out["rows"])
        return
    if out["kind"] == "capacity":
        _print_capacity(out)
    else:
        _print_table11(out)
    if out["plot"] is not None:
        console.print(f"figure (quality vs distinct inner problems, small starts): {out['plot']}")


def _grid_table(title: str, columns: list[str], methods: dict[str, list[str]]) -> Table:
    t = Table(title=title, show_lines=False)
    t.add_column("method")
    for c in columns:
        t.add_column(c, justify="right")
    for method, cells in methods.items():
        t.add_row(method, *cells)
    return t


def _print_capacity(out: dict) -> None:
    table = out["table"]
    console.print(_grid_table(f"{out['study']}: final ratio (distinct inner problems); {out['unit']}",
                              table["columns"], table["methods"]))
    if table["seed_methods"]:
        console.print(_grid_table("seed 000 Table 12 (instruction-simulated Ventus, its programs): orientation only, "
                                  "compare shape not value", table["seed_columns"], table["seed_methods"]))
    for r in out["rows"]:
        if r["method"] not in ("wall relaxation", "coupled wall"):
            continue
        console.print(f"{r['method']} · {r['objective']} · {r['start']}: {r['calls']} SOLVE calls "
                      f"(bound {r['bound']}), final chip {r['chip']} ({r['area_mm2']:.4f} mm2)", highlight=False)
        for u in r["purchases"]:
            console.print(f"    buy {u['move']}: {u['before']} -> {u['after']}, predicted drop "
                          f"{u['predicted_drop']:.4f}, evaluated {u['evaluated_drop']:.4f}; "
                          + "; ".join(u["mechanism"]), highlight=False)


def _print_table11(out: dict) -> None:
    table, methods = out["table"], out["table"]["methods"]
    t = Table(title=f"{out['study']}: {out['unit']}")
    t.add_column("objective")
    for m in methods:
        t.add_column(m, justify="right")
    t.add_column("joint speedup over software only", justify="right")
    seed = table["seed_numbers"]
    for objective in table["objectives"]:
        by = {r["method"]: r for r in out["rows"] if r["objective"] == objective}
        joint = by["joint reference"]
        t.add_row(objective, *(cell(by[m]["evaluated"]) for m in methods), f"{joint['speedup_over_software']:.2f}x")
        if objective in seed:
            t.add_row("  seed 000", *(cell(v) for v in seed[objective][:4]),
                      f"{seed[objective][4]:.2f}x" if len(seed[objective]) > 4 else "")
    console.print(t)
    for r in out["rows"]:
        if r["method"] == "joint reference":
            console.print(f"joint · {r['objective']}: chip {r['chip_values']} ({r['area_mm2']:.4f} mm2), software "
                          f"{r['software']}; MILP {cell(r['ratio'])} = enumeration "
                          f"{cell(r['enumeration_ratio'])}", highlight=False)


@app.command("wall-relax")
@friendly
def wall_relax(
    study: str = typer.Argument(..., help="study file (TOML), e.g. studies/wall_relaxation_capacity.toml",
                                callback=STUDY),
    objective: str = typer.Option(..., help="the study's objective to minimize, e.g. prefill"),
    start: Optional[str] = typer.Option(None, help="the study's start chip label (default: its first)"),
    coupled: bool = typer.Option(False, help="also screen pairs of walls (coupled variant)"),
    k: Optional[int] = typer.Option(None, help="menu steps priced out and in, 1 ... 64 (default: the study's)",
                                    parser=args.int_range("--k", 1, 64)),
    rounds: Optional[int] = typer.Option(None, help="purchase rounds at most, 1 ... 1000 (default: the study's)",
                                         parser=args.int_range("--rounds", 1, 1000)),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Wall relaxation from one start: price the walls that bind the best software, buy the largest
    latency drop per mm2 under the area ceiling, repeat."""
    r = api.wall_relax(study, objective, start=start, coupled=coupled, k=k, rounds=rounds)
    if json_out:
        print_json(r)
        return
    console.print(f"{r['study']} · {r['objective']}: {r['start']} -> {r['chip']} ({r['area_mm2']:.4f} of "
                  f"{r['ceiling_mm2']:g} mm2, area model); ratio {cell(r['L_model'])} (model), "
                  f"{cell(r['L_evaluated'])} (evaluated); {r['calls']} SOLVE calls (bound {r['bound']})",
                  highlight=False)
    for u in r["purchases"]:
        console.print(f"    buy {u['move']}: {u['before']} -> {u['after']}, predicted drop {u['predicted_drop']:.4f}, "
                      f"evaluated {u['evaluated_drop']:.4f}, +{u['added_mm2']:.4f} mm2; " + "; ".join(u["mechanism"]),
                      highlight=False)
