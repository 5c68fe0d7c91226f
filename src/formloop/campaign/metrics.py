"""Campaign metrics over best-per-problem speedups.

A problem's speedup is t_ref / t_best over its accepted attempts; a problem without one has none
(`None`). Conventions, stated once:

* fast_p(p) is the share of problems with speedup > p; a problem without an accepted attempt never
  counts. Because the area under a survival function is the mean, the signed area between two
  fast-p curves over p in [0, inf) equals the difference of their arithmetic mean speedups, with
  the missing ones counted as 0 (`mean_speedup`).
* geomean and median fall back to 1.0 for a missing problem: the user keeps the reference.
* SOL score = (t_ref - t_best) / (t_ref - t_SOL): 0 at the reference, 1 at the floor, negative when
  slower than the reference, above 1 only for a runtime under the floor (which integrity flags);
  a missing problem scores 0.
* inflation = unfiltered / integrity-filtered geomean speedup."""
from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from formloop.campaign.replaylog import AttemptLog, ProblemLog
from formloop.errors import InvalidInput

Speedups = Mapping[str, float | None]


def best_runtime(problem: ProblemLog, *, filtered: bool = True, max_attempts: int | None = None) -> float | None:
    used = problem.attempts if max_attempts is None else problem.attempts[:max_attempts]
    times = [a.runtime_s for a in used if a.accepted(problem, filtered)]
    return min(times) if times else None


def best_speedups(log: AttemptLog, *, filtered: bool = True,
                  max_attempts: int | None = None) -> dict[str, float | None]:
    out = {}
    for name, p in log.problems.items():
        t = best_runtime(p, filtered=filtered, max_attempts=max_attempts)
        out[name] = None if t is None else p.ref_runtime_s / t
    return out


def fast_p(speedups: Speedups, p: float) -> float:
    if not speedups:
        raise InvalidInput("speedups", "empty", "at least one problem")
    return sum(1 for s in speedups.values() if s is not None and s > p) / len(speedups)


def fast_p_curve(speedups: Speedups, ps: Sequence[float]) -> np.ndarray:
    return np.array([fast_p(speedups, p) for p in ps])


def mean_speedup(speedups: Speedups) -> float:
    """Arithmetic mean with missing problems at 0 (the convention under which area = mean)."""
    return sum(s or 0.0 for s in speedups.values()) / len(speedups)


def signed_area(a: Speedups, b: Speedups) -> float:
    """Exact integral over p in [0, inf) of fast_p_a(p) - fast_p_b(p): both are step functions that
    drop at the speedup values, so integrate piece by piece between the sorted breakpoints."""
    cuts = sorted({0.0} | {s for s in list(a.values()) + list(b.values()) if s is not None})
    area = 0.0
    for lo, hi in zip(cuts, cuts[1:]):
        mid = 0.5 * (lo + hi)
        area += (fast_p(a, mid) - fast_p(b, mid)) * (hi - lo)
    return area


def geomean(speedups: Speedups, fallback: float = 1.0) -> float:
    vals = [fallback if s is None else s for s in speedups.values()]
    if not vals:
        raise InvalidInput("speedups", "empty", "at least one problem")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def median(speedups: Speedups, fallback: float = 1.0) -> float:
    return statistics.median(fallback if s is None else s for s in speedups.values())


def sol_score(t_ref: float, t_best: float | None, t_sol: float) -> float:
    if t_best is None:
        return 0.0
    if not t_ref > t_sol:
        return 1.0 if t_best <= t_ref else 0.0  # the reference already sits on the floor
    return (t_ref - t_best) / (t_ref - t_sol)


def mean_sol_score(log: AttemptLog, *, filtered: bool = True) -> float:
    scores = [sol_score(p.ref_runtime_s, best_runtime(p, filtered=filtered), p.sol_runtime_s)
              for p in log.problems.values()]
    return sum(scores) / len(scores)


def attempt_fast_p(log: AttemptLog, p: float, *, filtered: bool = True) -> list[float]:
    """fast_p after the first k attempts of every problem, k = 1..max attempts."""
    return [fast_p(best_speedups(log, filtered=filtered, max_attempts=k), p) for k in range(1, log.max_attempts + 1)]


def exclusions(log: AttemptLog) -> dict[str, int]:
    """Correct attempts that integrity filtering drops, by reason."""
    c: Counter[str] = Counter()
    for p in log.problems.values():
        for a in p.attempts:
            why = a.exclusion(p)
            if why:
                c[why] += 1
    return dict(c)


def summary(log: AttemptLog, ps: Iterable[float] = (0.0, 1.0, 1.5, 2.0)) -> dict[str, Any]:
    """Filtered and unfiltered figures side by side, and the inflation factor."""
    out: dict[str, Any] = {"problems": len(log.problems),
                           "attempts": sum(len(p.attempts) for p in log.problems.values()),
                           "tokens": log.tokens, "excluded": exclusions(log)}
    for label, filtered in (("filtered", True), ("unfiltered", False)):
        s = best_speedups(log, filtered=filtered)
        out[label] = {"geomean_speedup": geomean(s), "median_speedup": median(s), "mean_speedup": mean_speedup(s),
                      "solved": sum(1 for v in s.values() if v is not None),
                      "fast_p": {f"{p:g}": fast_p(s, p) for p in ps},
                      "sol_score": mean_sol_score(log, filtered=filtered)}
    out["inflation"] = out["unfiltered"]["geomean_speedup"] / out["filtered"]["geomean_speedup"]
    return out
