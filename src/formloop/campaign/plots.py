"""PNG figures for a campaign (matplotlib, Agg back end: no display needed)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from formloop.campaign.metrics import Speedups, attempt_fast_p, fast_p_curve
from formloop.campaign.replaylog import AttemptLog
from formloop.campaign.schedule import ReplayResult, pareto_front
from formloop.errors import InvalidInput


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise InvalidInput("plots", "matplotlib missing", "install formloop[plots]") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_fast_p(curves: Mapping[str, Speedups], path: str | Path, *, p_max: float | None = None) -> Path:
    """fast_p(p) per labelled set of speedups (e.g. integrity-filtered vs unfiltered)."""
    plt = _pyplot()
    top = p_max or max([s for sp in curves.values() for s in sp.values() if s is not None] + [2.0]) * 1.05
    ps = np.linspace(0.0, top, 400)
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, sp in curves.items():
        ax.step(ps, fast_p_curve(sp, ps), where="post", label=label)
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="speedup threshold p (x reference)", ylabel="fast_p: share of problems faster than p",
           ylim=(0, 1.02), title="fast-p")
    ax.legend()
    return _save(fig, path)


def plot_attempt_fast_p(log: AttemptLog, path: str | Path, ps: Sequence[float] = (1.0, 1.5, 2.0),
                        *, filtered: bool = True) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ks = np.arange(1, log.max_attempts + 1)
    for p in ps:
        ax.plot(ks, attempt_fast_p(log, p, filtered=filtered), marker=".", label=f"p = {p:g}")
    ax.set(xlabel="attempts per problem", ylabel="fast_p", ylim=(0, 1.02),
           title=f"attempt-fast-p ({'integrity-filtered' if filtered else 'unfiltered'})")
    ax.legend()
    return _save(fig, path)


def plot_pareto(results: Iterable[ReplayResult], path: str | Path) -> Path:
    plt = _pyplot()
    results = list(results)
    front = pareto_front(results)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([r.savings for r in results], [r.retention for r in results], s=12, color="grey", label="eps x w")
    ax.plot([r.savings for r in front], [r.retention for r in front], "o-", color="C3", label="Pareto front")
    for r in front:
        ax.annotate(r.policy.label, (r.savings, r.retention), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.axhline(0.95, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="token savings vs fixed allocation", ylabel="geomean speedup retention",
           title="SOL-guided scheduling: eps x window sweep")
    ax.legend()
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(p, dpi=120)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return p
