"""Co-design over a library template: its walls are the chip parameters its constraints are bounded by.

A hardware-library configuration yields a `Chip` (`ChipConfig.chip`), and the template reads it
through its own `bind_chip`, as it reads any chip. A wall is a conjunct `demand <= p` of a template
constraint whose right side is a chip parameter `p` that one open library component moves (found by
binding every configuration: gemm-tiling's C1 `S*e*(Tm*Tk+Tk*Tn) <= Ms` moves with shared memory,
the upper half of C2 `Tm*Tn <= R_acc` with registers). SOLVE(h) is the template's own MILP on the
chip of h; removing a wall drops its conjunct. Ratios are latencies over the template's optimum on
the reference chip, and the evaluator is the template's cost at the design (tier model): the search
model and the evaluator are one formula here, so no purchase can miss and no term is refitted.

The joint formulation (joint MILP, hardware only) renames each scenario's decisions
(`Tm` -> `Tm_<scenario>`), opens one chip decision per open component, writes each chip parameter
as a table over the one component that moves it, and bounds the area by the ceiling.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from numbers import Real

from formloop.codesign.chip_proofs import ChipCertificate, ChipProver, FixedChipProver
from formloop.codesign.problem import ScenarioOptimum
from formloop.errors import Infeasible, InvalidInput, StructureError, UnknownName
from formloop.evaluate.measurement import Measurement
from formloop.evaluate.model import ModelEvaluator
from formloop.expr import Expr, all_of, const, decision, evaluate, maximum, params_of, render, substitute, where
from formloop.hw.library import ChipConfig, HardwareLibrary
from formloop.solve import enumerate_designs, solve_milp
from formloop.template import Constraint, Template


# Both back ends are exact and order tied optima alike (tie-break terms, then menu position); the
# enumerator is the fast one on small joint menus (gemm-tiling: 1,800 designs).
SOLVERS = {"milp": solve_milp, "enumerate": enumerate_designs}


@dataclass(frozen=True)
class TemplateWall:
    """`demand <= param` in template constraint `constraint`; component `resource` moves `param`."""

    name: str
    resource: str
    param: str
    constraint: str
    demand: Expr
    rule: Expr

    @property
    def limit(self) -> str:
        return self.param


def conjuncts(e: Expr) -> list[Expr]:
    return [x for a in e.args for x in conjuncts(a)] if e.op == "and" else [e]


def chip_param_tables(template: Template, library: HardwareLibrary) -> dict[str, tuple[str | None, dict]]:
    """Each chip parameter as a table over the one open component that moves it: name -> (component,
    {component value: parameter value}); component None for a parameter no open component moves."""
    if template.bind_chip is None:
        raise StructureError(f"template {template.name} reads no chip", fix="give it a bind_chip")
    configs = library.chips(within_ceiling=False)
    bound = [template.bind_chip(h.chip) for h in configs]
    out = {}
    for name in bound[0]:
        values = {b[name] for b in bound}
        if len(values) == 1:
            out[name] = (None, {None: bound[0][name]})
            continue
        for comp in library.open_components():
            table: dict = {}
            if all(table.setdefault(h[comp], b[name]) == b[name] for h, b in zip(configs, bound)):
                out[name] = (comp, table)
                break
        else:
            raise StructureError(f"chip parameter {name} of {template.name} moves with several components of "
                                 f"library {library.name}", fix="open at most one component that moves it")
    return out


def find_walls(template: Template, tables: Mapping[str, tuple[str | None, dict]]) -> tuple[TemplateWall, ...]:
    """The conjuncts `demand <= p` (or `p >= demand`) with p a chip parameter an open component moves
    and a demand that reads no chip parameter."""
    chip = {p.name for p in template.params if p.payload.kind == "chip"}
    out = []
    for c in template.constraints:
        for rule in conjuncts(c.expr):
            if rule.op not in ("le", "ge"):
                continue
            lhs, rhs = rule.args if rule.op == "le" else reversed(rule.args)
            if rhs.op != "param" or rhs.name not in chip or tables.get(rhs.name, (None,))[0] is None:
                continue
            if set(params_of(lhs)) & chip:
                continue
            out.append(TemplateWall(f"{c.name}:{rhs.name}", tables[rhs.name][0], rhs.name, c.name, lhs, rule))
    return tuple(out)


def without(template: Template, rules: Sequence[Expr]) -> Template:
    """The template with the wall conjuncts `rules` dropped (a constraint left empty goes)."""
    drop = {id(r) for r in rules}
    kept = []
    for c in template.constraints:
        rest = [x for x in conjuncts(c.expr) if id(x) not in drop]
        if rest:
            kept.append(c if len(rest) == len(conjuncts(c.expr)) else replace(c, expr=all_of(*rest)))
    return replace(template, constraints=tuple(kept), name=f"{template.name}-without-walls")


@dataclass(frozen=True)
class TemplateMeasurement:
    """The evaluator's measurement of one design on one chip, and its ratio to the reference."""

    scenario: str
    program: str
    chip: ChipConfig
    measurement: Measurement
    ratio: float


def label_of(assignment: Mapping[str, Real], names: Sequence[str]) -> str:
    return ",".join(f"{n}={assignment[n]}" for n in names)


@dataclass
class TemplateCoDesign:
    name: str
    template: Template
    library: HardwareLibrary
    scenarios: Mapping[str, Mapping[str, Real]]     # scenario -> workload parameter values
    objectives: Mapping[str, tuple[str, ...]]
    prover: ChipProver | None = None                # None: FixedChipProver
    solver: str = "milp"                            # SOLVE(h) back end: milp (HiGHS) or enumerate (numpy)
    version: int = 0                                # the model is the evaluator: never recalibrated
    cache: dict = field(default_factory=dict, repr=False)
    source: str = "model (the template's cost at the design on the configuration's chip)"
    unit: str = "worst-scenario latency ratio to the template's optimum on the reference chip (evaluator: model)"

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise InvalidInput("inner solver", self.solver, sorted(SOLVERS))
        for obj, scs in self.objectives.items():
            for sc in scs:
                if sc not in self.scenarios:
                    raise UnknownName(f"scenario of objective {obj}", sc, sorted(self.scenarios))
        self.tables = chip_param_tables(self.template, self.library)
        self.walls = find_walls(self.template, self.tables)
        if not self.walls:
            raise StructureError(f"template {self.template.name} has no wall that library {self.library.name} moves",
                                 fix="open a component that sets a chip parameter bounding a constraint")
        self.prover = self.prover or FixedChipProver()
        self._without: dict[frozenset, Template] = {frozenset(): self.template}
        self._certificates: dict[tuple, ChipCertificate] = {}
        self.reference_chip = self.library.reference
        self.reference_value: dict[str, float] = {}
        optima = {sc: self._solve(sc, self.reference_chip, frozenset()) for sc in self.scenarios}
        for sc, (label, value, reason) in optima.items():
            if label is None:
                raise InvalidInput(f"scenario {sc}", dict(self.scenarios[sc]),
                                   f"a workload the reference chip admits ({reason})")
            self.reference_value[sc] = value
        self.reference_programs = {sc: optima[sc][0] for sc in self.scenarios}

    # -- names ------------------------------------------------------------------------------
    def objective(self, name: str) -> tuple[str, ...]:
        try:
            return tuple(self.objectives[name])
        except KeyError:
            raise UnknownName("objective", name, sorted(self.objectives)) from None

    @property
    def open_walls(self) -> tuple[TemplateWall, ...]:
        return self.walls

    def wall(self, name: str) -> TemplateWall:
        for w in self.walls:
            if w.name == name:
                return w
        raise UnknownName("wall", name, [w.name for w in self.walls])

    def software_of(self, scenario: str, assignment: Mapping[str, Real]) -> str:
        """The design a joint solution picked for `scenario`, as its label."""
        return label_of({n: assignment[f"{n}_{scenario}"] for n in self.template.decision_names},
                        self.template.decision_names)

    def design(self, program: str) -> dict:
        """The assignment a design label names (`Tm=128,Tn=128,...`), every value on its menu."""
        menus = {d.name: d.decision.menu for d in self.template.decisions}
        out = {}
        for part in program.split(","):
            name, _, text = part.partition("=")
            value = next((v for v in menus.get(name, ()) if str(v) == text), None)
            if value is None:
                raise InvalidInput("design label", program,
                                   f"name=value for each of {sorted(menus)}, values on their menus")
            out[name] = value
        if set(out) != set(menus):
            raise InvalidInput("design label", program, f"a value for each of {sorted(menus)}")
        return out

    # -- SOLVE(h) ---------------------------------------------------------------------------
    def solve_scenario(self, scenario: str, chip: ChipConfig, removed: frozenset[str] = frozenset()) -> ScenarioOptimum:
        key = (self.version, chip.values, frozenset(removed), scenario)
        if key not in self.cache:
            label, value, reason = self._solve(scenario, chip, frozenset(removed))
            ratio = float("inf") if label is None else value / self.reference_value[scenario]
            self.cache[key] = ScenarioOptimum(scenario, label, ratio, reason)
        return self.cache[key]

    def _solve(self, scenario: str, chip: ChipConfig, removed: frozenset[str]):
        t = self._relaxed(removed)
        try:
            sol = SOLVERS[self.solver](t.formulate(self.scenarios[scenario], chip.chip))
        except Infeasible as exc:
            return None, float("inf"), f"no admitted design: {'; '.join(exc.reasons)}"
        return label_of(sol.assignment, self.template.decision_names), float(sol.objective), ""

    def _relaxed(self, removed: frozenset[str]) -> Template:
        if removed not in self._without:
            self._without[removed] = without(self.template, [self.wall(n).rule for n in sorted(removed)])
        return self._without[removed]

    # -- the evaluator and the walls at one design -----------------------------------------
    def measure(self, scenario: str, program: str, chip: ChipConfig) -> TemplateMeasurement:
        m = ModelEvaluator().evaluate(self.template, self.design(program), self.scenarios[scenario], chip.chip)
        return TemplateMeasurement(scenario, program, chip, m, m.latency_us / self.reference_value[scenario])

    def _env(self, scenario: str, program: str, chip: ChipConfig) -> dict:
        return {**self.template.bind(self.scenarios[scenario], chip.chip), **self.design(program)}

    def demand(self, scenario: str, program: str, wall: str, chip: ChipConfig) -> float:
        return float(evaluate(self.wall(wall).demand, self._env(scenario, program, chip)))

    def capacity(self, wall: str, chip: ChipConfig) -> float:
        return float(self.template.bind_chip(chip.chip)[self.wall(wall).param])

    def admitted(self, scenario: str, program: str, chip: ChipConfig) -> list[str]:
        """Walls the design breaks on `chip` (empty: every wall admits it)."""
        env = self._env(scenario, program, chip)
        return [w.name for w in self.walls if not bool(evaluate(w.rule, env))]

    def refit(self, optima, chip: ChipConfig) -> tuple[str, float] | None:
        """Nothing to refit: the search model is the evaluator's formula."""
        return None

    def certify(self, chip: ChipConfig) -> ChipCertificate:
        if chip.values not in self._certificates:
            self._certificates[chip.values] = self.prover(self.template, chip.chip)
        return self._certificates[chip.values]

    # -- joint formulations -----------------------------------------------------------------
    def template_for(self, scenarios: Sequence[str], chip: ChipConfig | None = None,
                     removed: frozenset[str] = frozenset(), software: Mapping[str, str] | None = None) -> Template:
        """One formulation over `scenarios`: chip fixed (`chip`) or open under the area ceiling,
        walls in `removed` dropped, designs fixed by label where `software` names them."""
        base = self._relaxed(frozenset(removed))
        hv = chip.as_dict() if chip is not None else {
            c.name: decision(c.name, c.menu, side="chip", doc=c.doc) if len(c.menu) > 1 else c.menu[0]
            for c in self.library.components}
        chip_params = {p: self._param_expr(p, hv) for p in self.tables}
        decisions, constraints, ratios = [], [], []
        for sc in scenarios:
            if software and sc in software:
                values = dict(self.design(software[sc]))
            else:
                values = {d.name: decision(f"{d.name}_{sc}", d.decision.menu, doc=d.decision.doc)
                          for d in base.decisions}
                decisions += list(values.values())
            values = {**self.scenarios[sc], **chip_params, **values}
            for c in (*base.scope, *base.constraints):
                constraints.append(Constraint(f"{c.name}@{sc}", substitute(c.expr, values), c.group, c.doc))
            ratios.append(substitute(base.cost, values) / self.reference_value[sc])
        if chip is None:
            decisions += [v for v in hv.values() if isinstance(v, Expr)]
            constraints.append(Constraint("area", const(self.library.area_of(hv)) <= self.library.ceiling_mm2, "area",
                                          f"chip area within {self.library.ceiling_mm2} mm2"))
        constraints = [c for c in constraints if not (c.expr.op == "const" and c.expr.payload is True)]
        if not decisions:
            decisions.append(decision("fixed", (0,), doc="no open decision"))
        return Template(name=f"{self.name}:{'+'.join(scenarios)}", doc=f"co-design formulation of {self.template.name}",
                        decisions=tuple(decisions), params=(), scope=(), constraints=tuple(constraints),
                        preconditions=(), cost=maximum(*ratios) if len(ratios) > 1 else const(ratios[0]), unit="ratio")

    def _param_expr(self, name: str, hv: Mapping) -> object:
        comp, table = self.tables[name]
        if comp is None:
            return table[None]
        value = hv[comp]
        if not isinstance(value, Expr):
            return table[value]
        menu = self.library.component(comp).menu
        out = const(table[menu[-1]])
        for v in reversed(menu[:-1]):
            out = where(value.eq(v), table[v], out)
        return out

    def describe_walls(self) -> list[str]:
        return [f"{w.name}: {render(w.demand)} <= {w.param} (moved by {w.resource})" for w in self.walls]
