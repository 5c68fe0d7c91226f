"""Wall relaxation on problems with hand-worked answers: Propositions 1 and 2, a forced cost-model
miss, and the inner-solve bound."""
from __future__ import annotations

import itertools

import pytest

from formloop.codesign.problem import CoDesignProblem, WallSpec
from formloop.codesign.ventus_model import Cost
from formloop.codesign.walls import InnerSolver, relax_walls, solve_chip
from formloop.errors import InvalidInput
from formloop.hw.library import Component, HardwareLibrary

TERMS = ("compute", "memory")


def table_cost(p, h, scenario, k):
    """Cycles = k_compute·compute + k_memory·memory, per program, independent of the chip."""
    return Cost(k["compute"] * p["comp"] + k["memory"] * p["mem"], {"compute": p["comp"], "memory": p["mem"]})


def toy_problem(programs: list[dict], walls: dict[str, tuple], *, calibration=None, ceiling=10.0,
                mm2: dict[str, float] | None = None) -> CoDesignProblem:
    """One scenario `s`; each wall `w` is a chip component with menu walls[w] and mm2[w] (default 1)
    mm² per unit."""
    comps = [Component("sm", "SMs", (1,), False)]
    comps += [Component(w, "units", tuple(menu), False, logic_mm2=(mm2 or {}).get(w, 1.0)) for w, menu in walls.items()]
    ref = {"sm": 1, **{w: menu[0] for w, menu in walls.items()}}
    lib = HardwareLibrary("toy", tuple(comps), ceiling, 0.0, ref)
    wall_specs = tuple(WallSpec(w, w, (lambda name: lambda p, h: p[name])(f"need_{w}")) for w in walls)
    progs = [{"family": "toy", **p} for p in programs]
    return CoDesignProblem(name="toy", library=lib, programs={"toy": progs}, scenarios={"s": "toy"},
                           objectives={"s": ("s",)}, walls=wall_specs, cost=table_cost, terms=TERMS,
                           reference_programs={"s": programs[0]["name"]}, calibration=dict(calibration or {}))


def proposition1() -> CoDesignProblem:
    """Seed 000 §3: two walls at capacity 1; A needs (1,1) and costs 10, B needs (2,2) and costs 1."""
    return toy_problem([
        {"name": "A", "need_w1": 1, "need_w2": 1, "comp": 10, "mem": 0},
        {"name": "B", "need_w1": 2, "need_w2": 2, "comp": 1, "mem": 0},
    ], {"w1": (1, 2), "w2": (1, 2)})


def miscalibrated() -> CoDesignProblem:
    """One wall w1 in {1,2,3}. True cycles: A 10 (needs 1), B 2+8=10 (needs 2), C 3+3=6 (needs 3).
    The search model starts with memory at 1/4, so it believes B costs 4: buying w1+1 for B is a
    predicted drop of 0.6 that the evaluator measures as 0. After refitting memory, the true best
    move is w1+2 (C, ratio 0.6)."""
    return toy_problem([
        {"name": "A", "need_w1": 1, "comp": 10, "mem": 0},
        {"name": "B", "need_w1": 2, "comp": 2, "mem": 8},
        {"name": "C", "need_w1": 3, "comp": 3, "mem": 3},
    ], {"w1": (1, 2, 3)}, calibration={"memory": 0.25})


def knapsack() -> CoDesignProblem:
    """Area binds. Walls w1 (3 mm² per unit), w2 and w3 (1 mm² each), all at 1, start area 5 mm²,
    ceiling 8 mm². A costs 10 (the reference), B needs w1=2 and costs 5, C needs w2=2 and costs 8, D
    needs w2=w3=2 and costs 4. Largest drop first buys w1 (0.5 for 3 mm²) and then cannot afford
    anything; per mm² it buys w2 (0.2 for 1 mm²), then w3 (0.4 for 1 mm²) and ends at D, 0.4."""
    return toy_problem([
        {"name": "A", "need_w1": 1, "need_w2": 1, "need_w3": 1, "comp": 10, "mem": 0},
        {"name": "B", "need_w1": 2, "need_w2": 1, "need_w3": 1, "comp": 5, "mem": 0},
        {"name": "C", "need_w1": 1, "need_w2": 2, "need_w3": 1, "comp": 8, "mem": 0},
        {"name": "D", "need_w1": 1, "need_w2": 2, "need_w3": 2, "comp": 4, "mem": 0},
    ], {"w1": (1, 2), "w2": (1, 2), "w3": (1, 2)}, ceiling=8.0, mm2={"w1": 3.0})


def brute_force(problem, objective):
    """min over chips within the ceiling and admitted programs of the evaluator's worst ratio."""
    best = float("inf")
    for h in problem.library.chips():
        worst = 0.0
        for sc in problem.objective(objective):
            ok = [problem.measure(sc, p["name"], h).ratio for p in problem.menu(sc)
                  if not problem.admitted(sc, p["name"], h)]
            worst = max(worst, min(ok, default=float("inf")))
        best = min(best, worst)
    return best


def test_proposition1_single_wall_screen_misses_the_joint_step():
    p = proposition1()
    start = p.library.reference
    S = InnerSolver(p, "s")
    base = S.solve(start).L
    assert base == pytest.approx(1.0)                       # A, the reference
    assert S.solve(start, {"w1"}).L == pytest.approx(1.0)   # Λ1 = 0: B still blocked by w2
    assert S.solve(start, {"w2"}).L == pytest.approx(1.0)   # Λ2 = 0
    assert S.solve(start, {"w1", "w2"}).L == pytest.approx(0.1)
    assert solve_chip(p, "s", start) == ({"s": "A"}, pytest.approx(1.0), {})   # B(h) is empty
    plain = relax_walls(p, "s", start)
    assert plain.L == pytest.approx(1.0) and not plain.purchases
    assert plain.chip == start and plain.calls == 3         # initial solve + two screens
    coupled = relax_walls(p, "s", start, coupled=True)
    assert coupled.L == pytest.approx(0.1) and base / coupled.L == pytest.approx(10.0)
    assert [u.move for u in coupled.purchases] == ["w1+1,w2+1"]
    assert coupled.chip.as_dict() == {"sm": 1, "w1": 2, "w2": 2}
    assert coupled.L == pytest.approx(brute_force(p, "s"))


def test_forced_cost_model_miss_discards_prices_and_resolves_incumbent():
    p = miscalibrated()
    start = p.library.reference
    r = relax_walls(p, "s", start)
    assert r.recalibrations == 1
    miss = [e for e in r.events if e.startswith("miss")]
    assert len(miss) == 1 and "recalibrated memory" in miss[0] and "discarded" in miss[0]
    assert p.calibration["memory"] == pytest.approx(1.0)    # refit to the evaluator
    # The incumbent was re-solved under the new model (version 1), and every price after the miss
    # was recomputed under it: no purchase rests on a version-0 price.
    assert (1, start.values, frozenset()) in r.keys
    kinds = [k for k, *_ in r.path]
    assert kinds[:2] == ["start", "recalibrated"] and kinds[2] == "buy"
    assert all(ver == 1 for kind, _, _, ver in r.path if kind == "buy")
    assert [u.move for u in r.purchases] == ["w1+2"]        # the wrongly priced B step was never bought
    for u in r.purchases:                                    # every purchase validated within the band
        assert abs(u.predicted_drop - u.evaluated_drop) <= 0.05 * abs(u.evaluated_drop) + 1e-12
    assert r.evaluated == pytest.approx(0.6) and r.evaluated == pytest.approx(brute_force(p, "s"))


def test_proposition2_L_never_increases_within_a_fixed_model():
    for problem_factory, kwargs in ((proposition1, {"coupled": True}), (miscalibrated, {})):
        p = problem_factory()
        r = relax_walls(p, "s", p.library.reference, **kwargs)
        for (_, _, a, va), (kind, _, b, vb) in itertools.pairwise(r.path):
            if va == vb:
                assert b <= a + 1e-12, (kind, a, b)


def test_start_over_ceiling_is_refused():
    p = toy_problem([{"name": "A", "need_w1": 1, "need_w2": 1, "comp": 1, "mem": 0}],
                    {"w1": (1, 2), "w2": (1, 2)}, ceiling=3.0)
    with pytest.raises(InvalidInput, match="start chip"):
        relax_walls(p, "s", p.library.chip(sm=1, w1=2, w2=2))     # 4 mm2 > 3 mm2


def test_inner_solve_bound_holds():
    for factory, coupled in ((proposition1, False), (proposition1, True), (miscalibrated, False)):
        p = factory()
        r = relax_walls(p, "s", p.library.reference, coupled=coupled)
        assert r.calls <= r.bound
        assert r.inner_problems <= r.calls


def test_moves_are_priced_per_mm2_where_area_binds():
    p = knapsack()
    start = p.library.reference
    assert start.area == pytest.approx(5.0) and brute_force(p, "s") == pytest.approx(0.4)
    r = relax_walls(p, "s", start)
    assert [u.move for u in r.purchases] == ["w2+1", "w3+1"]
    assert r.L == pytest.approx(0.4) and r.chip.as_dict() == {"sm": 1, "w1": 1, "w2": 2, "w3": 2}
    raw = relax_walls(knapsack(), "s", start, gain="raw")    # the ablation: drop alone, area ignored
    assert [u.move for u in raw.purchases] == ["w1+1"] and raw.L == pytest.approx(0.5)
    with pytest.raises(InvalidInput, match="gain"):
        relax_walls(p, "s", start, gain="per_area")
