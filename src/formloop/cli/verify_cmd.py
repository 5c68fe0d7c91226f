"""`formloop prove` and `formloop verify`: template proofs, fault and schedule checks, rechecks.

Every obligation prints with its verdict and time; every counterexample prints its replay and,
for a slot schedule, the replayed interleaving as a timeline with one column per warp."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from formloop import api
from formloop.cli import app, args
from formloop.cli.common import SHAPE_HELP, console, friendly, print_json

STYLE = {"proved": "green", "counterexample": "bold red", "unresolved": "yellow"}
VERDICTS = tuple(STYLE)


def render_timeline(r: dict) -> Table | None:
    """A replayed schedule counterexample as a timeline: one row per event, one column per warp."""
    sched = (r.get("details") or {}).get("schedule")
    if not r["trace"] or not sched:
        return None
    trace, notes = r["trace"], r.get("replay_notes", [])
    table = Table(title=f"replayed interleaving · {r['obligation']} · {sched['warps']} warps × "
                        f"{sched['phases']} phases", title_justify="left")
    table.add_column("step", justify="right", style="dim")
    for w in range(sched["warps"]):
        table.add_column(f"warp {w}")
    for n, ev in enumerate(trace):
        kind, w = ev[0], ev[1]
        if kind == "load":
            label = Text(f"LOAD k{ev[2]} → slot {ev[3]}")
        elif kind == "compute":
            label = Text(f"COMP k{ev[2]} ← slot {ev[3]}")
        else:
            label = Text(f"barrier {ev[2]}{ev[3]}", style="cyan")
        note = notes[n] if n < len(notes) else ""
        if note:
            label.append(f"  {note}", style="bold red" if kind == "compute" else "magenta")
        if kind == "compute" and note:
            label = Text("✗ ", style="bold red") + label
        cells = [""] * sched["warps"]
        cells[w] = label
        table.add_row(str(n), *cells)
    return table


def print_results(results: Sequence[dict], title: str, *, group: bool = False) -> None:
    table = Table(title=title, title_justify="left")
    for col, just in (("obligation", "left"), ("verdict", "left"), ("time (ms, z3 + replay)", "right"),
                      ("replay / reason", "left")):
        table.add_column(col, justify=just, overflow="fold")
    rows: list[tuple[str, str, float, str]] = []
    if group:
        groups: dict[str, list[dict]] = {}
        for r in results:
            groups.setdefault(r["obligation"].split("[")[0], []).append(r)
        for name, rs in groups.items():
            counts = {v: sum(1 for r in rs if r["verdict"] == v) for v in VERDICTS}
            verdict = "counterexample" if counts["counterexample"] else \
                ("proved" if counts["proved"] == len(rs) else "unresolved")
            summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
            rows.append((f"{name} ({len(rs)} quer{'y' if len(rs) == 1 else 'ies'})", verdict,
                         sum(r["seconds"] for r in rs), summary))
    else:
        rows = [(r["obligation"], r["verdict"], r["seconds"], r["replay"] or r["reason"]) for r in results]
    for name, verdict, seconds, text in rows:
        table.add_row(name, Text(verdict, style=STYLE[verdict]), f"{seconds * 1e3:.1f}", text)
    console.print(table)
    for r in results:
        if r["verdict"] == "proved" or (not group and not r["trace"]):
            continue
        if group:
            console.print(Text(f"{r['obligation']}: {r['verdict']}", style=STYLE[r["verdict"]]))
            for label, text in (("witness", r["witness"]), ("replay", r["replay"]), ("reason", r["reason"])):
                if text:
                    console.print(f"  {label}: {text}", highlight=False, soft_wrap=True)
        timeline = render_timeline(r)
        if timeline is not None:
            console.print(timeline)


@app.command()
@friendly
def prove(
    template: str = typer.Argument(..., help="template name, e.g. gemm-tiling, or path/to/file.py:NAME"),
    pre: str = typer.Option(None, help="contract of gemm-tiling: exact | strong | weak (default exact)"),
    dtype: str = typer.Option(None, help="element type: fp32 | tf32 | tf32x3 | bf16 | fp16 (templates with a dtype "
                                         "option; default: the template's)"),
    timeout: float = typer.Option(10.0, help=f"per-query solver timeout, seconds, {args.SOLVER_TIMEOUT_RANGE}",
                                  parser=args.solver_timeout),
    out: Path = typer.Option(None, help="write the certificate (JSON) here (a new or replaced file)",
                             callback=args.new_file("--out")),
    json_out: bool = typer.Option(False, "--json", help="print the obligations as a JSON list"),
) -> None:
    """Prove a template once for its family: K1, K3 and its index and schedule obligations."""
    cert = api.prove_template(template, {"pre": pre} if pre is not None else None, dtype=dtype, timeout_s=timeout,
                              out=str(out) if out is not None else None)
    if json_out:
        print_json(cert["obligations"])
        return
    print_results(cert["obligations"], f"prove {template} · {pre or cert['options'].get('pre', 'default')} contract"
                                        f" · hash {cert['hash']}", group=True)
    verdict = cert["verdict"]
    console.print(Text(f"certificate: {verdict}", style=STYLE[verdict]) +
                  Text(f" · {len(cert['obligations'])} obligations in {cert['seconds']:.2f} s (wall) · "
                       f"{cert['solver']}" + (f" · written to {out}" if out else "")))
    if cert["fixed"]:
        console.print(f"fixed for decidability: {cert['fixed_reason']}", highlight=False, soft_wrap=True)


@app.command()
@friendly
def verify(
    template: str = typer.Argument(None, help="template name (gemm-tiling); omit with --recheck"),
    fault: str = typer.Option(None, help="inject a named fault into the proved 1000^3 design"),
    schedule: str = typer.Option(None, help="one slot schedule S,P,BETA"),
    design: str = typer.Option(None, help="one design Tm,Tn,Tk,S,P,BETA (with --shape)"),
    shape: str = typer.Option("1000,1000,1000", help=f"GEMM {SHAPE_HELP}, for --design"),
    warps: int = typer.Option(2, help=f"warps in the bounded event model, {args.WARPS_RANGE}", parser=args.warps),
    phases: int = typer.Option(5, help=f"reduction phases in the bounded event model, {args.PHASES_RANGE}",
                               parser=args.phases),
    recheck: Path = typer.Option(None, help="re-run the proof behind a certificate (JSON) and compare; exit 1 "
                                            "on any difference", callback=args.existing_file("--recheck", text=True)),
    timeout: float = typer.Option(10.0, help=f"per-query solver timeout, seconds, {args.SOLVER_TIMEOUT_RANGE}",
                                  parser=args.solver_timeout),
    json_out: bool = typer.Option(False, "--json", help="print the obligations as a JSON list"),
) -> None:
    """Check one fault, one schedule or one design against the obligations; or recheck a certificate."""
    out = api.verify(template, fault=fault, schedule=schedule, design=design,
                     recheck=str(recheck) if recheck is not None else None, shape=shape, warps=warps, phases=phases,
                     timeout_s=timeout)
    if out["mode"] == "recheck":
        return _print_recheck(out, recheck, json_out)
    if json_out:
        print_json(out["obligations"])
        return
    print_results(out["obligations"], out["title"])


def _print_recheck(result: dict, path: Path, json_out: bool) -> None:
    """Exit status 1 on any difference (each names the field that differs)."""
    if json_out:
        print_json({k: result[k] for k in ("agrees", "changes", "old_verdict", "new_verdict", "template_hash",
                                           "seconds")})
        if not result["agrees"]:
            raise typer.Exit(1)
        return
    if result["agrees"]:
        console.print(Text(f"recheck agrees: {result['template']} ({result['template_hash']}) is still "
                           f"{result['old_verdict']}; {result['obligations']} obligations re-run in "
                           f"{result['seconds']:.2f} s (wall)", style="green"))
    else:
        console.print(Text(f"recheck differs from {path}:", style="bold red"))
        for change in result["changes"]:
            console.print(f"  {change}", highlight=False)
        raise typer.Exit(1)
