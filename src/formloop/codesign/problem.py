"""A co-design problem: scenarios with program menus, walls, a chip library and a cost model.

One declaration yields every formulation the search needs. Per scenario, the software decision
`prog_<scenario>` picks a program from its family's menu; each wall is a constraint
`demand(program, chip) <= h[resource]` whose right-hand side is a chip decision
(`decision(resource, menu, side="chip")`). Fixing the chip (SOLVE(h)) substitutes the chip's values
into the same expressions; removing a wall drops its constraint; the joint template keeps the
chip decisions open under the area ceiling and takes the worst scenario ratio as its objective.

Ratios are cycles divided by the evaluator's cycles for the reference program on the reference
chip (fixed at construction, so recalibrating the model never moves the yardstick).

Wall relaxation and the baselines read a problem through a small set of members, which
`TemplateCoDesign` (codesign/template_problem.py: a library template whose walls are chip
parameters) offers too: library, version, cache, objective, open_walls, wall, solve_scenario,
measure, demand, capacity, admitted, refit, recalibrate, certify, template_for, software_of,
reference_programs, source, unit.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import math

from formloop.codesign.chip_proofs import ChipCertificate, not_applicable
from formloop.errors import Infeasible, InvalidInput, UnknownName
from formloop.expr import Expr, const, decision, evaluate, maximum, where
from formloop.hw.library import ChipConfig, HardwareLibrary
from formloop.solve import solve_milp
from formloop.template import Constraint, Template

CostFn = Callable[[Mapping, Mapping, str, Mapping[str, float]], object]   # -> ventus_model.Cost-like


@dataclass(frozen=True)
class WallSpec:
    """A wall: `demand(p, h) <= h[resource]`, p the program's attributes, h the chip's values."""

    name: str
    resource: str
    demand: Callable[[Mapping, Mapping], object]
    doc: str = ""

    @property
    def limit(self) -> str:
        """The name of the capacity the wall is bounded by (here: the chip component)."""
        return self.resource


@dataclass
class CoDesignProblem:
    name: str
    library: HardwareLibrary
    programs: Mapping[str, Sequence[Mapping]]       # family -> program attribute dicts (with "name")
    scenarios: Mapping[str, str]                    # scenario -> family
    objectives: Mapping[str, tuple[str, ...]]       # objective -> scenarios whose worst ratio it is
    walls: tuple[WallSpec, ...]
    cost: CostFn
    terms: tuple[str, ...]
    reference_programs: Mapping[str, str]           # scenario -> program name
    truth: Mapping[str, float] = field(default_factory=dict)        # the evaluator's term factors
    calibration: dict[str, float] = field(default_factory=dict)     # the search model's factors
    version: int = 0                                                # bumps on every recalibration
    cache: dict = field(default_factory=dict, repr=False)           # (version, chip, removed, scenario) -> optimum
    source: str = "model (analytic Ventus-like evaluator)"
    unit: str = "worst-scenario cycle ratio to the reference program on the reference chip (evaluator: analytic model)"

    def __post_init__(self) -> None:
        for fam, progs in self.programs.items():
            if not progs:
                raise InvalidInput(f"program menu of family {fam}", [], "at least one program")
        for sc, fam in self.scenarios.items():
            if fam not in self.programs:
                raise UnknownName(f"family of scenario {sc}", fam, sorted(self.programs))
        for obj, scs in self.objectives.items():
            for sc in scs:
                if sc not in self.scenarios:
                    raise UnknownName(f"scenario of objective {obj}", sc, sorted(self.scenarios))
        comps = set(self.library.component_names)
        for w in self.walls:
            if w.resource not in comps:
                raise UnknownName(f"resource of wall {w.name}", w.resource, sorted(comps))
        self.truth = {t: 1.0 for t in self.terms} | dict(self.truth)
        self.calibration = {t: 1.0 for t in self.terms} | dict(self.calibration)
        self.reference_chip = self.library.reference
        self.reference_cycles = {sc: self.measure(sc, self.reference_programs[sc], self.reference_chip).cycles
                                 for sc in self.scenarios}

    # -- names ------------------------------------------------------------------------------
    def program(self, scenario: str, name: str) -> Mapping:
        for p in self.programs[self.scenarios[scenario]]:
            if p["name"] == name:
                return p
        raise UnknownName(f"program of scenario {scenario}", name, [p["name"] for p in self.menu(scenario)])

    def menu(self, scenario: str) -> Sequence[Mapping]:
        return self.programs[self.scenarios[scenario]]

    def objective(self, name: str) -> tuple[str, ...]:
        try:
            return tuple(self.objectives[name])
        except KeyError:
            raise UnknownName("objective", name, sorted(self.objectives)) from None

    def wall(self, name: str) -> WallSpec:
        for w in self.walls:
            if w.name == name:
                return w
        raise UnknownName("wall", name, [w.name for w in self.walls])

    @property
    def open_walls(self) -> tuple[WallSpec, ...]:
        """Walls whose resource the library lets move (the ones worth screening)."""
        open_ = set(self.library.open_components())
        return tuple(w for w in self.walls if w.resource in open_)

    # -- expressions ------------------------------------------------------------------------
    def software_decision(self, scenario: str) -> Expr:
        names = ", ".join(f"{i}={p['name']}" for i, p in enumerate(self.menu(scenario)))
        return decision(f"prog_{scenario}", range(len(self.menu(scenario))), doc=f"program for {scenario}: {names}")

    def attributes(self, scenario: str, choice: Expr | int) -> dict:
        """Program attributes: constants for a fixed choice, where-chains over the decision."""
        menu = self.menu(scenario)
        if not isinstance(choice, Expr):
            return dict(menu[choice])
        out: dict = {"family": self.scenarios[scenario]}
        for key in menu[0]:
            if key in ("name", "family"):
                continue
            values = [p[key] for p in menu]
            if all(v == values[0] for v in values):
                out[key] = values[0]
                continue
            expr = const(values[-1])
            for i in range(len(values) - 2, -1, -1):
                expr = where(choice.eq(i), values[i], expr)
            out[key] = expr
        return out

    def chip_values(self, chip: ChipConfig | None) -> dict:
        """Numbers for a fixed chip; chip decisions for open components when `chip` is None."""
        if chip is not None:
            return chip.as_dict()
        out = {}
        for c in self.library.components:
            out[c.name] = decision(c.name, c.menu, side="chip", doc=c.doc) if len(c.menu) > 1 else c.menu[0]
        return out

    def software_of(self, scenario: str, assignment: Mapping) -> str:
        """The program a joint solution picked for `scenario`."""
        return self.menu(scenario)[int(assignment[f"prog_{scenario}"])]["name"]

    def template_for(self, scenarios: Sequence[str], chip: ChipConfig | None = None,
                 removed: frozenset[str] = frozenset(), software: Mapping[str, str] | None = None) -> Template:
        """The formulation over `scenarios`: chip fixed (`chip`) or open under the ceiling,
        walls in `removed` dropped, programs fixed by name where `software` names them."""
        hv = self.chip_values(chip)
        decisions, constraints, ratios = [], [], []
        for sc in scenarios:
            if software and sc in software:
                menu_names = [p["name"] for p in self.menu(sc)]
                p = self.attributes(sc, menu_names.index(self.program(sc, software[sc])["name"]))
            else:
                d = self.software_decision(sc)
                decisions.append(d)
                p = self.attributes(sc, d)
            for w in self.walls:
                if w.name not in removed:
                    rule = const(w.demand(p, hv)) <= hv[w.resource]
                    constraints.append(Constraint(f"{w.name}@{sc}", rule, "wall", w.doc))
            # The reference is folded into the term factors so every epigraph lives in ratio
            # units: HiGHS drops matrix entries below 1e-9, which cycles/reference would produce.
            ref = self.reference_cycles[sc]
            ratios.append(self.cost(p, hv, sc, {t: v / ref for t, v in self.calibration.items()}).total)
        if chip is None:
            decisions += [v for v in hv.values() if isinstance(v, Expr)]
            constraints.append(Constraint("area", const(self.library.area_of(hv)) <= self.library.ceiling_mm2, "area",
                                          f"chip area within {self.library.ceiling_mm2} mm2"))
        constraints = [c for c in constraints if not _trivially_true(c.expr)]
        cost = maximum(*ratios) if len(ratios) > 1 else const(ratios[0])
        if not decisions:  # everything fixed: a one-point menu keeps the template well formed
            decisions.append(decision("fixed", (0,), doc="no open decision"))
        return Template(name=f"{self.name}:{'+'.join(scenarios)}", doc="co-design formulation",
                        decisions=tuple(decisions), params=(), scope=(), constraints=tuple(constraints),
                        preconditions=(), cost=cost, unit="ratio")

    # -- evaluation -------------------------------------------------------------------------
    def measure(self, scenario: str, program: str, chip: ChipConfig) -> "Measurement":
        """The evaluator: the cost formula at one design with the truth factors (tier: model)."""
        c = self.cost(self.program(scenario, program), chip.as_dict(), scenario, self.truth)
        cycles = float(evaluate(const(c.total), {}))
        raw = {t: float(evaluate(const(v), {})) for t, v in c.raw.items()}
        ref = getattr(self, "reference_cycles", {}).get(scenario, cycles)
        return Measurement(scenario, program, chip, cycles, cycles / ref, {t: raw[t] * self.truth[t] for t in raw})

    def bound_shares(self, scenario: str, program: str, chip: ChipConfig) -> dict[str, float]:
        """What bounds a program on a chip: its evaluator cycles with the memory term zeroed and with
        the compute term zeroed, as fractions of its cycles (near 1 with memory zeroed: issue-bound)."""
        total = self.measure(scenario, program, chip).cycles
        out = {}
        for label, zero in (("memory_zeroed", "memory"), ("compute_zeroed", "compute")):
            c = self.cost(self.program(scenario, program), chip.as_dict(), scenario, {**self.truth, zero: 0.0})
            out[label] = float(evaluate(const(c.total), {})) / total
        return out

    def predict_terms(self, scenario: str, program: str, chip: ChipConfig) -> dict[str, float]:
        c = self.cost(self.program(scenario, program), chip.as_dict(), scenario, self.calibration)
        return {t: float(evaluate(const(v), {})) * self.calibration[t] for t, v in c.raw.items()}

    def admitted(self, scenario: str, program: str, chip: ChipConfig) -> list[str]:
        """Walls the program breaks on `chip` (empty: admitted)."""
        p, hv = self.program(scenario, program), chip.as_dict()
        return [w.name for w in self.walls if not bool(evaluate(const(w.demand(p, hv) <= hv[w.resource]), {}))]

    def demand(self, scenario: str, program: str, wall: str, chip: ChipConfig) -> float:
        return float(evaluate(const(self.wall(wall).demand(self.program(scenario, program), chip.as_dict())), {}))

    def capacity(self, wall: str, chip: ChipConfig) -> float:
        return float(chip[self.wall(wall).resource])

    def solve_scenario(self, scenario: str, chip: ChipConfig,
                       removed: frozenset[str] = frozenset()) -> "ScenarioOptimum":
        return solve_scenario(self, scenario, chip, frozenset(removed))

    def certify(self, chip: ChipConfig) -> ChipCertificate:
        """Program menus carry no template obligations: every chip is admitted as far as proofs go."""
        return not_applicable(chip.label())

    def refit(self, optima, chip: ChipConfig) -> tuple[str, float] | None:
        """The cost term whose prediction is furthest (in ratio) from the evaluator on these
        scenario optima at `chip`, with the factor that refits it."""
        worst, best = -1.0, None
        for o in optima:
            if o.program is None:
                continue
            pred = self.predict_terms(o.scenario, o.program, chip)
            meas = self.measure(o.scenario, o.program, chip).terms
            for t in self.terms:
                if pred[t] > 0 and meas[t] > 0:
                    miss = abs(math.log(meas[t] / pred[t]))
                    if miss > worst:
                        worst, best = miss, (t, self.calibration[t] * meas[t] / pred[t])
        return best

    def recalibrate(self, term: str, factor: float) -> None:
        if term not in self.calibration:
            raise UnknownName("cost term", term, sorted(self.calibration))
        self.calibration[term] = float(factor)
        self.version += 1


@dataclass(frozen=True)
class Measurement:
    scenario: str
    program: str
    chip: ChipConfig
    cycles: float
    ratio: float
    terms: Mapping[str, float]
    tier: str = "model"


def _trivially_true(e: Expr) -> bool:
    return e.op == "const" and e.payload is True


@dataclass(frozen=True)
class ScenarioOptimum:
    scenario: str
    program: str | None          # None: no program is admitted (ratio = inf)
    ratio: float
    reason: str = ""


def solve_scenario(problem: CoDesignProblem, scenario: str, chip: ChipConfig,
                   removed: frozenset[str] = frozenset()) -> ScenarioOptimum:
    """SOLVE(h) for one scenario: the MILP over its program menu with the chip fixed."""
    key = (problem.version, chip.values, removed, scenario)
    if key in problem.cache:
        return problem.cache[key]
    problem.cache[key] = out = _solve_scenario(problem, scenario, chip, removed)
    return out


def _solve_scenario(problem: CoDesignProblem, scenario: str, chip: ChipConfig,
                    removed: frozenset[str]) -> ScenarioOptimum:
    t = problem.template_for((scenario,), chip, removed)
    try:
        sol = solve_milp(t.formulate({}))
    except Infeasible as exc:
        return ScenarioOptimum(scenario, None, float("inf"), f"no admitted program: {'; '.join(exc.reasons)}")
    return ScenarioOptimum(scenario, problem.menu(scenario)[int(sol.assignment[f"prog_{scenario}"])]["name"],
                           float(sol.objective))
