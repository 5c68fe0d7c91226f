"""Kernel problems and campaigns as user actions: check a candidate (harness), judge its integrity,
replay an attempt log under SOL-guided stopping, campaign metrics, and a synthetic log.

The measuring itself lives in `formloop.measure` and the log arithmetic in `formloop.campaign`;
these functions only compose them and return their results as data (times in s, each with its
source: gpu, cpu or the log)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from formloop.api.values import plain
from formloop.errors import InvalidInput
from formloop.campaign.metrics import best_speedups, summary
from formloop.campaign.plots import plot_attempt_fast_p, plot_fast_p, plot_pareto
from formloop.campaign.replaylog import dump_log, load_log
from formloop.campaign.schedule import Policy, best_policy, pareto_front, replay, sweep
from formloop.campaign.synthetic import synthetic_log


def harness(problem: str, candidate: str, *, limits=None, **options) -> dict:
    """A candidate against a problem's reference, in a child process under `limits`: correctness on
    fresh inputs, input immutability, timing, speedup and SOL fraction. `status` says whether the run
    completed (else crashed | timed-out | exited, with the culprit); options as
    `formloop.measure.harness.evaluate`'s."""
    from formloop.measure.jobs import run_harness

    return plain(run_harness(problem, candidate, limits=limits, **options))


def integrity(problem: str, candidate: str, *, probes: Sequence[str] | None = None, limits=None, **options) -> dict:
    """The integrity verdict of one attempt with the evidence of every detector, in a child process
    under `limits`; with `chip` the candidate is also timed and held against the SOL ceiling."""
    from formloop.measure.jobs import run_integrity
    from formloop.measure.probes import PROBE_NAMES

    unknown = [p for p in (probes or []) if p not in PROBE_NAMES]
    if unknown:
        raise InvalidInput("probe", unknown[0], PROBE_NAMES)
    return plain(run_integrity(problem, candidate, limits=limits, probes=tuple(probes) if probes else None, **options))


def schedule(log: str, *, eps: float | None = None, window: int | None = None, sweep_grid: bool = False,
             eps_grid: Sequence[float | None] = (), window_grid: Sequence[int | None] = (),
             min_retention: float = 0.95, filtered: bool = True, plot: str | None = None) -> dict:
    """Replay an attempt log under SOL-guided stopping (one policy, or an eps x window sweep with its
    Pareto front and the best policy keeping `min_retention`)."""
    data = load_log(Path(log))
    which = "integrity-filtered" if filtered else "unfiltered"
    src = f"source: replay of {Path(log).name} (runtimes as logged; {which})"
    if not sweep_grid:
        r = replay(data, Policy(eps, window), filtered=filtered)
        return plain({**r.as_dict(per_problem=True), "source": src})
    results = sweep(data, list(eps_grid), list(window_grid), filtered=filtered)
    front, best = pareto_front(results), best_policy(results, min_retention)
    png = None
    if plot:
        png = str(plot_pareto(results, Path(plot) / "pareto.png"))
    return plain({"sweep": [r.as_dict() for r in results], "pareto": [r.policy.label for r in front],
                  "best": best.as_dict() if best else None, "min_retention": min_retention, "source": src,
                  "problems": len(data.problems), "plot": png})


def campaign(log: str, *, p: Sequence[float] = (0, 1, 1.5, 2), plot: str | None = None) -> dict:
    """Campaign metrics, integrity-filtered beside unfiltered: fast_p, geomean/median/mean speedup,
    SOL score and the inflation factor."""
    data = load_log(Path(log))
    s = summary(data, list(p))
    s["source"] = f"replay of {Path(log).name} (runtimes as logged)"
    if plot:
        plot_fast_p({"integrity-filtered": best_speedups(data), "unfiltered": best_speedups(data, filtered=False)},
                    Path(plot) / "fastp.png")
        plot_attempt_fast_p(data, Path(plot) / "attempt_fastp.png", ps=[x for x in p if x > 0] or [1.0])
        s["plots"] = [str(Path(plot) / "fastp.png"), str(Path(plot) / "attempt_fastp.png")]
    return plain(s)


def synth_log(out: str, *, problems: int = 40, attempts: int = 24, seed: int = 0) -> dict:
    """Write a synthetic attempt log (for trying `schedule` and `campaign`; not measured data)."""
    dump_log(synthetic_log(problems, attempts, seed), Path(out))
    return plain({"log": str(out), "problems": problems, "attempts": attempts, "seed": seed,
                  "source": "synthetic, not measured"})
