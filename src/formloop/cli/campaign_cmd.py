"""`formloop harness`, `integrity`, `schedule`, `campaign`, `synth-log`: kernel problems and campaigns."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from formloop.cli import app
from formloop.cli.common import console, friendly, print_json
from formloop.errors import InvalidInput


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds * 1e9:.4g} ns"


def _floats(text: str, field: str, *, integer: bool = False) -> list:
    """'0,0.1,off' -> [0.0, 0.1, None] ('off' disables a rule)."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if part in ("off", "none", ""):
            out.append(None)
            continue
        try:
            out.append(int(part) if integer else float(part))
        except ValueError:
            raise InvalidInput(field, part, "comma-separated " + ("integers" if integer else "numbers") + " or 'off'") from None
    return out


@app.command()
@friendly
def harness(
    problem: Path = typer.Argument(..., help="problem file (Model, get_inputs, get_init_inputs)"),
    candidate: Path = typer.Argument(..., help="candidate file defining ModelNew"),
    sets: int = typer.Option(3, help="fresh random input sets for the correctness check"),
    seed: Optional[int] = typer.Option(None, help="seed of the input sets (default: a secret random one, printed)"),
    time_it: bool = typer.Option(True, "--time/--no-time", help="time reference and candidate"),
    chip: Optional[str] = typer.Option(None, help="chip for the SOL floor, e.g. h100"),
    clock_mhz: Optional[float] = typer.Option(None, help="locked clock for the SOL floor"),
    dtype: Optional[str] = typer.Option(None, help="dtype for the SOL floor (default: the problem's)"),
    rtol: Optional[float] = typer.Option(None, help="override the dtype's relative tolerance"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Check a candidate against a problem's reference: correctness on fresh inputs (poisoned
    allocations, fp64 truth, magnitude-aware tolerance), input immutability, timing, speedup and
    SOL fraction. Without a GPU, times are host wall time labelled 'cpu' and no SOL fraction is given.
    Exit status 1 when the candidate is incorrect."""
    from formloop.measure.harness import evaluate

    res = evaluate(problem, candidate, sets=sets, seed=seed, timing=time_it, chip=chip, dtype=dtype,
                   clock_mhz=clock_mhz, rtol=rtol)
    if json_out:
        print_json(res.as_dict())
        return
    t = Table(title=f"harness: {res.candidate} vs {res.problem} (device {res.device}, seed {res.seed})")
    for col in ("input set", "result", "worst error / allowed", "||c-t||/||t||", "detail"):
        t.add_column(col)
    for i, c in enumerate(res.sets):
        t.add_row(str(i), "[green]ok[/]" if c.ok else "[red]FAIL[/]", f"{c.max_ratio:.3g}", f"{c.norm_rel_error:.2e}", c.reason)
    console.print(t)
    console.print(f"weights: {res.weights}; inputs unchanged: {not res.mutated}"
                  + (f" ([red]mutated: {res.mutated}[/])" if res.mutated else ""))
    for note in res.notes:
        console.print(f"note: {note}")
    if res.cand_time:
        src = res.cand_time.source
        console.print(f"reference {_ms(res.ref_time.seconds)}, candidate {_ms(res.cand_time.seconds)} "
                      f"(median of {res.cand_time.reps}, source: {src}{'; ' + res.cand_time.note if res.cand_time.note else ''})")
        console.print(f"speedup: {res.speedup:.3g}x reference (source: {src})")
    elif time_it:
        console.print("not timed: the candidate is incorrect")
    if chip:
        console.print(f"SOL floor: {_ms(res.sol_floor_s)} ({res.sol_note}); SOL fraction: "
                      + (f"{res.sol_fraction:.3f} (gpu)" if res.sol_fraction is not None else "n/a (needs a gpu timing)"))
    console.print(f"[bold]{'correct' if res.correct else 'INCORRECT'}[/]; replay: formloop harness {problem} {candidate} --seed {res.seed}")
    if not res.correct:
        raise typer.Exit(1)


@app.command()
@friendly
def integrity(
    problem: Path = typer.Argument(..., help="problem file"),
    candidate: Path = typer.Argument(..., help="candidate file defining ModelNew"),
    seed: Optional[int] = typer.Option(None, help="seed of all probe inputs (default: secret random, printed)"),
    probe: Optional[list[str]] = typer.Option(None, help="run only these probes (repeatable): static, trivial, unseen, "
                                              "shapes, memory, cache, mutation, skipped, side-stream, launch-failure"),
    chip: Optional[str] = typer.Option(None, help="add the SOL-ceiling check against this chip (GPU timings only)"),
    clock_mhz: Optional[float] = typer.Option(None, help="locked clock for the SOL floor"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Integrity verdict for one attempt (clean | minor | torch-only | gaming) with the evidence of
    every detector: static torch-only scan, cached or hard-coded results, skipped computation, input
    mutation, uninitialized or recycled memory, work after return, swallowed launch failures and
    (with --chip and a GPU) the SOL ceiling. Exit status 1 when the attempt is not accepted."""
    from formloop.measure.harness import evaluate
    from formloop.measure.probes import check_integrity
    from formloop.measure.integrity import generous_floor_s

    timing = floor = None
    if chip:
        from formloop.sol.auto import sol_for_problem
        from formloop.sol.problem import load_problem

        floor, _ = generous_floor_s(sol_for_problem(load_problem(problem), chip, clock_mhz=clock_mhz))
        timing = evaluate(problem, candidate, sets=1, seed=seed).cand_time
    report = check_integrity(problem, candidate, seed=seed, probes=tuple(probe) if probe else None,
                             timing=timing, sol_floor_s=floor)
    if json_out:
        print_json(report.as_dict())
    else:
        t = Table(title=f"integrity: {report.candidate} vs {report.problem} (seed {report.seed})")
        for col in ("detector", "result", "finding"):
            t.add_column(col)
        for c in report.checks:
            sev = c.details.get("severity", "")
            res = f"[red]FLAG {sev}[/]" if c.verdict.value == "counterexample" else c.reason.split(":")[0]
            t.add_row(c.obligation, res, c.reason if c.verdict.value == "counterexample" else c.reason.partition(": ")[2])
        console.print(t)
        for c in report.flags():
            steps = " -> ".join(map(str, c.trace)) if c.trace else f"evidence {c.witness}"
            console.print(f"[bold]{c.obligation}[/]: {steps}\n  replay: formloop integrity {problem} {candidate} "
                          f"--seed {report.seed} --probe {c.details.get('probe', 'static')}", highlight=False)
        console.print(f"correct on fresh inputs: {report.correct}; verdict: [bold]{report.verdict.value}[/]; "
                      f"accepted: {report.accepted}")
    if not report.accepted:
        raise typer.Exit(1)


@app.command()
@friendly
def schedule(
    log: Path = typer.Argument(..., help="attempt log (JSONL; see formloop.campaign.replaylog)"),
    eps: Optional[float] = typer.Option(None, help="SOL-gap threshold: stop when t_best <= (1+eps) t_SOL (and the reference is beaten)"),
    window: Optional[int] = typer.Option(None, help="no-progress window: stop after this many attempts without improvement"),
    sweep_grid: bool = typer.Option(False, "--sweep", help="sweep eps x window and print the Pareto front"),
    eps_grid: str = typer.Option("off,0,0.1,0.25,0.5,1,2", help="eps values for --sweep ('off' disables the rule)"),
    window_grid: str = typer.Option("off,16,12,8,4,2", help="window values for --sweep"),
    min_retention: float = typer.Option(0.95, help="retention constraint for the recommended policy"),
    unfiltered: bool = typer.Option(False, help="count attempts integrity flagged (default: filtered)"),
    plot: Optional[Path] = typer.Option(None, help="directory for pareto.png"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Replay an attempt log under SOL-guided stopping: token savings, geomean speedup retention
    and efficiency gain against fixed allocation (every logged attempt spent)."""
    from formloop.campaign.replaylog import load_log
    from formloop.campaign.schedule import Policy, best_policy, pareto_front, replay, sweep

    data = load_log(log)
    filtered = not unfiltered
    src = f"source: replay of {log.name} (runtimes as logged; {'integrity-filtered' if filtered else 'unfiltered'})"
    if not sweep_grid:
        r = replay(data, Policy(eps, window), filtered=filtered)
        if json_out:
            print_json({**r.as_dict(per_problem=True), "source": src})
            return
        console.print(f"{r.policy.label}: tokens {r.tokens_used} of {r.tokens_fixed} (savings {100 * r.savings:.1f}%), "
                      f"geomean speedup {r.geomean_speedup:.3g}x vs {r.geomean_fixed:.3g}x fixed "
                      f"(retention {100 * r.retention:.1f}%), efficiency gain {r.efficiency_gain:.2f}x; stops {r.stops}")
        console.print(src)
        return
    results = sweep(data, _floats(eps_grid, "eps grid"), _floats(window_grid, "window grid", integer=True), filtered=filtered)
    front, best = pareto_front(results), best_policy(results, min_retention)
    if plot:
        from formloop.campaign.plots import plot_pareto
        plot_pareto(results, plot / "pareto.png")
    if json_out:
        print_json({"sweep": [r.as_dict() for r in results], "pareto": [r.policy.label for r in front],
                    "best": best.as_dict() if best else None, "min_retention": min_retention, "source": src})
        return
    t = Table(title=f"eps x window sweep on {log.name} ({len(data.problems)} problems); * = Pareto front")
    for col in ("policy", "token savings %", "geomean retention %", "efficiency gain x", "stops"):
        t.add_column(col)
    on_front = {id(r) for r in front}
    for r in sorted(results, key=lambda r: (r.savings, r.retention)):
        t.add_row(("* " if id(r) in on_front else "  ") + r.policy.label, f"{100 * r.savings:.1f}",
                  f"{100 * r.retention:.1f}", f"{r.efficiency_gain:.2f}", str(r.stops))
    console.print(t)
    console.print(f"best with retention >= {100 * min_retention:g}%: "
                  + (f"{best.policy.label} (savings {100 * best.savings:.1f}%, retention {100 * best.retention:.1f}%, "
                     f"gain {best.efficiency_gain:.2f}x)" if best else "none"))
    console.print(src + (f"; plot: {plot / 'pareto.png'}" if plot else ""))


@app.command()
@friendly
def campaign(
    log: Path = typer.Argument(..., help="attempt log (JSONL)"),
    p: str = typer.Option("0,1,1.5,2", help="speedup thresholds for fast_p"),
    plot: Optional[Path] = typer.Option(None, help="directory for fastp.png and attempt_fastp.png"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Campaign metrics, integrity-filtered beside unfiltered: fast_p, geomean/median/mean speedup,
    SOL score (share of the reference-to-SOL gap closed) and the inflation factor."""
    from formloop.campaign.metrics import best_speedups, summary
    from formloop.campaign.replaylog import load_log

    data = load_log(log)
    ps = [x for x in _floats(p, "p") if x is not None]
    s = summary(data, ps)
    s["source"] = f"replay of {log.name} (runtimes as logged)"
    if plot:
        from formloop.campaign.plots import plot_attempt_fast_p, plot_fast_p
        plot_fast_p({"integrity-filtered": best_speedups(data), "unfiltered": best_speedups(data, filtered=False)},
                    plot / "fastp.png")
        plot_attempt_fast_p(data, plot / "attempt_fastp.png", ps=[x for x in ps if x > 0] or [1.0])
        s["plots"] = [str(plot / "fastp.png"), str(plot / "attempt_fastp.png")]
    if json_out:
        print_json(s)
        return
    t = Table(title=f"{log.name}: {s['problems']} problems, {s['attempts']} attempts, {s['tokens']} tokens")
    t.add_column("metric")
    t.add_column("integrity-filtered")
    t.add_column("unfiltered")
    f, u = s["filtered"], s["unfiltered"]
    for key, label in (("geomean_speedup", "geomean speedup (x ref)"), ("median_speedup", "median speedup (x ref)"),
                       ("mean_speedup", "mean speedup (x ref)"), ("solved", "problems with an accepted attempt"),
                       ("sol_score", "SOL score (gap closed, mean)")):
        t.add_row(label, f"{f[key]:.3g}", f"{u[key]:.3g}")
    for k in f["fast_p"]:
        t.add_row(f"fast_{k} (share)", f"{f['fast_p'][k]:.3f}", f"{u['fast_p'][k]:.3f}")
    console.print(t)
    console.print(f"inflation without integrity filtering: {s['inflation']:.2f}x; excluded attempts: {s['excluded']}")
    console.print(f"source: {s['source']}" + (f"; plots: {', '.join(s['plots'])}" if plot else ""))


@app.command("synth-log")
@friendly
def synth_log(
    out: Path = typer.Argument(..., help="where to write the JSONL log"),
    problems: int = typer.Option(40, help="number of problems"),
    attempts: int = typer.Option(24, help="attempts per problem"),
    seed: int = typer.Option(0, help="generator seed"),
) -> None:
    """Write a synthetic attempt log (for trying `schedule` and `campaign`; not measured data)."""
    from formloop.campaign.replaylog import dump_log
    from formloop.campaign.synthetic import synthetic_log

    dump_log(synthetic_log(problems, attempts, seed), out)
    console.print(f"wrote {out} ({problems} problems x {attempts} attempts, seed {seed}; synthetic, not measured)")
