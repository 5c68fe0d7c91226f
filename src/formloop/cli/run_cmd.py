"""`formloop run WORKLOAD`: the loop, with a table (or JSON) of what it did; `formloop demo`."""
from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from formloop import api
from formloop.cli import app, args
from formloop.settings import TIERS
from formloop.cli.common import console, fmt, friendly, print_json
from formloop.settings import load_settings
from formloop.workload import EXTENTS

STORE = typer.Option(None, help="population file (default: $FORMLOOP_STORE or .formloop/population.db)")


def render_report(report: dict) -> Table:
    """The loop's table: every number's unit and source is in its column header."""
    table = Table(title=f"formloop run · chip {report['chip']}", caption=_caption(report), caption_justify="left")
    for c in ("workload", "template", "proof", "design", "predicted us (model)", "evaluated us (tier)", "tier",
              "SOL floor us (sol)", "SOL frac", "check"):
        table.add_column(c, justify="right" if "us" in c or c == "SOL frac" else "left",
                         no_wrap=c in ("workload", "template", "proof", "design"))
    for r in report["rows"]:
        proof = r["proof"] + (f" · {r['proof_source']} {r['proof_seconds']:.2f} s" if r["proof_source"] else "")
        design = "(" + ",".join(str(v) for v in r["design"].values()) + ")" if r["design"] else "-"
        table.add_row(r["workload"], r["template"] or "-", proof, design, fmt(r["predicted_us"]), fmt(r["measured_us"]),
                      r["tier"] or "-", fmt(r["sol_floor_us"]), fmt(r["sol_fraction"], ".3f"), r["check"] or "-")
    return table


def _caption(report: dict) -> str:
    lines = [f"proofs: {report['proofs_new']} proved now, {report['proofs_reused']} reused from the store "
             f"(verifier calls this run: {report['verifier_calls']})",
             f"store: {report['store']} · loop wall time {report['seconds']:.2f} s (wall)"]
    orders = {r["template"]: ",".join(r["design"]) for r in report["rows"] if r["design"]}
    lines += [f"design of {name}: ({order})" for name, order in orders.items()]
    seen: set[tuple[str, str]] = set()
    for r in report["rows"]:
        if r["note"] and (r["template"], r["note"]) not in seen:
            seen.add((r["template"], r["note"]))
            lines.append(f"{r['template'] or r['workload']}: {r['note']}")
    passed: dict[tuple[str, str], list[str]] = {}
    for p in report["passed_over"]:  # one line per template and reason, not per workload
        passed.setdefault((p["template"], p["why"]), []).append(p["workload"])
    lines += [f"passed over {name} for {', '.join(wls)}: {why}" for (name, why), wls in passed.items()]
    lines += [f"cost model of {name}: {src}" for name, src in report.get("calibrations", {}).items()]
    lines += [f"calibration update: {note}" for note in report.get("learned", [])]
    return "\n".join(lines)


@app.command()
@friendly
def run(
    workload: str = typer.Argument(..., help="an operator (gemm, rmsnorm, ...) with --shape, or a suite: tiling-study"),
    shape: Optional[list[str]] = typer.Option(None, "--shape", help="extents, e.g. 4096,4096,4096 or R=4096,C=1024 "
                                              f"({EXTENTS}); repeat"),
    dtype: str = typer.Option("fp32", help="element type: fp32 | tf32 | tf32x3 | bf16 | fp16"),
    chip: str = typer.Option("illustrative", help="chip spec name"),
    template: Optional[list[str]] = typer.Option(None, "--template",
                                                 help="a user template path/to/file.py:NAME; repeat"),
    store: Optional[str] = STORE,
    tier: Optional[str] = typer.Option(None, help="evaluator tier: auto | model | gpu "
                                       "(default: $FORMLOOP_TIER or auto)", callback=args.choice("--tier", TIERS)),
    json_out: bool = typer.Option(False, "--json", help="print the report as one JSON object"),
) -> None:
    """Draw covering templates, prove or reuse, solve, check, evaluate, store and report."""
    settings = load_settings().with_overrides(tier=tier, store_path=store)
    args = dict(dtype=dtype, chip=chip, templates=template or (), settings=settings)
    if json_out:
        print_json(api.run(workload, shape or (), **args))
        return
    with console.status("formloop run: starting", spinner="dots") as status:
        report = api.run(workload, shape or (), progress=lambda msg: status.update(f"formloop run: {msg}"), **args)
    # The table is wide; a pipe (80 columns by default) would fold every cell.
    Console(width=max(console.width, 160)).print(render_report(report))


@app.command()
@friendly
def demo(
    store: Optional[str] = STORE,
) -> None:
    """The loop on the GEMM workload of the tiling study (three shapes, illustrative chip)."""
    run(workload="tiling-study", shape=None, dtype="fp32", chip="illustrative", template=None, store=store,
        tier=None, json_out=False)
