"""The methods wall relaxation is compared with (seed 000 §5.5, Tables 11–12).

fixed hardware (software only) — SOLVE at one chip;
hardware only — software fixed (the reference programs), the best chip within the ceiling;
sequential — software at the start chip, then hardware with that software fixed;
random + exact inner — a seeded sample of chips within the ceiling, each SOLVEd exactly;
joint reference — one MILP over both sides, cross-checked by exhaustive scenario-decomposed
enumeration over every chip within the ceiling (whose inner problems it counts).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from formloop.codesign.walls import InnerSolver
from formloop.errors import Infeasible, InvalidInput
from formloop.hw.library import ChipConfig
from formloop.solve import enumerate_designs, solve_milp
from formloop.solve.enumerate import MAX_POINTS, feasible_mask, term_grid


@dataclass
class MethodResult:
    method: str
    objective: str
    chip: ChipConfig | None
    software: dict
    ratio: float                 # model's worst-scenario ratio of the chosen design
    evaluated: float             # evaluator's (tier: model) ratio of the same design
    inner_problems: int
    extra: dict = field(default_factory=dict)


def evaluate_design(problem, chip: ChipConfig | None, software: dict) -> float:
    if chip is None or any(p is None for p in software.values()):
        return float("inf")
    return max(problem.measure(sc, prog, chip).ratio for sc, prog in software.items())


def fixed_hardware(problem, objective: str, chip: ChipConfig) -> MethodResult:
    """Software only: the best programs on `chip` (one inner problem)."""
    S = InnerSolver(problem, objective)
    inner = S.solve(chip)
    return MethodResult("fixed hardware", objective, chip, inner.software, inner.L,
                        evaluate_design(problem, chip, inner.software), len(S.problems))


def hardware_only(problem, objective: str, software: dict[str, str],
                  method: str = "hardware only") -> MethodResult:
    """The best chip within the ceiling for fixed programs (every chip checked; no inner problem)."""
    scs = problem.objective(objective)
    t = problem.template_for(scs, None, software={sc: software[sc] for sc in scs})
    f = t.formulate({})
    chips = len(problem.library.chips())
    try:
        sol = enumerate_designs(f)
    except Infeasible:
        return MethodResult(method, objective, None, dict(software), float("inf"), float("inf"), 0,
                            {"hardware_checked": chips})
    chip = _chip_of(problem, sol.assignment)
    return MethodResult(method, objective, chip, dict(software), float(sol.objective),
                        evaluate_design(problem, chip, software), 0, {"hardware_checked": chips})


def sequential(problem, objective: str, start: ChipConfig) -> MethodResult:
    """Software at the start chip, then the best chip for that software."""
    first = fixed_hardware(problem, objective, start)
    if any(p is None for p in first.software.values()):
        return MethodResult("sequential", objective, start, first.software, first.ratio, first.evaluated, 1)
    hw = hardware_only(problem, objective, first.software, "sequential")
    # Ties keep the start chip: sequential design buys hardware only when it helps.
    if hw.ratio >= first.ratio:
        hw.chip, hw.ratio, hw.evaluated = start, first.ratio, first.evaluated
    hw.inner_problems = first.inner_problems
    return hw


def random_search(problem, objective: str, budget: int | None, seed: int) -> MethodResult:
    """A seeded random order of the chips within the ceiling, the first `budget` SOLVEd exactly."""
    chips = problem.library.chips()
    order = np.random.default_rng(seed).permutation(len(chips))
    budget = len(chips) if budget is None else min(budget, len(chips))
    S = InnerSolver(problem, objective)
    best = None
    trajectory = []
    for i in order[:budget]:
        inner = S.solve(chips[int(i)])
        if best is None or inner.L < best.L or (inner.L == best.L and inner.chip.area < best.chip.area):
            best = inner
        trajectory.append((len(S.problems), best.L))
    return MethodResult("random + exact inner", objective, best.chip, best.software, best.L,
                        evaluate_design(problem, best.chip, best.software), len(S.problems),
                        {"seed": seed, "trajectory": trajectory})


def joint_milp(problem, objective: str) -> MethodResult:
    """One MILP over programs and chip decisions under the area ceiling (worst-scenario ratio)."""
    scs = problem.objective(objective)
    f = problem.template_for(scs).formulate({})
    sol = solve_milp(f)
    chip = _chip_of(problem, sol.assignment)
    software = {sc: problem.software_of(sc, sol.assignment) for sc in scs}
    return MethodResult("joint reference", objective, chip, software, float(sol.objective),
                        evaluate_design(problem, chip, software), len(problem.library.chips()),
                        {"milp_seconds": sol.seconds, "milp_model": sol.model.as_dict()})


def joint_enumeration(problem, objective: str) -> MethodResult:
    """Exhaustive joint search: each scenario's best admitted software at every chip (one numpy
    pass over the software × chip grid), the worst scenario per chip, the best chip in the ceiling."""
    scs = problem.objective(objective)
    worst = None
    best_sw: dict[str, np.ndarray] = {}
    for sc in scs:
        f = problem.template_for((sc,)).formulate({})
        if int(np.prod([len(d.decision.menu) for d in f.decisions])) > MAX_POINTS:
            raise Infeasible(f.template.name, ["joint grid larger than the enumeration limit"])
        sw, hw = _split(f)
        cost = np.where(feasible_mask(f), term_grid(f, f.cost), np.inf).reshape(-1, *hw)
        best_sw[sc] = np.argmin(cost, axis=0)
        per_chip = cost.min(axis=0)
        worst = per_chip if worst is None else np.maximum(worst, per_chip)
    chip_decisions = [d for d in f.decisions if d.decision.side == "chip"]
    f0 = problem.template_for((scs[0],)).formulate({})
    fits = feasible_mask(f0, [c for c in f0.constraints if c.group == "area"]).reshape(-1, *_split(f0)[1])
    within = fits.any(axis=0)
    total = worst + np.where(within, 0.0, np.inf)
    best = float(np.min(total))
    # Among tied chips, the smallest area (as wall relaxation breaks near-ties).
    tied = np.argwhere(total <= best + 1e-9 * max(1.0, abs(best))) if total.ndim else [()]
    candidates = []
    for idx in tied:
        idx = tuple(int(i) for i in idx)
        chip = _chip_of(problem, {d.name: d.decision.menu[i] for d, i in zip(chip_decisions, idx)})
        candidates.append((chip.area, idx, chip))
    _, idx, chip = min(candidates, key=lambda c: c[0])
    software = {}
    for sc in scs:
        f = problem.template_for((sc,)).formulate({})
        sw_decisions = [d for d in f.decisions if d.decision.side != "chip"]
        pos = np.unravel_index(int(best_sw[sc][idx]), _split(f)[0])
        software[sc] = problem.software_of(sc, {d.name: d.decision.menu[int(i)] for d, i in zip(sw_decisions, pos)})
    return MethodResult("joint enumeration", objective, chip, software, float(total[idx]),
                        evaluate_design(problem, chip, software), len(problem.library.chips()),
                        {"chips_within_ceiling": int(within.sum())})


def _split(f) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Menu sizes of the software decisions and of the chip decisions (software declared first)."""
    sides = [d.decision.side for d in f.decisions]
    if "chip" in sides and sides[sides.index("chip"):].count("software"):
        raise InvalidInput("decision order of the joint formulation", sides, "software decisions before chip decisions")
    sw = tuple(len(d.decision.menu) for d in f.decisions if d.decision.side != "chip")
    hw = tuple(len(d.decision.menu) for d in f.decisions if d.decision.side == "chip")
    return sw or (1,), hw


def _chip_of(problem, assignment: dict) -> ChipConfig:
    values = problem.library.reference.as_dict()
    values.update({k: v for k, v in assignment.items() if k in values})
    return problem.library.chip(**values)
