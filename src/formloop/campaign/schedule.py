"""SOL-guided budget scheduling, replayed offline on an attempt log.

Every problem starts eligible. After each attempt the scheduler looks at the best accepted runtime
so far, t_best. A problem that does not yet beat the reference stays eligible. Once it does, it
stops receiving attempts when either

* the SOL-gap rule fires: t_best <= (1 + eps) * t_SOL (little headroom is left), or
* the no-progress rule fires: the last `window` attempts did not improve t_best (it stagnated).

Against fixed allocation (every logged attempt spent) the replay reports token savings, geomean
speedup retention and efficiency gain = retention / (1 - savings), i.e. speedup per token relative
to fixed allocation. Direction, by construction: a larger eps or a smaller window stops no later on
any problem, so savings can only grow and retention can only fall (the tests check this)."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from formloop.campaign.metrics import geomean
from formloop.campaign.replaylog import AttemptLog, ProblemLog
from formloop.errors import InvalidInput


@dataclass(frozen=True)
class Policy:
    eps: float | None = None        # SOL-gap threshold; None disables the rule
    window: int | None = None       # no-progress window in attempts; None disables the rule

    def __post_init__(self):
        if self.eps is not None and not (self.eps >= 0 and math.isfinite(self.eps)):
            raise InvalidInput("eps", self.eps, "a finite number >= 0, or None to disable the SOL-gap rule")
        if self.window is not None and (not isinstance(self.window, int) or self.window < 1):
            raise InvalidInput("window", self.window, "an integer >= 1, or None to disable the no-progress rule")

    @property
    def label(self) -> str:
        return f"eps={'off' if self.eps is None else f'{self.eps:g}'} w={'off' if self.window is None else self.window}"


FIXED = Policy()


@dataclass(frozen=True)
class ProblemReplay:
    problem: str
    attempts_used: int
    tokens_used: int
    best_runtime_s: float | None
    stop: str                       # 'sol-gap' | 'no-progress' | 'exhausted'

    def speedup(self, p: ProblemLog) -> float | None:
        return None if self.best_runtime_s is None else p.ref_runtime_s / self.best_runtime_s


def replay_problem(p: ProblemLog, policy: Policy, *, filtered: bool = True) -> ProblemReplay:
    best, since, tokens = None, 0, 0
    for i, a in enumerate(p.attempts, 1):
        tokens += a.tokens
        if a.accepted(p, filtered) and (best is None or a.runtime_s < best):
            best, since = a.runtime_s, 0
        else:
            since += 1
        if best is not None and best < p.ref_runtime_s and i < len(p.attempts):
            if policy.eps is not None and best <= (1.0 + policy.eps) * p.sol_runtime_s:
                return ProblemReplay(p.name, i, tokens, best, "sol-gap")
            if policy.window is not None and since >= policy.window:
                return ProblemReplay(p.name, i, tokens, best, "no-progress")
    return ProblemReplay(p.name, len(p.attempts), tokens, best, "exhausted")


@dataclass(frozen=True)
class ReplayResult:
    policy: Policy
    tokens_used: int
    tokens_fixed: int
    geomean_speedup: float
    geomean_fixed: float
    stops: dict[str, int]
    problems: tuple[ProblemReplay, ...] = ()

    @property
    def savings(self) -> float:
        return 1.0 - self.tokens_used / self.tokens_fixed if self.tokens_fixed else 0.0

    @property
    def retention(self) -> float:
        return self.geomean_speedup / self.geomean_fixed

    @property
    def efficiency_gain(self) -> float:
        return self.retention / (1.0 - self.savings) if self.savings < 1 else math.inf

    def as_dict(self, per_problem: bool = False) -> dict[str, Any]:
        d = {"policy": asdict(self.policy), "label": self.policy.label, "tokens_used": self.tokens_used,
             "tokens_fixed": self.tokens_fixed, "savings": self.savings, "retention": self.retention,
             "efficiency_gain": self.efficiency_gain, "geomean_speedup": self.geomean_speedup,
             "geomean_fixed": self.geomean_fixed, "stops": self.stops}
        if per_problem:
            d["problems"] = [asdict(p) for p in self.problems]
        return d


def replay(log: AttemptLog, policy: Policy, *, filtered: bool = True) -> ReplayResult:
    runs = [replay_problem(p, policy, filtered=filtered) for p in log.problems.values()]
    fixed = [replay_problem(p, FIXED, filtered=filtered) for p in log.problems.values()]
    stops: dict[str, int] = {}
    for r in runs:
        stops[r.stop] = stops.get(r.stop, 0) + 1
    probs = list(log.problems.values())
    return ReplayResult(policy, sum(r.tokens_used for r in runs), sum(r.tokens_used for r in fixed),
                        geomean({r.problem: r.speedup(p) for r, p in zip(runs, probs)}),
                        geomean({r.problem: r.speedup(p) for r, p in zip(fixed, probs)}), stops, tuple(runs))


DEFAULT_EPS = (None, 0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
DEFAULT_WINDOWS = (None, 16, 12, 8, 4, 2)


def sweep(log: AttemptLog, eps_values: Iterable[float | None] = DEFAULT_EPS,
          windows: Iterable[int | None] = DEFAULT_WINDOWS, *, filtered: bool = True) -> list[ReplayResult]:
    """Every eps x window combination (None turns a rule off; both off is fixed allocation)."""
    eps_values, windows = list(eps_values), list(windows)
    return [replay(log, Policy(e, w), filtered=filtered) for e in eps_values for w in windows]


def pareto_front(results: Iterable[ReplayResult]) -> list[ReplayResult]:
    """Points no other point beats on both savings and retention, by increasing savings."""
    pts = sorted(results, key=lambda r: (-r.savings, -r.retention))
    front, best_ret = [], -math.inf
    for r in pts:
        if r.retention > best_ret + 1e-12:
            front.append(r)
            best_ret = r.retention
    return sorted(front, key=lambda r: r.savings)


def best_policy(results: Iterable[ReplayResult], min_retention: float = 0.95) -> ReplayResult | None:
    """The largest savings among policies keeping at least `min_retention` of the geomean speedup."""
    ok = [r for r in results if r.retention >= min_retention]
    return max(ok, key=lambda r: (r.savings, r.retention)) if ok else None
