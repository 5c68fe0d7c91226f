"""The shared-memory tiling template against the seed's Appendix A and an independent cost model."""
import math
import random

import numpy as np
import pytest

from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import bound_class, workload
from formloop.solve import enumerate_designs, solve_milp
from formloop.solve.enumerate import assignment_at, feasible_mask, term_grid

CHIP = get_chip("illustrative")
PAPER_SHAPES = {(4096, 4096, 4096): (1826.9, "memory"), (64, 4096, 4096): (75.1, "memory"),
                (1000, 1000, 1000): (53.1, "compute")}


def formulation(shape, pre="exact"):
    return get_template("gemm-tiling", pre=pre).formulate(workload(shape), CHIP)


def reference_time_us(M, N, K, Tm, Tn, Tk, S, P, beta):
    """DESIGN.md's cost model written out in plain Python, sharing nothing with the template."""
    e, bw, sms, rate, barrier = 4, 1.8e12, 128, 80e12, 40 / 1.8e9
    mem_bytes = e * (M * K * math.ceil(N / Tn) + K * N * math.ceil(M / Tm) + M * N)
    t_mem = mem_bytes / bw
    blocks = math.ceil(M / Tm) * math.ceil(N / Tn)
    per_block = 2 * Tm * Tn * K / (rate / sms) + math.ceil(K / Tk) * (1 + beta) * barrier
    t_comp = math.ceil(blocks / sms) * per_block
    t = max(t_comp, t_mem) if P > 0 else t_comp + t_mem
    return t * 1e6


def test_exact_contract_admits_722_designs():
    assert int(feasible_mask(formulation((1000, 1000, 1000))).sum()) == 722


def test_feasible_set_matches_the_rules_written_by_hand():
    f = formulation((1000, 1000, 1000))
    mask = feasible_mask(f).ravel()
    for i in range(mask.size):
        d = assignment_at(f, i)
        smem = d["S"] * 4 * (d["Tm"] * d["Tk"] + d["Tk"] * d["Tn"])
        legal = smem <= 96 * 1024 and 256 <= d["Tm"] * d["Tn"] <= 32768 and d["P"] <= d["S"] - 2 + d["beta"]
        assert bool(mask[i]) == legal, d


@pytest.mark.parametrize("seed", range(5))
def test_cost_model_equals_independent_formula(seed):
    rng = random.Random(seed)
    shape = tuple(rng.randint(1, 8192) for _ in range(3))
    f = formulation(shape)
    grid = term_grid(f, f.cost).ravel()
    for i in rng.sample(range(grid.size), 200):
        d = assignment_at(f, i)
        assert grid[i] == pytest.approx(reference_time_us(*shape, **d), rel=1e-12)


@pytest.mark.parametrize("shape", list(PAPER_SHAPES), ids=str)
def test_paper_optima(shape):
    paper_us, paper_class = PAPER_SHAPES[shape]
    sol = solve_milp(formulation(shape))
    assert round(sol.objective, 1) == paper_us
    assert bound_class(sol.terms) == paper_class
    assert sol.gap <= 1e-9


def test_ragged_shape_has_the_papers_unique_optimum_at_capacity():
    f = formulation((1000, 1000, 1000))
    enum = enumerate_designs(f)
    assert enum.ties == ({"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0},)
    assert solve_milp(f).assignment == enum.ties[0]
    assert enum.terms["smem_bytes"] == 96 * 1024


def test_strong_contract_loses_1_34_percent_only_on_the_compute_bound_shape():
    losses = {}
    for shape in PAPER_SHAPES:
        exact = solve_milp(formulation(shape, "exact")).objective
        strong = solve_milp(formulation(shape, "strong")).objective
        losses[shape] = round(100 * (strong / exact - 1), 2)
    assert losses == {(4096, 4096, 4096): 0.0, (64, 4096, 4096): 0.0, (1000, 1000, 1000): 1.34}


@pytest.mark.parametrize("shape", list(PAPER_SHAPES), ids=str)
def test_weak_contract_picks_a_design_the_exact_precondition_rejects(shape):
    template = get_template("gemm-tiling", pre="weak")
    sol = solve_milp(template.formulate(workload(shape), CHIP))
    d = sol.assignment
    assert d["P"] > d["S"] - 2 + d["beta"]
    violations = template.check(d, workload(shape), CHIP)
    assert [(v.kind, v.name) for v in violations] == [("precondition", "lifetime")]
    # the racy pick costs the same as the exact optimum: the model cannot see the race
    assert sol.objective == pytest.approx(solve_milp(formulation(shape)).objective, rel=1e-9)


def random_shapes(n, seed=2024):
    rng = np.random.default_rng(seed)
    # log-uniform extents from 1 to 8192 so that skinny, ragged and large shapes all appear
    return [tuple(int(v) for v in np.exp(rng.uniform(0, np.log(8192), 3)).round().clip(1, 8192)) for _ in range(n)]


@pytest.mark.parametrize("pre", ["exact", "strong", "weak"])
def test_milp_equals_enumeration_on_200_random_shapes(pre):
    template = get_template("gemm-tiling", pre=pre)
    for shape in random_shapes(200):
        f = template.formulate(workload(shape), CHIP)
        enum = enumerate_designs(f)
        milp = solve_milp(f, break_ties=False)
        assert milp.objective == pytest.approx(enum.objective, rel=1e-9), shape
        assert dict(milp.assignment) in [dict(t) for t in enum.ties], shape


def test_tie_break_agrees_between_back_ends():
    template = get_template("gemm-tiling")
    for shape in random_shapes(25, seed=7):
        f = template.formulate(workload(shape), CHIP)
        assert solve_milp(f).assignment == enumerate_designs(f).assignment, shape


def test_instance_check_reports_each_broken_rule():
    template = get_template("gemm-tiling")
    wl = workload((1000, 1000, 1000))
    assert template.check({"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0}, wl, CHIP) == []
    broken = template.check({"Tm": 256, "Tn": 256, "Tk": 64, "S": 3, "P": 2, "beta": 0}, wl, CHIP)
    assert {v.name for v in broken} == {"C1", "C2", "C3", "lifetime"}
    off_menu = template.check({"Tm": 100, "Tn": 128, "Tk": 32, "S": 3, "P": 1}, wl, CHIP)
    assert {(v.kind, v.name) for v in off_menu} == {("menu", "Tm"), ("menu", "beta")}
