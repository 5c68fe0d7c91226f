"""`formloop harness`, `integrity`, `schedule`, `campaign`, `synth-log`: kernel problems and campaigns."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from formloop import api
from formloop.api.values import with_non_finite
from formloop.cli import app, args
from formloop.cli.common import console, friendly, print_json
from formloop.errors import InvalidInput


PROBLEM = args.existing_file("PROBLEM", suffix=".py")
CANDIDATE = args.existing_file("CANDIDATE", suffix=".py")
LOG = args.existing_file("LOG", text=True)
MEMORY = args.float_range("--memory-gb", 0.0625, 4096, lo_open=False, unit="GiB")


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
            kind = "integers" if integer else "numbers"
            raise InvalidInput(field, part, f"comma-separated {kind} or 'off'") from None
    return out


def _limits(timeout: float, memory_gb: Optional[float]):
    from formloop.measure.sandbox import Limits

    if memory_gb is not None and not (isinstance(memory_gb, float) and 0.0625 <= memory_gb <= 4096):
        raise InvalidInput("memory-gb", memory_gb, "a number 0.0625 ... 4096 (GiB)")
    return Limits(wall_s=timeout, memory_bytes=int(memory_gb * 2**30) if memory_gb is not None else None)


def _run_failure(d: dict, json_out: bool) -> None:
    """A sandboxed run that did not finish: its named verdict; exit 2 when the problem's own code
    failed (bad input), 1 when the candidate's did."""
    if json_out:
        print_json(d)
    else:
        code = f"exit code {d['exitcode']}, " if d["exitcode"] is not None else ""
        console.print(f"[bold red]{d['verdict'].upper()}[/]: {d['summary']} ({code}after {d['seconds']:.1f} s); "
                      "not accepted", highlight=False)
    raise typer.Exit(2 if d.get("culprit") == "problem" else 1)


def _timing_line(t: dict) -> str:
    dev = t.get("device") or {}
    after = dev.get("after") or {}
    clock = f"; SM {after['sm_mhz']:g} MHz" if "sm_mhz" in after else ""
    power = f", {dev['mean_power_w']:.0f} W mean" if "mean_power_w" in dev else \
        (f", {after['power_w']:.0f} W" if "power_w" in after else "")
    return f"{t['method']}{clock}{power}"


@app.command()
@friendly
def harness(
    problem: Path = typer.Argument(..., help="problem file (Model, get_inputs, get_init_inputs)", callback=PROBLEM),
    candidate: Path = typer.Argument(..., help="candidate file defining ModelNew", callback=CANDIDATE),
    sets: int = typer.Option(3, help="fresh random input sets for the correctness check (1 ... 100)",
                             parser=args.int_range("--sets", 1, 100)),
    seed: Optional[int] = typer.Option(None, help=f"seed of the input sets, {args.SEED_RANGE} (default: secret, "
                                                  "printed)", parser=args.seed),
    time_it: bool = typer.Option(True, "--time/--no-time", help="time reference and candidate"),
    chip: Optional[str] = typer.Option(None, help="chip for the SOL floor, e.g. h100 (default on a GPU: the "
                                                  "device's own, by its name)"),
    clock_mhz: Optional[float] = typer.Option(None, help="locked clock for the SOL floor, MHz (0 < x <= 10000; at "
                                                         "most the chip's boost)", parser=args.clock_mhz),
    dtype: Optional[str] = typer.Option(None, help="dtype for the SOL floor (default: the problem's)"),
    rtol: Optional[float] = typer.Option(None, help="override the dtype's relative tolerance (0 < rtol < 1)",
                                         parser=args.float_range("--rtol", 0, 1, hi_open=True)),
    precision: Optional[str] = typer.Option(None, help="cast inputs and both models to fp32 | fp16 | bf16 | fp64 "
                                                       "(KernelBench's precision option)"),
    eval_mode: bool = typer.Option(False, "--eval/--no-eval",
                                   help="call .eval() on both models (KernelBench does not)"),
    tolerance: str = typer.Option("formloop", help="the rule deciding correctness: formloop (magnitude-aware, float64 "
                                                   "truth) | kernelbench (allclose at its precision tolerance)",
                                  callback=args.choice("--tolerance", ("formloop", "kernelbench"))),
    timing_mode: str = typer.Option("auto", help="auto (CUDA graph, eager if not capturable) | graph | eager",
                                    callback=args.choice("--timing-mode", ("auto", "graph", "eager"))),
    timeout: float = typer.Option(600.0, help="wall-clock limit of the whole run in seconds (0 < t <= 86400)",
                                  parser=args.run_timeout),
    memory_gb: Optional[float] = typer.Option(None, help="host memory limit of the run in GiB, 0.0625 ... 4096 "
                                                         "(default: 3/4 of RAM)", parser=MEMORY),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Check a candidate against a problem's reference: correctness on fresh inputs drawn on the
    device (poisoned allocations, float64 truth, magnitude-aware tolerance), input immutability,
    timing by the one timer, the timed output and one more input set after timing, speedup and SOL
    fraction (a warning when faster than the SOL bound). Problem and candidate run in a child process
    under the time and memory limits. Without a GPU, times are host wall time labelled 'cpu' and no
    SOL fraction is given. Exit status: 0 correct; 1 incorrect, or the candidate crashed, timed out or
    exited; 2 bad input (including a problem file whose own code fails). --json keeps these codes."""
    d = api.harness(str(problem), str(candidate), limits=_limits(timeout, memory_gb), sets=sets, seed=seed,
                    timing=time_it, chip=chip, dtype=dtype, clock_mhz=clock_mhz, rtol=rtol, precision=precision,
                    eval_mode=eval_mode, tolerance=tolerance, timing_mode=timing_mode)
    if d["status"] != "completed":
        _run_failure(d, json_out)
    if json_out:
        print_json(d)
        if not d["correct"]:
            raise typer.Exit(1)
        return
    t = Table(title=f"harness: {d['candidate']} vs {d['problem']} (device {d['device']}, seed {d['seed']})")
    for col in ("input set", "result", "worst error / allowed", "||c-t||/||t||", "allclose (KB)", "detail"):
        t.add_column(col)
    rows = [(str(i), c) for i, c in enumerate(d["sets"])]
    rows += [(label, d[key]) for key, label in (("timed_output", "timed output"), ("after_timing", "after timing"))
             if d[key] is not None]
    for label, c in rows:
        t.add_row(label, "[green]ok[/]" if c["ok"] else "[red]FAIL[/]", f"{c['max_ratio']:.3g}",
                  f"{c['norm_rel_error']:.2e}", "-" if c["allclose"] is None else str(c["allclose"]), c["reason"])
    console.print(t)
    console.print(f"weights: {d['weights']}; inputs unchanged: {d['inputs_unchanged']}"
                  + (f" ([red]mutated: {d['mutated']}[/])" if d["mutated"] else ""))
    console.print(f"protocol: {d['protocol']}", highlight=False)
    for note in d["notes"]:
        console.print(f"note: {note}")
    if d["candidate_time"]:
        ct, rt = d["candidate_time"], d["reference_time"]
        console.print(f"reference {_ms(rt['seconds'])}, candidate {_ms(ct['seconds'])} (source: {ct['source']}; "
                      f"{_timing_line(ct)})", highlight=False)
        console.print(f"speedup: {d['speedup']:.3g}x reference (source: {ct['source']})")
    elif time_it:
        console.print("not timed: the candidate is incorrect")
    if d["sol_floor_s"] is not None:
        console.print(f"SOL floor: {_ms(d['sol_floor_s'])} ({d['sol_note']}); SOL fraction: "
                      + (f"{d['sol_fraction']:.3f} (gpu)" if d["sol_fraction"] is not None
                         else "n/a (needs a gpu timing)"), highlight=False)
    elif d["sol_note"]:
        console.print(d["sol_note"], highlight=False)
    for w in d["warnings"]:
        console.print(f"[bold yellow]warning:[/] {w}", highlight=False)
    console.print(f"[bold]{'correct' if d['correct'] else 'INCORRECT'}[/]; replay: formloop harness {problem} "
                  f"{candidate} --seed {d['seed']}")
    if not d["correct"]:
        raise typer.Exit(1)


@app.command()
@friendly
def integrity(
    problem: Path = typer.Argument(..., help="problem file", callback=PROBLEM),
    candidate: Path = typer.Argument(..., help="candidate file defining ModelNew", callback=CANDIDATE),
    seed: Optional[int] = typer.Option(None, help=f"seed of all probe inputs, {args.SEED_RANGE} (default: secret, "
                                                  "printed)", parser=args.seed),
    probe: Optional[list[str]] = typer.Option(None, help="run only these probes (repeatable): static, torch-only, "
                                              "trivial, unseen, shapes, memory, cache, mutation, skipped, side-stream, "
                                              "launch-failure, call-count"),
    chip: Optional[str] = typer.Option(None, help="add the SOL-ceiling check against this chip (GPU timings only)"),
    clock_mhz: Optional[float] = typer.Option(None, help="locked clock for the SOL floor, MHz (0 < x <= 10000; at "
                                                         "most the chip's boost)", parser=args.clock_mhz),
    precision: Optional[str] = typer.Option(None, help="cast inputs and models to fp32 | fp16 | bf16 | fp64"),
    eval_mode: bool = typer.Option(False, "--eval/--no-eval", help="call .eval() on both models"),
    timeout: float = typer.Option(900.0, help="wall-clock limit of the whole run in seconds (0 < t <= 86400)",
                                  parser=args.run_timeout),
    memory_gb: Optional[float] = typer.Option(None, help="host memory limit of the run in GiB, 0.0625 ... 4096 "
                                                         "(default: 3/4 of RAM)", parser=MEMORY),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Integrity verdict for one attempt (clean | minor | probe-failed | torch-only | gaming, or
    crashed | timed-out | exited when the run did not finish) with the evidence of every detector:
    what the call launched (torch-only at run time), the source scan, cached or hard-coded results,
    skipped computation, input mutation, uninitialized or recycled memory, lazy outputs, work after
    return, swallowed launch failures, work that stops after repeated calls and (with --chip and a
    GPU) the SOL ceiling. Runs in a child process under the time and memory limits. Exit status: 0
    accepted; 1 not accepted; 2 bad input (including a problem file whose own code fails)."""
    d = api.integrity(str(problem), str(candidate), limits=_limits(timeout, memory_gb), seed=seed, probes=probe,
                      chip=chip, clock_mhz=clock_mhz, precision=precision, eval_mode=eval_mode)
    if d["status"] != "completed":
        _run_failure(d, json_out)
    if json_out:
        print_json(d)
    else:
        t = Table(title=f"integrity: {d['candidate']} vs {d['problem']} (seed {d['seed']})")
        for col in ("detector", "result", "finding"):
            t.add_column(col)
        for c in d["checks"]:
            flagged = c["verdict"] == "counterexample"
            res = f"[red]FLAG {c['details'].get('severity', '')}[/]" if flagged else c["reason"].split(":")[0]
            t.add_row(c["obligation"], res, c["reason"] if flagged else c["reason"].partition(": ")[2])
        console.print(t)
        for c in (c for c in d["checks"] if c["verdict"] == "counterexample"):
            steps = " -> ".join(map(str, c["trace"])) if c["trace"] else f"evidence {c['witness']}"
            console.print(f"[bold]{c['obligation']}[/]: {steps}\n  replay: formloop integrity {problem} {candidate} "
                          f"--seed {d['seed']} --probe {c['details'].get('probe', 'static')}", highlight=False)
        console.print(f"correct on fresh inputs: {d['correct']}; verdict: [bold]{d['verdict']}[/]; "
                      f"accepted: {d['accepted']}")
    if not d["accepted"]:
        raise typer.Exit(1)


@app.command()
@friendly
def schedule(
    log: Path = typer.Argument(..., help="attempt log (JSONL; see formloop.campaign.replaylog)", callback=LOG),
    eps: Optional[float] = typer.Option(None, help="SOL-gap threshold: stop when t_best <= (1+eps) t_SOL "
                                        "(and the reference is beaten), 0 ... 1000",
                                        parser=args.float_range("--eps", 0, 1000, lo_open=False)),
    window: Optional[int] = typer.Option(None, help="no-progress window: stop after this many attempts "
                                         "without improvement, 1 ... 100000",
                                         parser=args.int_range("--window", 1, 100000)),
    sweep_grid: bool = typer.Option(False, "--sweep", help="sweep eps x window and print the Pareto front"),
    eps_grid: str = typer.Option("off,0,0.1,0.25,0.5,1,2", help="eps values for --sweep, each 0 ... 1000 or 'off' "
                                 "(disables the rule)", callback=args.number_list("--eps-grid", lo=0, hi=1000)),
    window_grid: str = typer.Option("off,16,12,8,4,2", help="window values for --sweep, integers 1 ... 100000 or 'off'",
                                    callback=args.number_list("--window-grid", lo=1, hi=100000, integer=True)),
    min_retention: float = typer.Option(0.95, help="retention constraint for the recommended policy, 0 ... 1",
                                        parser=args.float_range("--min-retention", 0, 1, lo_open=False)),
    unfiltered: bool = typer.Option(False, help="count attempts integrity flagged (default: filtered)"),
    plot: Optional[Path] = typer.Option(None, help="directory for pareto.png", callback=args.directory("--plot")),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Replay an attempt log under SOL-guided stopping: token savings, geomean speedup retention
    and efficiency gain against fixed allocation (every logged attempt spent)."""
    out = api.schedule(str(log), eps=eps, window=window, sweep_grid=sweep_grid, eps_grid=_floats(eps_grid, "eps grid"),
                       window_grid=_floats(window_grid, "window grid", integer=True), min_retention=min_retention,
                       filtered=not unfiltered, plot=str(plot) if plot else None)
    if json_out:
        print_json(out)
        return
    res = with_non_finite(out)
    if not sweep_grid:
        console.print(f"{res['label']}: tokens {res['tokens_used']} of {res['tokens_fixed']} (savings "
                      f"{100 * res['savings']:.1f}%), geomean speedup {res['geomean_speedup']:.3g}x vs "
                      f"{res['geomean_fixed']:.3g}x fixed (retention {100 * res['retention']:.1f}%), efficiency gain "
                      f"{res['efficiency_gain']:.2f}x; stops {res['stops']}")
        console.print(res["source"])
        return
    t = Table(title=f"eps x window sweep on {log.name} ({res['problems']} problems); * = Pareto front")
    for col in ("policy", "token savings %", "geomean retention %", "efficiency gain x", "stops"):
        t.add_column(col)
    for r in sorted(res["sweep"], key=lambda r: (r["savings"], r["retention"])):
        t.add_row(("* " if r["label"] in res["pareto"] else "  ") + r["label"], f"{100 * r['savings']:.1f}",
                  f"{100 * r['retention']:.1f}", f"{r['efficiency_gain']:.2f}", str(r["stops"]))
    console.print(t)
    best = res["best"]
    console.print(f"best with retention >= {100 * min_retention:g}%: "
                  + (f"{best['label']} (savings {100 * best['savings']:.1f}%, retention "
                     f"{100 * best['retention']:.1f}%, gain {best['efficiency_gain']:.2f}x)" if best else "none"))
    console.print(res["source"] + (f"; plot: {plot / 'pareto.png'}" if plot else ""))


@app.command()
@friendly
def campaign(
    log: Path = typer.Argument(..., help="attempt log (JSONL)", callback=LOG),
    p: str = typer.Option("0,1,1.5,2", help="speedup thresholds for fast_p, each 0 ... 10^6",
                          callback=args.number_list("--p", lo=0, hi=1e6, off=False)),
    plot: Optional[Path] = typer.Option(None, help="directory for fastp.png and attempt_fastp.png",
                                        callback=args.directory("--plot")),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Campaign metrics, integrity-filtered beside unfiltered: fast_p, geomean/median/mean speedup,
    SOL score (share of the reference-to-SOL gap closed) and the inflation factor."""
    s = api.campaign(str(log), p=[x for x in _floats(p, "p") if x is not None], plot=str(plot) if plot else None)
    if json_out:
        print_json(s)
        return
    s = with_non_finite(s)
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
    out: Path = typer.Argument(..., help="where to write the JSONL log (a new or replaced file)",
                               callback=args.new_file("OUT")),
    problems: int = typer.Option(40, help="number of problems, 1 ... 10000",
                                 parser=args.int_range("--problems", 1, 10000)),
    attempts: int = typer.Option(24, help="attempts per problem, 1 ... 10000",
                                 parser=args.int_range("--attempts", 1, 10000)),
    seed: int = typer.Option(0, help=f"generator seed, {args.SEED_RANGE}", parser=args.seed),
) -> None:
    """Write a synthetic attempt log (for trying `schedule` and `campaign`; not measured data)."""
    api.synth_log(str(out), problems=problems, attempts=attempts, seed=seed)
    console.print(f"wrote {out} ({problems} problems x {attempts} attempts, seed {seed}; synthetic, not measured)")
