"""Replay logs, the SOL-gap / no-progress scheduler and the campaign metrics."""
import itertools
import json
import math

import numpy as np
import pytest

from formloop.campaign.metrics import (attempt_fast_p, best_speedups, fast_p, fast_p_curve, geomean, mean_speedup,
                                       median, signed_area, sol_score, summary)
from formloop.campaign.replaylog import load_log, parse_log
from formloop.campaign.schedule import FIXED, Policy, best_policy, pareto_front, replay, replay_problem, sweep
from formloop.campaign.synthetic import synthetic_log
from formloop.errors import InvalidInput


def rec(problem, attempt, runtime, tokens=100, status="correct", verdict="clean"):
    return {"problem": problem, "attempt": attempt, "runtime_s": runtime, "tokens": tokens, "status": status,
            "verdict": verdict}


HAND = [
    {"type": "problem", "problem": "a", "ref_runtime_s": 10.0, "sol_runtime_s": 2.0},
    rec("a", 1, 12.0), rec("a", 2, 9.0), rec("a", 3, 2.3), rec("a", 4, 2.1), rec("a", 5, 2.05),
    {"type": "problem", "problem": "b", "ref_runtime_s": 4.0, "sol_runtime_s": 1.0},
    rec("b", 1, None, status="error"), rec("b", 2, 3.0), rec("b", 3, 3.1), rec("b", 4, 3.2), rec("b", 5, 2.9),
    rec("b", 6, 0.5, verdict="clean"),      # under the SOL floor: the ceiling detector drops it
    {"type": "problem", "problem": "c", "ref_runtime_s": 5.0, "sol_runtime_s": 1.0},
    rec("c", 1, 6.0), rec("c", 2, 2.5, verdict="torch-only"), rec("c", 3, 5.5),
]


def test_hand_log_stop_rules():
    log = parse_log(HAND)
    a, b, c = (log.problems[k] for k in "abc")
    # SOL-gap: after attempt 3, t_best 2.3 <= 1.25 * 2.0 and the reference (10) is beaten
    r = replay_problem(a, Policy(eps=0.25))
    assert (r.attempts_used, r.tokens_used, r.best_runtime_s, r.stop) == (3, 300, 2.3, "sol-gap")
    assert replay_problem(a, Policy(eps=0.1)).attempts_used == 4   # 2.1 <= 2.2
    assert replay_problem(a, Policy(eps=0.03)).stop == "exhausted"  # 2.05 <= 2.06 only at the last attempt
    # no-progress: b beats 4.0 at attempt 2 (3.0); attempts 3 and 4 do not improve -> stop after 4 with w=2
    r = replay_problem(b, Policy(window=2))
    assert (r.attempts_used, r.best_runtime_s, r.stop) == (4, 3.0, "no-progress")
    # while behind the reference nothing stops it: c never beats 5.0 with accepted attempts
    assert replay_problem(c, Policy(eps=10.0, window=1)).stop == "exhausted"
    # unfiltered, the torch-only 2.5 counts and c beats its reference
    assert replay_problem(c, Policy(window=1), filtered=False).attempts_used == 3


def test_hand_log_savings_and_retention():
    log = parse_log(HAND)
    fixed = replay(log, FIXED)
    assert fixed.tokens_used == fixed.tokens_fixed == 1400 and fixed.savings == 0 and fixed.retention == 1
    r = replay(log, Policy(eps=0.25, window=2))
    assert r.tokens_used == 300 + 400 + 300
    assert r.savings == pytest.approx(1 - 1000 / 1400)
    sp_fixed = [10 / 2.05, 4 / 2.9, 5.0 / 5.5]   # c's torch-only 2.5 is filtered out; its best clean run is 5.5
    sp_policy = [10 / 2.3, 4 / 3.0, 5.0 / 5.5]
    g = lambda xs: math.exp(sum(map(math.log, xs)) / 3)
    assert r.retention == pytest.approx(g(sp_policy) / g(sp_fixed))
    assert r.efficiency_gain == pytest.approx(r.retention / (1 - r.savings))


def test_metrics_on_the_hand_log():
    log = parse_log(HAND)
    filt, unf = best_speedups(log), best_speedups(log, filtered=False)
    assert filt == pytest.approx({"a": 10 / 2.05, "b": 4 / 2.9, "c": 5 / 5.5})
    assert unf == pytest.approx({"a": 10 / 2.05, "b": 4 / 0.5, "c": 5 / 2.5})
    s = summary(log)
    assert s["excluded"] == {"sol-ceiling": 1, "torch-only": 1}
    assert s["inflation"] == pytest.approx(geomean(unf) / geomean(filt))
    assert s["filtered"]["fast_p"]["1"] == pytest.approx(2 / 3)
    assert sol_score(10.0, 2.05, 2.0) == pytest.approx(7.95 / 8.0)
    assert sol_score(4.0, None, 1.0) == 0.0 and sol_score(4.0, 5.0, 1.0) < 0
    assert attempt_fast_p(log, 1.0) == pytest.approx([0.0, 2 / 3, 2 / 3, 2 / 3, 2 / 3, 2 / 3])
    assert attempt_fast_p(log, 1.0, filtered=False)[-1] == 1.0  # b under the floor, c torch-only
    assert median({"x": 1.0, "y": None, "z": 3.0}) == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_signed_area_between_fast_p_curves_is_the_mean_difference(seed):
    rng = np.random.default_rng(seed)
    names = [f"p{i}" for i in range(25)]
    a = {n: (None if rng.random() < 0.15 else float(rng.lognormal(0.3, 0.6))) for n in names}
    b = {n: (None if rng.random() < 0.15 else float(rng.lognormal(0.1, 0.8))) for n in names}
    exact = signed_area(a, b)
    top = max(v for v in list(a.values()) + list(b.values()) if v is not None) + 1.0
    ps = np.linspace(0.0, top, 200_001)           # independent: trapezoid rule on a fine grid
    numeric = np.trapezoid(fast_p_curve(a, ps) - fast_p_curve(b, ps), ps) if hasattr(np, "trapezoid") \
        else np.trapz(fast_p_curve(a, ps) - fast_p_curve(b, ps), ps)
    diff = mean_speedup(a) - mean_speedup(b)
    assert exact == pytest.approx(diff, abs=1e-12)
    assert numeric == pytest.approx(diff, abs=2 * top / 200_000)


def test_fast_p_counts_strictly_faster_and_skips_missing():
    s = {"a": 2.0, "b": 1.0, "c": None, "d": 0.5}
    assert fast_p(s, 1.0) == 0.25 and fast_p(s, 0.0) == 0.75
    assert mean_speedup(s) == pytest.approx(3.5 / 4)


def test_direction_of_the_trade_off_on_a_synthetic_log():
    """Larger eps or a smaller window: savings never fall and retention never rises."""
    log = parse_log(synthetic_log(30, 20, seed=3))
    eps_grid, win_grid = [0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0], [16, 12, 8, 4, 2, 1]
    grid = {(e, w): replay(log, Policy(e, w)) for e, w in itertools.product(eps_grid, win_grid)}
    for w in win_grid:
        sav = [grid[e, w].savings for e in eps_grid]
        ret = [grid[e, w].retention for e in eps_grid]
        assert sav == sorted(sav) and ret == sorted(ret, reverse=True)
    for e in eps_grid:
        sav = [grid[e, w].savings for w in win_grid]
        ret = [grid[e, w].retention for w in win_grid]
        assert sav == sorted(sav) and ret == sorted(ret, reverse=True)
    assert grid[4.0, 1].savings > grid[0.0, 16].savings + 0.1      # and it really moves
    assert grid[4.0, 1].retention < grid[0.0, 16].retention


def test_pareto_front_is_exactly_the_non_dominated_points():
    log = parse_log(synthetic_log(20, 16, seed=1))
    results = sweep(log)
    front = pareto_front(results)
    pts = [(r.savings, r.retention) for r in results]

    def dominated(p):
        return any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in pts)

    expected = {p for p in pts if not dominated(p)}
    assert {(r.savings, r.retention) for r in front} == expected
    assert [r.savings for r in front] == sorted(r.savings for r in front)
    best = best_policy(results, 0.95)
    assert best.retention >= 0.95 and all(r.savings <= best.savings for r in results if r.retention >= 0.95)


def test_log_errors_name_the_line_and_field(tmp_path):
    with pytest.raises(InvalidInput, match="line 2 field status"):
        parse_log([json.dumps(HAND[0]), json.dumps(rec("a", 1, 1.0, status="ok"))])
    with pytest.raises(InvalidInput, match="runtime_s"):
        parse_log([HAND[0], rec("a", 1, -1.0)])
    with pytest.raises(InvalidInput, match="no ref_runtime_s"):
        parse_log([rec("z", 1, 1.0)])
    with pytest.raises(InvalidInput, match="one JSON object per line"):
        parse_log(["{not json"])
    with pytest.raises(InvalidInput, match="verdict"):
        parse_log([HAND[0], rec("a", 1, 1.0, verdict="ok")])
    with pytest.raises(InvalidInput, match="attempt"):
        parse_log([HAND[0], rec("a", 1, 1.0), rec("a", 1, 2.0)])
    with pytest.raises(InvalidInput, match="log path"):
        load_log(tmp_path / "nope.jsonl")
    with pytest.raises(InvalidInput, match="eps"):
        Policy(eps=-0.1)
    with pytest.raises(InvalidInput, match="window"):
        Policy(window=0)


def test_plots_write_pngs(tmp_path):
    from formloop.campaign.plots import plot_attempt_fast_p, plot_fast_p, plot_pareto

    log = parse_log(synthetic_log(8, 6, seed=2))
    paths = [plot_fast_p({"filtered": best_speedups(log), "unfiltered": best_speedups(log, filtered=False)},
                         tmp_path / "fastp.png"),
             plot_attempt_fast_p(log, tmp_path / "attempts.png"),
             plot_pareto(sweep(log, [None, 0.5], [None, 4]), tmp_path / "pareto.png")]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
