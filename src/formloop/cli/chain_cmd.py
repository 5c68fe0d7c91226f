"""`formloop prove-chain`: check the five-step GEMM refinement chain, with or without proof reuse."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from formloop import api
from formloop.cli import app, args
from formloop.cli.common import console, friendly, print_json
from formloop.verify.proofstore import DEFAULT_PROOF_STORE

MAX_TRACE_ROWS = 12


@app.command("prove-chain")
@friendly
def prove_chain_cmd(
    chain: str = typer.Argument("gemm", help="refinement chain: gemm"),
    depth: int = typer.Option(5, help="check steps 1..depth (1..5)", parser=args.int_range("--depth", 1, 5)),
    mode: str = typer.Option("full", help="full (recheck all) | node (reuse unchanged proofs) | "
                                          "query (node + stored UNSAT queries)"),
    fault: str = typer.Option(None, help="inject a fault, STEP:NAME, e.g. 4:wrong_generation"),
    shapes: str = typer.Option("3,4", help="bounded model sizes n (tiles / requests), comma-separated"),
    store: Path = typer.Option(None, help=f"proof store, SQLite (default {DEFAULT_PROOF_STORE})"),
    list_faults: bool = typer.Option(False, "--list-faults", help="list the injectable faults and exit"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Prove the GEMM refinement chain step by step and compose the local proofs."""
    if list_faults:
        faults = api.chain_faults()
        if json_out:
            print_json(faults)
            return
        for f in faults["faults"]:
            console.print(f"{f['fault']}  ({f['step_name']}) {f['doc']}; caught by {f['caught_by']}", highlight=False)
        return
    report = api.prove_chain(chain, depth=depth, mode=mode, fault=fault, shapes=shapes,
                             store=str(store) if store is not None else None)
    if json_out:
        print_json(report)
        return
    table = Table(title=f"prove-chain {chain} · depth {depth} · mode {mode} · shapes {shapes}"
                        + (f" · fault {fault}" if fault else ""))
    for col in ("step", "verdict", "proved / obligations", "solver queries (count, z3)", "reused proofs"):
        table.add_column(col)
    for s in report["steps"]:
        table.add_row(f"{s['step']} {s['name']}", s["verdict"], f"{s['proved']} / {s['obligations']}",
                      str(s["queries"]), str(s["reused_nodes"]))
    console.print(table)
    for c in report["side_conditions"]:
        if c["verdict"] != "proved":
            console.print(f"side condition {c['condition']}: {c['verdict']} {c['reason']}", highlight=False)
    console.print(f"verdict: [bold]{report['verdict']}[/]; solver queries: {report['queries']} (count, z3), "
                  f"reused queries: {report['reused_queries']} (count, store); wall time: "
                  f"{report['seconds'] * 1e3:.1f} ms (wall, this machine); assumptions of the result: "
                  f"{', '.join(report['assumptions']) or 'none'}", highlight=False)
    for s in report["steps"]:
        for cx in s["counterexamples"][:2]:
            console.print(f"\ncounterexample to {cx['obligation']} (step {s['step']}): {cx['replay']}", highlight=False)
            console.print(f"  witness: {cx['witness']}", highlight=False)
            for row in cx["trace"][:MAX_TRACE_ROWS]:
                console.print(f"  replay {row}", highlight=False)
            if len(cx["trace"]) > MAX_TRACE_ROWS:
                console.print(f"  ... {len(cx['trace']) - MAX_TRACE_ROWS} more rows (--json has the whole trace)")
