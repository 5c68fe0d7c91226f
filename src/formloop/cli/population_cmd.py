"""`formloop population ls|show|designs|measurements|add`: views of the store, and admission."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from formloop.cli import app
from formloop.cli.common import console, friendly, print_json

population_app = typer.Typer(no_args_is_help=True, help="The population: stored templates, proofs, designs, measurements.")
app.add_typer(population_app, name="population")

STORE = typer.Option(None, "--store", help="population file (default: $FORMLOOP_STORE or .formloop/population.db)")
JSON = typer.Option(False, "--json", help="print JSON")
CHIP = typer.Option(None, "--chip", help="only this chip")
WORKLOAD = typer.Option(None, "--workload", help="a workload key, or an operator name (gemm) for all of its workloads")
TEMPLATE = typer.Option(None, "--template", help="a template name or hash prefix")


def _open(store):
    from formloop.population import Population

    return Population(store) if store else Population()


def _print_wide(table: Table) -> None:
    # Store tables are wide; a pipe (80 columns by default) would fold every cell.
    Console(width=max(console.width, 160)).print(table)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


@population_app.command("ls")
@friendly
def ls(store: Optional[str] = STORE, status: Optional[str] = typer.Option(None, help="proved | refuted | unresolved"),
       json_out: bool = JSON) -> None:
    """Stored templates with their proof status and descriptor."""
    from formloop.errors import InvalidInput

    if status not in (None, "proved", "refuted", "unresolved"):
        raise InvalidInput("status", status, ("proved", "refuted", "unresolved"))
    with _open(store) as pop:
        recs = pop.templates(status=status)
        if json_out:
            print_json([r.as_dict() for r in recs])
            return
        table = Table(title=f"population · {pop.path} · schema {pop.schema_version}")
        for col in ("hash", "name", "options", "status", "algorithm", "reuse", "placement", "origin"):
            table.add_column(col)
        for r in recs:
            d = r.descriptor
            table.add_row(r.hash, r.name, ",".join(f"{k}={v}" for k, v in r.options.items()), r.status,
                          str(d.get("algorithm", "")), str(d.get("reuse", "")), str(d.get("placement", "")), r.origin)
        _print_wide(table)


@population_app.command()
@friendly
def show(template: str = typer.Argument(..., help="template hash (or a unique prefix)"), store: Optional[str] = STORE,
         json_out: bool = JSON) -> None:
    """One template: scope, descriptor, certificates, counterexamples (with their replayable traces)."""
    with _open(store) as pop:
        rec = pop.template(template)
        out = {**rec.as_dict(), "certificates": pop.certificates(rec.hash), "counterexamples": pop.counterexamples(rec.hash),
               "designs": len(pop.designs(template=rec.hash))}
    if json_out:
        print_json(out)
        return
    console.print(f"[bold]{rec.name}[/] {rec.hash} · {rec.status} · from {rec.origin} · stored {_when(rec.created_at)}")
    console.print(f"descriptor: {dict(rec.descriptor)}")
    console.print(f"scope: {rec.scope['rules']}")
    for c in out["certificates"]:
        console.print(f"certificate #{c['id']}: {c['verdict']} · {c['toolchain']} · {c['seconds']:.2f} s (verifier)")
    for x in out["counterexamples"]:
        console.print(f"counterexample to {x['obligation']}: witness {x['witness']}")
        for step in x["trace"]:
            console.print(f"  {step}", highlight=False)
        if x["replay"]:
            console.print(f"  replay: {x['replay']}", highlight=False)
    console.print(f"designs stored: {out['designs']}")


@population_app.command()
@friendly
def designs(store: Optional[str] = STORE, chip: Optional[str] = CHIP, workload: Optional[str] = WORKLOAD,
            template: Optional[str] = TEMPLATE, json_out: bool = JSON) -> None:
    """Stored designs (each with its chip and workload)."""
    with _open(store) as pop:
        rows = pop.designs(chip=chip, workload=workload, template=template)
    if json_out:
        print_json(rows)
        return
    table = Table(title="designs (predicted: model)")
    for col in ("id", "template", "workload", "chip", "design", "predicted", "solver"):
        table.add_column(col)
    for d in rows:
        table.add_row(str(d["id"]), d["template"], d["workload"], d["chip"],
                      ",".join(f"{k}={v}" for k, v in d["assignment"].items()),
                      f"{d['predicted']:.1f} {d['unit']}" if d["predicted"] is not None else "-", d["solver"])
    _print_wide(table)


@population_app.command()
@friendly
def measurements(store: Optional[str] = STORE, chip: Optional[str] = CHIP, workload: Optional[str] = WORKLOAD,
                 template: Optional[str] = TEMPLATE, tier: Optional[str] = typer.Option(None, help="model | emulated | simulated | gpu"),
                 json_out: bool = JSON) -> None:
    """Stored measurements (each with its chip, workload, tier and device)."""
    with _open(store) as pop:
        rows = pop.measurements(chip=chip, workload=workload, template=template, tier=tier)
    if json_out:
        print_json(rows)
        return
    table = Table(title="measurements")
    for col in ("id", "design", "template", "workload", "chip", "tier", "device", "latency (us)", "failure", "when"):
        table.add_column(col)
    for m in rows:
        lat = "-" if m["latency_s"] is None else f"{m['latency_s'] * 1e6:.1f}"
        table.add_row(str(m["id"]), str(m["design_id"]), m["template"], m["workload"], m["chip"], m["tier"], m["device"],
                      lat, m["failure"] or "-", _when(m["created_at"]))
    _print_wide(table)


@population_app.command()
@friendly
def add(spec: str = typer.Argument(..., help="a user template path/to/file.py:NAME"), store: Optional[str] = STORE,
        json_out: bool = JSON) -> None:
    """Prove a user template and admit it if K1-K3 hold; refuse it with the counterexample if not."""
    from formloop.flow import Candidate, admit, default_prover
    from formloop.settings import load_settings
    from formloop.library.user import file_origin, load_user_template

    settings = load_settings()
    c = Candidate(load_user_template(spec), file_origin(spec))
    with _open(store) as pop:
        status, note, seconds = admit(pop, c, default_prover(), settings.prove_timeout_s)
        counterexamples = pop.counterexamples(c.template.content_hash) if status == "refuted" else []
    out = {"template": c.template.name, "hash": c.template.content_hash, "status": status, "note": note,
           "prove_seconds": seconds, "counterexamples": counterexamples}
    if json_out:
        print_json(out)
    else:
        console.print(f"{c.template.name} {c.template.content_hash}: {status} ({seconds:.2f} s, verifier)"
                      + (f"\n{note}" if note else ""), highlight=False)
        for x in counterexamples:
            for step in x["trace"]:
                console.print(f"  {step}", highlight=False)
    if status != "proved":
        raise typer.Exit(1)
