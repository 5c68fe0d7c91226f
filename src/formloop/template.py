"""The template contract: scope, decisions, constraints, preconditions, program, obligations, cost.

A template is read by three parties. The solver reads decisions, constraints and cost; the
verifier reads preconditions, program and obligations; the author reads the scope (Γ). Each rule
is declared once here, as an expression, and every back end derives its form from it.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

from formloop.errors import InvalidInput, StructureError
from formloop.expr import Expr, decisions_of, evaluate, params_of, render, substitute


@dataclass(frozen=True)
class Constraint:
    """A named boolean rule. `group` gathers related rules (a lemma depends on groups it reads)."""

    name: str
    expr: Expr
    group: str = "C"
    doc: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.expr, Expr) or not self.expr.is_boolean:
            raise StructureError(f"constraint {self.name} must be a boolean expression, got {self.expr!r}")


@dataclass(frozen=True)
class Violation:
    """One failed rule of an instance check: `kind` is scope, menu, constraint or precondition."""

    kind: str
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.detail}"


Assignment = Mapping[str, Real]


@dataclass(frozen=True)
class Template:
    """A family of programs with explicit decisions, constraints, preconditions and a cost.

    `bind_chip(chip)` returns the values of the template's chip parameters for a chip spec;
    `terms` are named cost terms reported beside the objective; `tie_break` names the terms that
    order tied optima (each minimized in turn, then decision values lexicographically, smallest
    menu position first)."""

    name: str
    doc: str
    decisions: tuple[Expr, ...]
    params: tuple[Expr, ...]
    scope: tuple[Constraint, ...]
    constraints: tuple[Constraint, ...]
    preconditions: tuple[Constraint, ...]
    cost: Expr
    unit: str = "us"
    terms: Mapping[str, Expr] = field(default_factory=dict)
    tie_break: tuple[str, ...] = ()
    bind_chip: Callable[[Any], Mapping[str, Real]] | None = None
    program: Callable[..., Any] | None = None
    obligations: Callable[..., Any] | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    descriptor: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_structure(self)

    # -- identity ---------------------------------------------------------------------------
    @property
    def decision_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.decisions)

    def canonical_text(self) -> str:
        """Everything the contract says, in one canonical text (hashed for identity)."""
        lines = [f"template {self.name}", f"options {sorted(self.options.items())}", f"unit {self.unit}"]
        lines += [f"decision {d.name} {d.decision.side} {list(d.decision.menu)}" for d in self.decisions]
        lines += [f"param {p.name} {p.payload.kind} int={p.payload.integer} lower={p.payload.lower}"
                  for p in self.params]
        for kind, rules in (("scope", self.scope), ("constraint", self.constraints), ("pre", self.preconditions)):
            lines += [f"{kind} {c.group}.{c.name}: {render(c.expr)}" for c in rules]
        lines += [f"term {k}: {render(v)}" for k, v in self.terms.items()]
        lines += [f"cost: {render(self.cost)}", f"tie_break {list(self.tie_break)}"]
        return "\n".join(lines)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.canonical_text().encode()).hexdigest()[:16]

    # -- parameters -------------------------------------------------------------------------
    def bind(self, workload: Mapping[str, Real], chip: Any = None) -> dict[str, Real]:
        """All parameter values: the workload's, then the chip's; each checked against its domain."""
        values: dict[str, Real] = dict(workload)
        if chip is not None:
            if self.bind_chip is None:
                raise StructureError(f"template {self.name} takes no chip", fix="pass chip=None")
            values.update(self.bind_chip(chip))
        for p in self.params:
            spec = p.payload
            if p.name not in values:
                raise InvalidInput(p.name, None, f"a {'whole number' if spec.integer else 'number'}"
                                   f"{'' if spec.lower is None else f' >= {spec.lower}'}",
                                   fix=f"{spec.doc}".strip() or None)
            v = values[p.name]
            if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
                raise InvalidInput(p.name, v, "a finite number")
            if spec.integer and int(v) != v:
                raise InvalidInput(p.name, v, "a whole number")
            if spec.lower is not None and v < spec.lower:
                raise InvalidInput(p.name, v, f"a number >= {spec.lower}")
            if spec.integer:
                values[p.name] = int(v)
        extra = set(workload) - {p.name for p in self.params}
        if extra:
            raise InvalidInput("workload parameter", sorted(extra),
                               [p.name for p in self.params if p.payload.kind == "workload"])
        return values

    def scope_failures(self, values: Mapping[str, Real]) -> list[Violation]:
        return [Violation("scope", c.name, render(c.expr)) for c in self.scope if not bool(evaluate(c.expr, values))]

    def formulate(self, workload: Mapping[str, Real], chip: Any = None) -> "Formulation":
        """The template instantiated for one workload on one chip: parameters folded to constants."""
        values = self.bind(workload, chip)
        failures = self.scope_failures(values)
        if failures:
            raise InvalidInput("workload", dict(workload),
                               f"the scope of {self.name}: " + "; ".join(str(f) for f in failures))
        fold = lambda e: substitute(e, values)  # noqa: E731
        return Formulation(
            template=self,
            params=values,
            constraints=tuple(Constraint(c.name, fold(c.expr), c.group, c.doc) for c in self.constraints),
            cost=fold(self.cost),
            terms={k: fold(v) for k, v in self.terms.items()},
        )

    # -- instance check ---------------------------------------------------------------------
    def check(self, assignment: Assignment, workload: Mapping[str, Real], chip: Any = None) -> list[Violation]:
        """Every rule the instance breaks: scope, menus, constraints, preconditions. Empty = valid."""
        values = self.bind(workload, chip)
        out = self.scope_failures(values)
        for d in self.decisions:
            if d.name not in assignment:
                out.append(Violation("menu", d.name, "no value assigned"))
            elif assignment[d.name] not in d.decision.menu:
                out.append(Violation("menu", d.name, f"{assignment[d.name]} not in {list(d.decision.menu)}"))
        if out:
            return out
        env = {**values, **{k: assignment[k] for k in self.decision_names}}
        for kind, rules in (("constraint", self.constraints), ("precondition", self.preconditions)):
            out += [Violation(kind, c.name, render(c.expr)) for c in rules if not bool(evaluate(c.expr, env))]
        return out

    def evaluate_terms(self, assignment: Assignment, values: Mapping[str, Real]) -> dict[str, float]:
        env = {**values, **assignment}
        out = {k: float(evaluate(v, env)) for k, v in self.terms.items()}
        out["cost"] = float(evaluate(self.cost, env))
        return out


@dataclass(frozen=True)
class Formulation:
    """A template with its parameters folded: what a solver reads."""

    template: Template
    params: Mapping[str, Real]
    constraints: tuple[Constraint, ...]
    cost: Expr
    terms: Mapping[str, Expr]

    @property
    def decisions(self) -> tuple[Expr, ...]:
        return self.template.decisions

    @property
    def unit(self) -> str:
        return self.template.unit

    def tie_break_terms(self) -> list[tuple[str, Expr]]:
        return [(name, self.terms[name]) for name in self.template.tie_break]


def validate_structure(t: Template) -> None:
    """Refuse malformed templates with a message naming the offending field."""
    if not t.name:
        raise StructureError("template has no name")
    if not t.decisions:
        raise StructureError(f"template {t.name} declares no decisions")
    for d in t.decisions:
        if not isinstance(d, Expr) or d.op != "var":
            raise StructureError(f"template {t.name}: decisions must be decision(...) leaves, got {d!r}")
    for p in t.params:
        if not isinstance(p, Expr) or p.op != "param":
            raise StructureError(f"template {t.name}: params must be param(...) leaves, got {p!r}")
    if not isinstance(t.cost, Expr) or t.cost.is_boolean:
        raise StructureError(f"template {t.name}: cost must be a numeric expression")
    _unique(t.name, "decision", [d.name for d in t.decisions] + [p.name for p in t.params])
    _unique(t.name, "rule", [c.name for c in (*t.scope, *t.constraints, *t.preconditions)])
    declared_d, declared_p = set(t.decision_names), {p.name for p in t.params}
    readers: list[tuple[str, Expr]] = [(f"scope {c.name}", c.expr) for c in t.scope]
    readers += [(f"constraint {c.name}", c.expr) for c in t.constraints]
    readers += [(f"precondition {c.name}", c.expr) for c in t.preconditions]
    readers += [(f"term {k}", v) for k, v in t.terms.items()] + [("cost", t.cost)]
    for where, expr in readers:
        bad_d = set(decisions_of(expr)) - declared_d
        bad_p = set(params_of(expr)) - declared_p
        if bad_d or bad_p:
            raise StructureError(f"template {t.name}: {where} reads undeclared "
                                 f"{', '.join(sorted(bad_d | bad_p))}", fix="declare it in decisions or params")
        if where.startswith("scope") and decisions_of(expr):
            raise StructureError(f"template {t.name}: {where} reads decisions; the scope may read parameters only")
    missing = [name for name in t.tie_break if name not in t.terms]
    if missing:
        raise StructureError(f"template {t.name}: tie_break names unknown terms {missing}; terms: {list(t.terms)}")


def _unique(template: str, what: str, names: Sequence[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise StructureError(f"template {template}: {what} name {n} is declared twice")
        seen.add(n)


BOOL_TEXT = {True: True, False: False, "true": True, "false": False, "True": True, "False": False, "1": True,
             "0": False}


def bool_option(field: str, value: object) -> bool:
    """A template factory's on/off option as a bool: True/False, or their text from `--option NAME=VALUE`
    (true/false, 1/0); anything else is refused naming `field`."""
    try:
        return BOOL_TEXT[value]
    except (KeyError, TypeError):
        raise InvalidInput(field, value, ["true", "false"]) from None


def with_calibration(values: dict[str, float], calibration: Mapping[str, float] | None,
                     allowed: Sequence[str]) -> dict[str, float]:
    """A template's chip values with fitted terms put over its priors (`values`, updated and returned); a
    term the template does not calibrate is refused by name."""
    if calibration:
        unknown = set(calibration) - set(allowed)
        if unknown:
            raise InvalidInput("calibration term", sorted(unknown), tuple(allowed))
        values.update({k: float(v) for k, v in calibration.items()})
    return values
