"""`formloop prove` and `formloop verify`: template proofs, fault and schedule checks, rechecks.

Every obligation prints with its verdict and time; every counterexample prints its replay and,
for a slot schedule, the replayed interleaving as a timeline with one column per warp."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from formloop.cli import app
from formloop.cli.common import console, friendly, parse_shape, print_json
from formloop.errors import InvalidInput
from formloop.library import get_template
from formloop.verify import Certificate, ObligationResult, Verdict, prove_template
from formloop.verify.replay import replay_trace

STYLE = {Verdict.PROVED: "green", Verdict.COUNTEREXAMPLE: "bold red", Verdict.UNRESOLVED: "yellow"}
TILING = "gemm-tiling"


def _program_module(template: str):
    if template != TILING:
        get_template(template)  # unknown names fail here with the list of known ones
        raise InvalidInput("template", template, [TILING], fix="faults and schedules are defined for gemm-tiling only")
    from formloop.library import gemm_tiling_program
    return gemm_tiling_program


def result_json(r: ObligationResult) -> dict:
    """The JSON form of one obligation (the query itself is long; its text stays in certificates)."""
    d = r.as_dict()
    d.pop("query", None)
    return d


def render_timeline(r: ObligationResult) -> Table | None:
    """A replayed schedule counterexample as a timeline: one row per event, one column per warp."""
    sched = (r.details or {}).get("schedule")
    if not r.trace or not sched:
        return None
    replay = replay_trace(r.trace, S=sched["S"], P=sched["P"], beta=sched["beta"], warps=sched["warps"],
                          phases=sched["phases"], leading=sched["leading"])
    table = Table(title=f"replayed interleaving · {r.obligation} · {sched['warps']} warps × {sched['phases']} phases",
                  title_justify="left")
    table.add_column("step", justify="right", style="dim")
    for w in range(sched["warps"]):
        table.add_column(f"warp {w}")
    for n, ev in enumerate(r.trace):
        kind, w = ev[0], ev[1]
        if kind == "load":
            label = Text(f"LOAD k{ev[2]} → slot {ev[3]}")
        elif kind == "compute":
            label = Text(f"COMP k{ev[2]} ← slot {ev[3]}")
        else:
            label = Text(f"barrier {ev[2]}{ev[3]}", style="cyan")
        note = replay.notes[n] if n < len(replay.notes) else ""
        if note:
            label.append(f"  {note}", style="bold red" if kind == "compute" else "magenta")
        if kind == "compute" and note:
            label = Text("✗ ", style="bold red") + label
        cells = [""] * sched["warps"]
        cells[w] = label
        table.add_row(str(n), *cells)
    return table


def print_results(results: Sequence[ObligationResult], title: str, *, group: bool = False) -> None:
    table = Table(title=title, title_justify="left")
    for col, just in (("obligation", "left"), ("verdict", "left"), ("time (ms, z3 + replay)", "right"), ("replay / reason", "left")):
        table.add_column(col, justify=just, overflow="fold")
    rows: list[tuple[str, Verdict, float, str]] = []
    if group:
        groups: dict[str, list[ObligationResult]] = {}
        for r in results:
            groups.setdefault(r.obligation.split("[")[0], []).append(r)
        for name, rs in groups.items():
            counts = {v: sum(1 for r in rs if r.verdict is v) for v in Verdict}
            verdict = Verdict.COUNTEREXAMPLE if counts[Verdict.COUNTEREXAMPLE] else \
                (Verdict.PROVED if counts[Verdict.PROVED] == len(rs) else Verdict.UNRESOLVED)
            summary = ", ".join(f"{n} {v.value}" for v, n in counts.items() if n)
            rows.append((f"{name} ({len(rs)} quer{'y' if len(rs) == 1 else 'ies'})", verdict, sum(r.seconds for r in rs), summary))
    else:
        rows = [(r.obligation, r.verdict, r.seconds, r.replay or r.reason) for r in results]
    for name, verdict, seconds, text in rows:
        table.add_row(name, Text(verdict.value, style=STYLE[verdict]), f"{seconds * 1e3:.1f}", text)
    console.print(table)
    for r in results:
        if r.verdict is Verdict.PROVED or (not group and not r.trace):
            continue
        if group:
            console.print(Text(f"{r.obligation}: {r.verdict.value}", style=STYLE[r.verdict]))
            for label, text in (("witness", r.witness), ("replay", r.replay), ("reason", r.reason)):
                if text:
                    console.print(f"  {label}: {text}", highlight=False, soft_wrap=True)
        timeline = render_timeline(r)
        if timeline is not None:
            console.print(timeline)


@app.command()
@friendly
def prove(
    template: str = typer.Argument(..., help="template name, e.g. gemm-tiling"),
    pre: str = typer.Option("exact", help="contract: exact | strong | weak"),
    dtype: str = typer.Option("fp32", help="element type: fp32 | tf32 | bf16 | fp16"),
    timeout: float = typer.Option(10.0, help="per-query solver timeout, seconds"),
    out: Path = typer.Option(None, help="write the certificate (JSON) here"),
    json_out: bool = typer.Option(False, "--json", help="print the obligations as a JSON list"),
) -> None:
    """Prove a template once for its family: K1, K3 and its index and schedule obligations."""
    if timeout <= 0:
        raise InvalidInput("timeout", timeout, "a positive number of seconds")
    t = get_template(template, pre=pre, dtype=dtype)
    cert = prove_template(t, timeout_s=timeout)
    if out is not None:
        out.write_text(cert.to_json())
    if json_out:
        print_json([result_json(r) for r in cert.obligations])
        return
    print_results(cert.obligations, f"prove {template} · {pre} contract · hash {cert.template_hash}", group=True)
    verdict = cert.verdict
    console.print(Text(f"certificate: {verdict.value}", style=STYLE[verdict]) +
                  Text(f" · {len(cert.obligations)} obligations in {cert.seconds:.2f} s (wall) · {cert.solver}"
                       + (f" · written to {out}" if out else "")))
    if cert.fixed:
        console.print(f"fixed for decidability: {cert.fixed_reason}", highlight=False, soft_wrap=True)


@app.command()
@friendly
def verify(
    template: str = typer.Argument(None, help="template name (gemm-tiling); omit with --recheck"),
    fault: str = typer.Option(None, help="inject a named fault into the proved 1000^3 design"),
    schedule: str = typer.Option(None, help="one slot schedule S,P,BETA"),
    design: str = typer.Option(None, help="one design Tm,Tn,Tk,S,P,BETA (with --shape)"),
    shape: str = typer.Option("1000,1000,1000", help="GEMM extents M,N,K for --design"),
    warps: int = typer.Option(2, help="warps in the bounded event model"),
    phases: int = typer.Option(5, help="reduction phases in the bounded event model"),
    recheck: Path = typer.Option(None, help="re-run the proof behind a certificate (JSON) and compare"),
    timeout: float = typer.Option(10.0, help="per-query solver timeout, seconds"),
    json_out: bool = typer.Option(False, "--json", help="print the obligations as a JSON list"),
) -> None:
    """Check one fault, one schedule or one design against the obligations; or recheck a certificate."""
    chosen = [n for n, v in (("--fault", fault), ("--schedule", schedule), ("--design", design), ("--recheck", recheck)) if v is not None]
    if len(chosen) != 1:
        raise InvalidInput("mode", " ".join(chosen) or "none", ["--fault NAME", "--schedule S,P,BETA",
                                                                 "--design Tm,Tn,Tk,S,P,BETA", "--recheck CERT.json"],
                           fix="give exactly one")
    if recheck is not None:
        return _recheck(recheck, timeout, json_out)
    if template is None:
        raise InvalidInput("template", None, [TILING])
    prog = _program_module(template)
    if fault is not None:
        if fault not in prog.FAULTS:
            raise InvalidInput("fault", fault, sorted(prog.FAULTS))
        results = prog.check_fault(fault, warps=warps, phases=phases, timeout_s=timeout)
        what, expect = prog.FAULTS[fault]
        title = f"verify {template} · fault {fault}: {what} · expected to fail: {', '.join(expect)}"
    elif schedule is not None:
        S, P, beta = _ints(schedule, 3)
        results = prog.verify_schedule(S, P, beta, warps=warps, phases=phases, timeout_s=timeout)
        title = f"verify {template} · schedule S={S}, P={P}, beta={beta} · {warps} warps × {phases} phases"
    else:
        values = _ints(design, 6)
        assignment = dict(zip(("Tm", "Tn", "Tk", "S", "P", "beta"), values))
        dims = parse_shape(shape)
        results = prog.check_design(assignment, dims, warps=warps, phases=phases, timeout_s=timeout)
        title = f"verify {template} · design {tuple(values)} · shape {dims}"
    if json_out:
        print_json([result_json(r) for r in results])
        return
    print_results(results, title)


def _ints(text: str, n: int) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise InvalidInput("values", text, f"{n} integers separated by commas") from None
    if len(values) != n or any(v < 0 for v in values):
        raise InvalidInput("values", text, f"{n} non-negative integers separated by commas")
    return values


def _recheck(path: Path, timeout: float, json_out: bool) -> None:
    if not path.is_file():
        raise InvalidInput("--recheck", str(path), "a certificate file written by `formloop prove --out`")
    old = Certificate.from_json(path.read_text())
    result = old.recheck(get_template(old.template, **dict(old.options)), timeout_s=timeout)
    if json_out:
        print_json({"agrees": result.agrees, "changes": list(result.changes), "old_verdict": old.verdict.value,
                    "new_verdict": result.new.verdict.value, "template_hash": result.new.template_hash,
                    "seconds": result.new.seconds})
        return
    if result.agrees:
        console.print(Text(f"recheck agrees: {old.template} ({old.template_hash}) is still {old.verdict.value}; "
                           f"{len(old.obligations)} obligations re-run in {result.new.seconds:.2f} s (wall)", style="green"))
    else:
        console.print(Text(f"recheck differs from {path}:", style="bold red"))
        for change in result.changes:
            console.print(f"  {change}", highlight=False)
