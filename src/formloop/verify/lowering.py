"""A template's rules in Z3 over one set of symbols, with each parameter fixed or symbolic.

`ParamScope` says what a proof ranges over: parameters `fixed` to values (folded away before
lowering), parameters symbolic within a closed `range` or over a `menu` (the chip parameters a
hardware library can offer), and every other parameter symbolic over its declared domain.
`TemplateLowering` states the scope (menus, parameter domains, the template's scope rules) and
lowers any rule or claim over the template's names; leaves a claim adds (bound variables of a
bounded model) get their own symbols on first use."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real

import z3

from formloop.errors import InvalidInput
from formloop.expr import Expr, params_of, substitute
from formloop.expr.to_z3 import domain_constraints, symbols, to_z3
from formloop.template import Constraint, Template
from formloop.verify.solver import py_value

ChipRanges = Mapping[str, "tuple[Real, Real] | Sequence[Real]"]


@dataclass(frozen=True)
class ParamScope:
    """Parameters fixed to values, symbolic within [lo, hi], or symbolic over a menu."""

    fixed: Mapping[str, Real] = field(default_factory=dict)
    ranges: Mapping[str, tuple[Real, Real]] = field(default_factory=dict)
    menus: Mapping[str, tuple[Real, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, bounds in self.ranges.items():
            if len(bounds) != 2 or not bounds[0] <= bounds[1]:
                raise InvalidInput(f"range of {name}", bounds, "(lo, hi) with lo <= hi")
        for name, menu in self.menus.items():
            if not menu:
                raise InvalidInput(f"menu of {name}", menu, "one or more values")
        both = (set(self.ranges) | set(self.menus)) & set(self.fixed)
        both |= set(self.ranges) & set(self.menus)
        if both:
            raise InvalidInput("parameter scope", sorted(both), "each parameter fixed, ranged or on a menu, not two")

    @property
    def symbolic(self) -> dict[str, object]:
        return {**{k: tuple(v) for k, v in self.ranges.items()}, **{k: list(v) for k, v in self.menus.items()}}

    def check_names(self, template: Template) -> None:
        """Ranged and menu parameters must be chip parameters of `template`."""
        chip = {p.name for p in template.params if p.payload.kind == "chip"}
        for name in (*self.ranges, *self.menus):
            if name not in chip:
                raise InvalidInput(f"symbolic chip parameter of {template.name}", name, sorted(chip))


def rule_params(template: Template) -> set[str]:
    """Parameters the constraints and preconditions read: the only ones K1 and K3 depend on
    beyond the scope."""
    out: set[str] = set()
    for c in (*template.constraints, *template.preconditions):
        out |= set(params_of(c.expr))
    return out


def proof_scope(template: Template, fixed: Mapping[str, Real], chip: Mapping[str, Real] | None = None,
                chip_ranges: ChipRanges | None = None) -> ParamScope:
    """The parameter scope of a proof: the `fixed` values (a proof plan's), with the chip parameters of `chip`
    (a mapping of values, e.g. `template.bind_chip(c)`) fixed instead, and those named in
    `chip_ranges` symbolic: a (lo, hi) tuple is a closed range, a list (set, range) a menu. Chip
    parameters no constraint or precondition reads are never fixed: they stay symbolic over their
    declared domain and the template's scope, so the proof holds whatever their value."""
    chip_params = {p.name for p in template.params if p.payload.kind == "chip"}
    fixed = dict(fixed)
    if chip is not None:
        fixed.update({k: v for k, v in chip.items() if k in chip_params})
    ranges, menus = {}, {}
    for name, spec in (chip_ranges or {}).items():
        if name not in chip_params:
            raise InvalidInput(f"chip_ranges parameter of {template.name}", name, sorted(chip_params))
        if isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(x, Real) for x in spec):
            ranges[name] = spec
        elif isinstance(spec, (list, set, frozenset, range)) and spec and all(isinstance(x, Real) for x in spec):
            menus[name] = tuple(sorted(spec))
        else:
            raise InvalidInput(f"chip_ranges[{name}]", spec, "a (lo, hi) tuple or a non-empty list of values")
    free = (chip_params - rule_params(template)) | set(ranges) | set(menus)
    scope = ParamScope({k: v for k, v in fixed.items() if k not in free}, ranges, menus)
    scope.check_names(template)
    return scope


class TemplateLowering:
    """`template`'s scope, constraints and preconditions lowered to Z3 under a ParamScope."""

    def __init__(self, template: Template, scope: ParamScope | None = None):
        self.template = template
        self.scope = scope or ParamScope()
        self.fixed = dict(self.scope.fixed)
        self.free_params = tuple(p for p in template.params if p.name not in self.fixed)
        self.params = [p.name for p in self.free_params]
        fold = (lambda e: substitute(e, self.fixed)) if self.fixed else (lambda e: e)
        self.scope_rules = [fold(c.expr) for c in template.scope]
        self.C = {c.name: fold(c.expr) for c in template.constraints}
        self.pre = {c.name: fold(c.expr) for c in template.preconditions}
        self.env: dict[str, z3.ExprRef] = {}
        for leaf in (*template.decisions, *self.free_params):
            self.env.update(symbols(leaf))
        self._fold = fold

    # -- lowering ---------------------------------------------------------------------------------
    def z(self, e: Expr | Real) -> z3.ExprRef:
        """The Z3 term of `e` (fixed parameters folded); new leaves get symbols of their own."""
        if not isinstance(e, Expr):
            return z3.BoolVal(e) if isinstance(e, bool) else (z3.IntVal(e) if isinstance(e, int) else z3.RealVal(e))
        e = self._fold(e)
        try:
            return to_z3(e, self.env)
        except KeyError:  # a bound variable of a claim, seen for the first time
            for name, sym in symbols(e).items():
                self.env.setdefault(name, sym)
            return to_z3(e, self.env)

    def holds(self, rules: Sequence[Constraint] | Mapping[str, Expr], env: Mapping[str, Expr | Real] | None = None
              ) -> z3.BoolRef:
        """All `rules` at once, over the template's symbols or over `env` (names -> expressions
        or numbers, e.g. a witness design written over the parameters)."""
        exprs = list(rules.values()) if isinstance(rules, Mapping) else [self._fold(c.expr) for c in rules]
        if not exprs:
            return z3.BoolVal(True)
        if env is None:
            return z3.And([self.z(e) for e in exprs])
        bound = {**self.env, **{k: self.z(v) for k, v in env.items()}}
        return z3.And([to_z3(e, bound) for e in exprs])

    # -- the scope ---------------------------------------------------------------------------------
    def param_facts(self) -> list[z3.BoolRef]:
        """Declared domains of the free parameters, their chip ranges and menus, and the scope rules."""
        facts = domain_constraints(self.free_params, self.env)
        for name, (lo, hi) in self.scope.ranges.items():
            facts += [self.env[name] >= lo, self.env[name] <= hi]
        for name, menu in self.scope.menus.items():
            facts.append(z3.Or([self.env[name] == v for v in menu]))
        return facts + [self.z(e) for e in self.scope_rules]

    def menus(self, design: Mapping[str, z3.ExprRef] | None = None) -> list[z3.BoolRef]:
        """Menu membership of every decision (of `design`'s values when given)."""
        env = self.env if design is None else {**self.env, **design}
        return domain_constraints(tuple(self.template.decisions), env)

    def in_scope(self) -> list[z3.BoolRef]:
        """Every decision on its menu and every parameter in scope."""
        return [*self.menus(), *self.param_facts()]

    def read(self, model: z3.ModelRef, names: Iterable[str]) -> dict:
        return {n: py_value(model.eval(self.env[n], model_completion=True)) for n in names if n in self.env}

    def symbols_of(self, names: Iterable[str]) -> dict[str, z3.ExprRef]:
        return {n: self.env[n] for n in names if n in self.env}
