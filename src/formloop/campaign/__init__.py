"""formloop.campaign: SOL-guided budget scheduling over problem attempts, and campaign metrics.

    load_log(path) / replay / sweep       the SOL-gap and no-progress stop rules on an attempt log
    summary(log)                          fast-p, geomean/median, SOL score, filtered vs unfiltered

The harness and the integrity probes that produce attempts live in `formloop.measure`."""
from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "load_log": "replaylog", "parse_log": "replaylog", "AttemptLog": "replaylog",
    "Policy": "schedule", "replay": "schedule", "sweep": "schedule", "pareto_front": "schedule",
    "best_policy": "schedule",
    "summary": "metrics", "fast_p": "metrics", "signed_area": "metrics", "best_speedups": "metrics",
    "synthetic_log": "synthetic",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"formloop.campaign.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'formloop.campaign' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
