"""`formloop population ls|show|designs|measurements|query|add|check|backup|export`: views of the store,
admission, and its upkeep (integrity report, backup, JSON export)."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from formloop import api
from formloop.cli import app, args
from formloop.cli.common import console, friendly, parse_options, print_json
from formloop.settings import load_settings

population_app = typer.Typer(no_args_is_help=True,
                             help="The population: stored templates, proofs, designs, measurements.")
app.add_typer(population_app, name="population")

STORE = typer.Option(None, "--store", help="population file (default: $FORMLOOP_STORE or .formloop/population.db)")
JSON = typer.Option(False, "--json", help="print JSON")
CHIP = typer.Option(None, "--chip", help="only this chip")
WORKLOAD = typer.Option(None, "--workload", help="a workload key, or an operator name (gemm) for all of its workloads")
TEMPLATE = typer.Option(None, "--template", help="a template name or hash prefix")
TIER = typer.Option(None, help="model | emulated | simulated | gpu",
                    callback=args.choice("--tier", ("model", "emulated", "simulated", "gpu")))
STATUSES = ("proved", "refuted", "unresolved")


def _query(store: str | None, kind: str, **filters) -> dict:
    return api.population_query(kind, settings=load_settings().with_overrides(store_path=store), **filters)


def _print_wide(table: Table) -> None:
    # Store tables are wide; a pipe (80 columns by default) would fold every cell.
    Console(width=max(console.width, 160)).print(table)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


@population_app.command("ls")
@friendly
def ls(store: Optional[str] = STORE, status: Optional[str] = typer.Option(None, help="proved | refuted | unresolved",
                                     callback=args.choice("--status", STATUSES)),
       json_out: bool = JSON) -> None:
    """Stored templates with their proof status and descriptor."""
    out = _query(store, "templates", status=status)
    if json_out:
        print_json(out["rows"])
        return
    table = Table(title=f"population · {out['store']} · schema {out['schema_version']}")
    for col in ("hash", "name", "options", "status", "algorithm", "reuse", "placement", "origin"):
        table.add_column(col)
    for r in out["rows"]:
        d = r["descriptor"]
        table.add_row(r["hash"], r["name"], ",".join(f"{k}={v}" for k, v in r["options"].items()), r["status"],
                      str(d.get("algorithm", "")), str(d.get("reuse", "")), str(d.get("placement", "")), r["origin"])
    _print_wide(table)


@population_app.command()
@friendly
def show(template: str = typer.Argument(..., help="template hash (or a unique prefix)"), store: Optional[str] = STORE,
         json_out: bool = JSON) -> None:
    """One template: scope, descriptor, certificates, counterexamples (with their replayable traces)."""
    out = _query(store, "template", template=template)["rows"][0]
    if json_out:
        print_json(out)
        return
    console.print(f"[bold]{out['name']}[/] {out['hash']} · {out['status']} · from {out['origin']} · "
                  f"stored {_when(out['created_at'])}")
    console.print(f"descriptor: {out['descriptor']}")
    console.print(f"scope: {out['scope']['rules']}")
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
    rows = _query(store, "designs", chip=chip, workload=workload, template=template)["rows"]
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
                 template: Optional[str] = TEMPLATE, tier: Optional[str] = TIER, json_out: bool = JSON) -> None:
    """Stored measurements (each with its chip, workload, tier and device)."""
    rows = _query(store, "measurements", chip=chip, workload=workload, template=template, tier=tier)["rows"]
    if json_out:
        print_json(rows)
        return
    table = Table(title="measurements")
    for col in ("id", "design", "template", "workload", "chip", "tier", "device", "latency (us)", "failure", "when"):
        table.add_column(col)
    for m in rows:
        lat = "-" if m["latency_s"] is None else f"{m['latency_s'] * 1e6:.1f}"
        table.add_row(str(m["id"]), str(m["design_id"]), m["template"], m["workload"], m["chip"], m["tier"],
                      m["device"], lat, m["failure"] or "-", _when(m["created_at"]))
    _print_wide(table)


@population_app.command()
@friendly
def query(kind: str = typer.Option("templates", help="templates | template | designs | measurements"),
          store: Optional[str] = STORE, chip: Optional[str] = CHIP, workload: Optional[str] = WORKLOAD,
          template: Optional[str] = TEMPLATE, status: Optional[str] = typer.Option(None, help="proved | refuted | "
                                                                                        "unresolved",
                                                                  callback=args.choice("--status", STATUSES)),
          tier: Optional[str] = TIER) -> None:
    """One query of the store as JSON, the answer the MCP tool population_query gives."""
    print_json(_query(store, kind, chip=chip, workload=workload, template=template, status=status, tier=tier))


@population_app.command()
@friendly
def add(spec: str = typer.Argument(..., help="a user template path/to/file.py:NAME, or a library template name"),
        option: Optional[list[str]] = typer.Option(None, "--option", help="a library template's option NAME=VALUE"),
        store: Optional[str] = STORE, json_out: bool = JSON) -> None:
    """Prove a template and admit it if K1-K3 hold; refuse it with the counterexample if not."""
    out = api.admit_template(spec, parse_options(option), settings=load_settings().with_overrides(store_path=store))
    if json_out:
        print_json(out)
    else:
        console.print(f"{out['template']} {out['hash']}: {out['status']} ({out['prove_seconds']:.2f} s, verifier)"
                      + (f"\n{out['note']}" if out["note"] else ""), highlight=False)
        for x in out["counterexamples"]:
            for step in x["trace"]:
                console.print(f"  {step}", highlight=False)
    if out["status"] != "proved":
        raise typer.Exit(1)


@population_app.command()
@friendly
def check(store: Optional[str] = STORE, quick: bool = typer.Option(False, "--quick",
                                                                   help="quick_check instead of integrity_check"),
          json_out: bool = JSON) -> None:
    """Integrity report of the store (reads only; never creates or repairs). Exit status 1 when a
    problem is found, 2 when there is no store."""
    rep = api.population_check(full=not quick, settings=load_settings().with_overrides(store_path=store))
    if json_out:
        print_json(rep)
    else:
        console.print(f"store {rep['path']}: {'ok' if rep['ok'] else 'PROBLEMS FOUND'} · schema "
                      f"{rep['schema_version']} (current {rep['current_schema']}) · {rep['check']} · "
                      f"{rep['size_bytes']} bytes · {rep['seconds']:.2f} s (wall)", highlight=False)
        console.print("rows: " + ", ".join(f"{k} {v}" for k, v in rep["counts"].items()), highlight=False)
        for label, items in (("problem", rep["problems"]), ("warning", rep["warnings"])):
            for text in items:
                console.print(f"{label}: {text}", highlight=False, soft_wrap=True)
    if not rep["ok"]:
        raise typer.Exit(1)


@population_app.command()
@friendly
def backup(dest: Path = typer.Argument(..., help="the copy: a new file (nothing is overwritten)",
                                       callback=args.new_file("DEST", replace=False)),
           store: Optional[str] = STORE, json_out: bool = JSON) -> None:
    """A consistent copy of the store by SQLite's backup API (safe while others write), checked after copying."""
    out = api.population_backup(str(dest), settings=load_settings().with_overrides(store_path=store))
    if json_out:
        print_json(out)
    else:
        console.print(f"backup {out['backup']}: {out['bytes']} bytes, schema {out['schema_version']}", highlight=False)


@population_app.command()
@friendly
def export(dest: Optional[Path] = typer.Argument(None, help="a new JSON file (default: print to stdout)",
                                                 callback=args.new_file("DEST", replace=False)),
           store: Optional[str] = STORE) -> None:
    """Every readable row of every table as JSON; unreadable rows are listed, never guessed."""
    out = api.population_export(str(dest) if dest is not None else None,
                                settings=load_settings().with_overrides(store_path=store))
    if dest is None:
        print_json(out)
    else:
        console.print(f"exported to {dest}: " + ", ".join(f"{k} {len(v)}" for k, v in out["tables"].items()),
                      highlight=False)
