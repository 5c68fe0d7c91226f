"""Wall relaxation on a library template (gemm-tiling on the illustrative hardware library), checked
against an independent oracle: the tiling study's cost written out in plain Python from the seed's
description and minimized by listing every design, at every chip."""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from formloop.codesign import baselines as bl
from formloop.codesign.chip_proofs import ChipCertificate
from formloop.codesign.study import load_study
from formloop.codesign.template_problem import TemplateCoDesign, without
from formloop.codesign.walls import InnerSolver, relax_walls
from formloop.errors import InvalidInput
from formloop.expr import render
from formloop.hw.libraries import get_library
from formloop.library import get_template
from formloop.solve.enumerate import feasible_mask
from formloop.verify import Verdict

STUDY = Path(__file__).resolve().parents[1] / "studies" / "wall_relaxation_gemm_tiling.toml"
MENUS = {"Tm": (16, 32, 64, 128, 256), "Tn": (16, 32, 64, 128, 256), "Tk": (8, 16, 32, 64), "S": (1, 2, 3),
         "P": (0, 1, 2), "beta": (0, 1)}


def oracle_us(shape, ms: int, r_acc: int) -> float:
    """The best design's latency (µs) on the illustrative chip with shared memory `ms` bytes and
    `r_acc` accumulators: C1, C2, C3 (exact) and the roofline cost, by listing all 1,800 designs."""
    M, N, K = shape
    e, n_sm, flops, bw, t_bar = 4, 128, 80e12, 1.8e12, 40 / 1.8e9
    best = math.inf
    for tm, tn, tk, s, p, beta in itertools.product(*MENUS.values()):
        if s * e * (tm * tk + tk * tn) > ms or not 256 <= tm * tn <= r_acc or p > s - 2 + beta:
            continue
        waves = math.ceil(math.ceil(M / tm) * math.ceil(N / tn) / n_sm)
        t_comp = waves * (2 * tm * tn * K / (flops / n_sm) + math.ceil(K / tk) * (1 + beta) * t_bar) * 1e6
        t_mem = (M * K * e * math.ceil(N / tn) + K * N * e * math.ceil(M / tm) + M * N * e) / bw * 1e6
        best = min(best, max(t_comp, t_mem, t_comp + (t_mem if p == 0 else 0)))
    return best


SHAPES = {"sq4096": (4096, 4096, 4096), "skinny": (64, 4096, 4096), "ragged1000": (1000, 1000, 1000)}


@pytest.fixture(scope="module")
def study():
    return load_study(STUDY)


@pytest.fixture(scope="module")
def oracle(study):
    """Oracle ratio per (chip values, scenario) over every chip of the study's domain."""
    lib = study.problem.library
    ref = {sc: oracle_us(s, 96 * 1024, 32768) for sc, s in SHAPES.items()}
    return {(h.values, sc): oracle_us(s, h["smem_kib"] * 1024, h["regs_k"] * 512) / ref[sc]
            for h in lib.chips(within_ceiling=False) for sc, s in SHAPES.items()}


def exact(problem, oracle, objective):
    return min(max(oracle[(h.values, sc)] for sc in problem.objective(objective)) for h in problem.library.chips())


def test_walls_are_the_constraints_bounded_by_moved_chip_parameters(study):
    p = study.problem
    assert [(w.name, w.resource, w.param, w.constraint) for w in p.walls] == [
        ("C1:Ms", "smem_kib", "Ms", "C1"), ("C2:R_acc", "regs_k", "R_acc", "C2")]
    assert render(p.wall("C1:Ms").demand) == "(S * e) * (Tm * Tk + Tk * Tn)"
    assert render(p.wall("C2:R_acc").demand) == "Tm * Tn"
    # n_sm, bw, flops, t_bar do not move in this library: no wall, a constant in the joint formulation
    assert all(p.tables[n][0] is None for n in ("n_sm", "bw", "flops", "t_bar"))
    assert p.tables["Ms"][0] == "smem_kib" and p.tables["R_acc"][1][128] == 65536
    # removing C2's wall keeps its lower half; removing C1's drops the constraint
    t = p.template
    relaxed = without(t, [p.wall("C2:R_acc").rule])
    assert render(next(c for c in relaxed.constraints if c.name == "C2").expr) == "Tm * Tn >= 256"
    assert [c.name for c in without(t, [p.wall("C1:Ms").rule]).constraints] == ["C2", "C3"]


def test_solve_at_every_chip_matches_the_oracle(study, oracle):
    p = study.problem
    for h in p.library.chips(within_ceiling=False):
        for sc in SHAPES:
            assert p.solve_scenario(sc, h).ratio == pytest.approx(oracle[(h.values, sc)], rel=1e-9), (h.values, sc)


def test_milp_and_enumeration_solve_alike():
    lib = get_library("illustrative").restrict({"smem_kib": (16, 96), "regs_k": (16, 64)})
    scenarios = {"ragged1000": {"M": 1000, "N": 1000, "K": 1000, "e": 4}}
    kw = dict(name="t", template=get_template("gemm-tiling"), library=lib, scenarios=scenarios,
              objectives={"c": ("ragged1000",)})
    milp, enum = TemplateCoDesign(solver="milp", **kw), TemplateCoDesign(solver="enumerate", **kw)
    for h in lib.chips(within_ceiling=False):
        a, b = milp.solve_scenario("ragged1000", h), enum.solve_scenario("ragged1000", h)
        assert a.ratio == pytest.approx(b.ratio, rel=1e-9)
    with pytest.raises(InvalidInput, match="inner solver"):
        TemplateCoDesign(solver="simplex", **kw)


def test_joint_milp_and_enumeration_equal_the_oracle_on_a_small_domain(oracle):
    lib = get_library("illustrative").restrict({"smem_kib": (16, 24, 96), "regs_k": (16, 32, 64)}, ceiling_mm2=430)
    scenarios = {sc: {"M": s[0], "N": s[1], "K": s[2], "e": 4} for sc, s in SHAPES.items()}
    p = TemplateCoDesign("small", get_template("gemm-tiling"), lib, scenarios, {"mixed": tuple(SHAPES)},
                         solver="enumerate")
    milp, enum = bl.joint_milp(p, "mixed"), bl.joint_enumeration(p, "mixed")
    truth = exact(p, oracle, "mixed")
    assert milp.ratio == pytest.approx(truth, rel=1e-9) and enum.ratio == pytest.approx(truth, rel=1e-9)
    assert milp.evaluated == pytest.approx(truth, rel=1e-9)      # the evaluator agrees at the chosen design


def test_coupled_walls_need_the_coupled_variant(study, oracle):
    """Proposition 1 on a real template: a larger tile needs more registers (C2) and more shared
    memory (C1) at once, so from 16 KiB / 32 Ki registers neither single screen passes, the pair
    does, and only the coupled variant reaches the joint optimum."""
    p, lib = study.problem, study.problem.library
    h = lib.chip(**{**lib.reference.as_dict(), "smem_kib": 16, "regs_k": 32})
    S = InnerSolver(p, "memory")
    base = S.solve(h).L
    assert S.solve(h, {"C1:Ms"}).L == pytest.approx(base) and S.solve(h, {"C2:R_acc"}).L == pytest.approx(base)
    assert S.solve(h, {"C1:Ms", "C2:R_acc"}).L < base - 0.3
    for objective in p.objectives:
        truth = exact(p, oracle, objective)
        for start in study.starts.values():
            plain = relax_walls(p, objective, start[objective], k=study.k)
            coupled = relax_walls(p, objective, start[objective], k=study.k, coupled=True)
            assert coupled.L == pytest.approx(truth, rel=1e-9) and coupled.evaluated == pytest.approx(truth, rel=1e-9)
            assert plain.L >= truth - 1e-12 and plain.calls <= plain.bound and coupled.calls <= coupled.bound
    stuck = relax_walls(p, "memory", study.starts["small"]["memory"])
    assert stuck.L == pytest.approx(oracle[(h.values, "sq4096")]) and stuck.chip == h


def test_every_chip_scored_is_proved_at_its_parameters(study):
    p = study.problem
    r = relax_walls(p, "mixed", study.starts["small"]["mixed"], coupled=True)
    assert r.purchases and r.certificates
    for u in r.purchases:
        cert = u.certificate
        assert cert.verdict is Verdict.PROVED
        assert cert.params["Ms"] == u.after["smem_kib"] * 1024 and cert.params["R_acc"] == u.after["regs_k"] * 512
        assert {o.obligation for o in cert.obligations} >= {"K1", "K3"}
    names = p.library.open_components()
    assert r.chip.label(names) in r.certificates and r.start.label(names) in r.certificates


def test_relaxation_passes_over_chips_that_are_not_proved(study):
    """A prover that refuses every chip with 64 Ki registers or more: the coupled search never
    buys one, says so in its events, and settles for the best proved chip it can reach."""
    p0 = study.problem

    def refuse_large(template, chip):
        ok = chip.registers_per_sm < 64 * 1024
        return ChipCertificate(chip.name, Verdict.PROVED if ok else Verdict.COUNTEREXAMPLE, "test prover")

    p = TemplateCoDesign(p0.name, p0.template, p0.library, p0.scenarios, p0.objectives, prover=refuse_large,
                         solver="enumerate")
    r = relax_walls(p, "memory", study.starts["small"]["memory"], coupled=True)
    assert all(u.after["regs_k"] < 64 for u in r.purchases) and r.chip["regs_k"] < 64
    assert any(e.startswith("pass over") for e in r.events)
    with pytest.raises(InvalidInput, match="start chip"):
        relax_walls(p, "memory", study.starts["reference"]["memory"])


def test_an_unproved_contract_is_refused_at_the_start_chip(study):
    p0 = study.problem
    weak = get_template("gemm-tiling", pre="weak")
    p = TemplateCoDesign("weak", weak, p0.library, {"ragged1000": p0.scenarios["ragged1000"]},
                         {"compute": ("ragged1000",)}, solver="enumerate")
    with pytest.raises(InvalidInput, match="K1 counterexample"):
        relax_walls(p, "compute", study.starts["small"]["compute"])


def test_schedules_admitted_are_the_same_at_every_chip(study):
    """FixedChipProver reuses the family certificate's schedule obligations, proved for the (S, P,
    beta) that C admits at the proof-plan chip: that set must not change with the chip."""
    p = study.problem
    t = p.template

    def schedules(chip):
        f = t.formulate(p.scenarios["ragged1000"], chip)
        mask = feasible_mask(f)
        axes = [i for i, d in enumerate(f.decisions) if d.name in ("S", "P", "beta")]
        keep = mask.any(axis=tuple(i for i in range(mask.ndim) if i not in axes))
        return {tuple(int(v) for v in idx) for idx in np.argwhere(keep)}

    from formloop.hw.chips import get_chip

    plan_chip = schedules(get_chip("illustrative"))
    assert len(plan_chip) == 9                 # P <= S - 2 + beta over S in 1..3, P in 0..2, beta in 0..1
    for h in p.library.chips(within_ceiling=False):
        assert schedules(h.chip) == plan_chip, h.values
