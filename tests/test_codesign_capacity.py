"""Acceptance of the capacity study (Table 12 layout) and the Table 11-style study against
independent brute force over chips and programs (evaluator + wall checks, no MILP)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from formloop.codesign import baselines as bl
from formloop.codesign import tables
from formloop.codesign.study import load_study

STUDIES = Path(__file__).resolve().parents[1] / "studies"


@pytest.fixture(scope="module")
def capacity():
    study = load_study(STUDIES / "wall_relaxation_capacity.toml")
    return study, tables.capacity_rows(study)


@pytest.fixture(scope="module")
def table11():
    study = load_study(STUDIES / "codesign_table11.toml")
    return study, tables.table11_rows(study)


def brute_force(problem, objective, chips=None):
    """Exact joint optimum by listing every chip within the ceiling and every admitted program."""
    best = math.inf
    for h in chips or problem.library.chips():
        worst = 0.0
        for sc in problem.objective(objective):
            ratios = [problem.measure(sc, p["name"], h).ratio for p in problem.menu(sc)
                      if not problem.admitted(sc, p["name"], h)]
            worst = max(worst, min(ratios, default=math.inf))
        best = min(best, worst)
    return best


def test_capacity_domain_is_the_twelve_register_chips(capacity):
    study, _ = capacity
    chips = study.problem.library.chips()
    assert len(chips) == 12 and all(h.area <= 1.11 for h in chips)
    assert study.problem.library.open_components() == ("vreg", "sreg")
    assert len(study.problem.programs["prefill"]) >= 9 and len(study.problem.programs["decode"]) >= 7
    # Capacity only moves walls: a program's cost is the same on every chip of the domain.
    p = study.problem
    for sc in ("p128", "d512"):
        for prog in p.menu(sc):
            costs = {round(p.measure(sc, prog["name"], h).cycles, 3) for h in (chips[0], chips[-1])}
            assert len(costs) == 1


def test_wall_relaxation_reaches_the_exact_joint_optimum_in_every_cell(capacity):
    study, rows = capacity
    p = study.problem
    exact = {obj: brute_force(p, obj) for obj in p.objectives}
    cells = {(r["objective"], r["start"]) for r in rows}
    assert len(cells) == 6
    for r in rows:
        if r["method"] in ("wall relaxation", "coupled wall", "joint reference", "random + exact inner"):
            assert r["evaluated"] == pytest.approx(exact[r["objective"]], rel=1e-9), r
        if r["method"] == "joint reference":
            assert r["ratio"] == pytest.approx(r["enumeration_ratio"], rel=1e-9)   # MILP = enumeration
    wr = [r for r in rows if r["method"] == "wall relaxation"]
    joint = [r for r in rows if r["method"] == "joint reference"]
    assert sum(r["inner_problems"] for r in wr) < sum(r["inner_problems"] for r in joint)
    for r in rows:
        if r["method"] in ("wall relaxation", "coupled wall"):
            assert r["calls"] <= r["bound"]
            assert r["recalibrations"] == 0
            for u in r["purchases"]:       # validated on the evaluator within the 5% band
                assert u["predicted_drop"] > 0
                assert abs(u["predicted_drop"] - u["evaluated_drop"]) <= 0.05 * abs(u["evaluated_drop"]) + 1e-12
                assert u["mechanism"]      # every purchase names the program it made legal


def test_joint_is_no_worse_than_single_side_methods_in_both_studies(capacity, table11):
    study, rows = capacity
    p = study.problem
    for obj in p.objectives:
        joint = next(r["evaluated"] for r in rows if r["objective"] == obj and r["method"] == "joint reference")
        hw = bl.hardware_only(p, obj, {sc: p.reference_programs[sc] for sc in p.objective(obj)})
        singles = [r["evaluated"] for r in rows if r["objective"] == obj
                   and r["method"] in ("fixed hardware", "sequential")] + [hw.evaluated]
        assert joint <= min(singles) + 1e-12
    study, rows = table11
    for obj in study.problem.objectives:
        by = {r["method"]: r for r in rows if r["objective"] == obj}
        joint = by["joint reference"]["evaluated"]
        assert joint <= min(by[m]["evaluated"] for m in ("software only", "hardware only", "sequential")) + 1e-12
        assert by["joint reference"]["ratio"] == pytest.approx(by["joint reference"]["enumeration_ratio"], rel=1e-9)


def test_table11_joint_matches_brute_force_on_a_sample(table11):
    """The vectorized enumeration and the MILP agree with listing chips one by one (a sample of
    the 432-chip domain that includes the chosen chip, to keep the test short)."""
    study, rows = table11
    p = study.problem
    chips = p.library.chips()
    for obj in ("prefill", "decode"):
        joint = next(r for r in rows if r["objective"] == obj and r["method"] == "joint reference")
        chosen = next(h for h in chips if h.label(p.library.open_components()) == joint["chip"])
        sample = [chosen] + chips[:: max(1, len(chips) // 8)]
        assert brute_force(p, obj, [chosen]) == pytest.approx(joint["evaluated"], rel=1e-9)
        assert brute_force(p, obj, sample) >= joint["evaluated"] - 1e-12


def test_table11_ordering_follows_what_bounds_the_reference_programs(table11):
    """Hardware only ranks below software only here (the seed ranks it above) because the prefill
    reference is bound by instruction issue, which no open hardware field raises, and the decode
    reference is memory-bound, which resident warps relieve by half (RESULTS.md explains)."""
    study, rows = table11
    by = {r["scenario"]: r for r in tables.table11_bottlenecks(study) if r["objective"] in ("prefill", "decode")}
    for sc in ("p128", "p512"):
        r = by[sc]
        assert r["memory_zeroed"] > 0.97 and r["compute_zeroed"] < 0.55           # issue-bound
        assert r["hardware_only_ratio"] > 0.98 and r["software_only_ratio"] < 0.4
    for sc in ("d128", "d512"):
        r = by[sc]
        assert r["compute_zeroed"] > 0.999 and r["memory_zeroed"] < 0.2           # memory-bound
        assert 0.45 < r["hardware_only_ratio"] < 0.55 and r["hardware_only_changes"]["warps"] == (8, 16)
        assert r["software_only_ratio"] < r["hardware_only_ratio"]
    for obj in ("prefill", "decode", "all"):
        cells = {r["method"]: r["evaluated"] for r in rows if r["objective"] == obj}
        assert cells["software only"] < cells["hardware only"]
