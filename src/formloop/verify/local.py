"""Local obligations of one refinement step, and how each is checked.

A step relates a fine design to the coarse one it refines. Its proof outline has four local
conditions (initialization, step matching, progress, completion agreement) plus a rank that falls
on every step without coarse progress, all over a bounded model; the template adds K1 (C ⇒ Pre),
K3 (C is non-empty over the scope) and the composition side condition that the backward map sends
feasible fine designs to feasible coarse ones.

Every obligation is one validity question put to Z3 as "is the negation satisfiable?" and decided
by `formloop.verify.solver.decide`: UNSAT is a proof; a model is decoded into a concrete design and
replayed by the step's own interpreter, and only a replay that shows the defect makes it a
counterexample (otherwise it stays unresolved). Steps state their claims as expressions over the
template's names (`formloop.expr`), never as raw Z3; K1 and K3 are the template checks of
`formloop.verify.smt`, one implementation for template proofs and chain steps.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from formloop.errors import InvalidInput
from formloop.expr import Expr, const, evaluate, param, render, where
from formloop.expr.to_z3 import domain_constraints
from formloop.template import Constraint, Template
from formloop.verify.lowering import TemplateLowering
from formloop.verify.outcome import ObligationResult
from formloop.verify.proofgraph import Node, QueryLedger
from formloop.verify.smt import k1_query, k1_replay, k3_query, k3_replay
from formloop.verify.solver import Question, Query, Replay, decide

CONDITIONS = ("initialization", "step_matching", "progress", "completion", "rank", "feasibility", "K1", "K3")
TIMEOUT_MS = 20_000
Claim = Callable[[Mapping[str, Expr]], "Expr | tuple[Expr, Mapping[str, Expr]]"]


@dataclass(frozen=True)
class Obligation:
    """One local claim. `statement` is its canonical text; `premises` name the graph nodes it reads."""

    step: int
    name: str
    condition: str
    statement: str
    premises: tuple[str, ...]
    build: Callable[[], Query]
    replay: Callable[[dict], Replay]
    shape: int | None = None

    def __post_init__(self) -> None:
        if self.condition not in CONDITIONS:
            raise InvalidInput(f"condition of obligation {self.name}", self.condition, CONDITIONS)

    @property
    def node(self) -> str:
        where = "" if self.shape is None else f"@n{self.shape}"
        return f"step{self.step}.{self.name}{where}"


@dataclass(frozen=True)
class Fault:
    """An injected defect: a changed program or a weakened premise of one step."""

    name: str
    step: int
    doc: str
    caught_by: str
    kind: str = "program"  # "program": the fine program changes; "premise": a constraint/precondition does

    def program_text(self) -> str:
        """What the fault adds to the step's program definition (nothing for a premise fault)."""
        return f"\nfault {self.name}: {self.doc}" if self.kind == "program" else ""


@dataclass(frozen=True)
class Revision:
    """Which variant of a step is checked: its program, cost, premises, and an injected fault."""

    program: str = "default"
    cost: str = "default"
    premise: str = "default"
    fault: str | None = None

    def text(self) -> str:
        return f"program={self.program} cost={self.cost} premise={self.premise} fault={self.fault}"

    def fault_text(self, faults: Mapping[str, Any]) -> str:
        """The injected fault's program text (empty without a fault): part of the program node."""
        return "" if self.fault is None else faults[self.fault].program_text()


@dataclass(frozen=True)
class LocalModel:
    """A step at one bounded shape: its template, its definition/assumption nodes, its obligations."""

    template: Template
    nodes: tuple[Node, ...]
    obligations: tuple[Obligation, ...]


@dataclass(frozen=True)
class Step:
    """One refinement step of the chain: what it refines into what, and how to build its proof."""

    number: int
    name: str
    coarse: str
    fine: str
    hard: str
    faults: Mapping[str, Fault]
    variants: Mapping[str, tuple[str, ...]]   # program / cost / premise -> allowed variant names
    assumes: tuple[str, ...]                  # environment assumptions this step relies on
    guarantees: tuple[str, ...]               # environment facts this step establishes for the steps above
    model: Callable[[int, Mapping[int, Revision]], LocalModel]   # (shape, revision of every step)
    shaped: bool = True                       # False: the step's obligations do not depend on the shape
    doc: str = ""

    def check_revision(self, rev: Revision) -> None:
        for part in ("program", "cost", "premise"):
            allowed = self.variants.get(part, ("default",))
            if getattr(rev, part) not in allowed:
                raise InvalidInput(f"step {self.number} {part} variant", getattr(rev, part), allowed)
        if rev.fault is not None and rev.fault not in self.faults:
            raise InvalidInput(f"fault of step {self.number} ({self.name})", rev.fault, sorted(self.faults))


# -- checking -----------------------------------------------------------------------------------

def leaves(t: Template) -> dict[str, Expr]:
    """The template's decisions and parameters by name: what a claim is written over."""
    return {**{d.name: d for d in t.decisions}, **{p.name: p for p in t.params}}


def variables(names: str) -> tuple[Expr, ...]:
    """Bound integer variables of a claim (no menu, no lower bound): states, indices, iterations."""
    return tuple(param(n, lower=None, doc="a bound variable of a local claim") for n in names.split())


def check_obligation(ob: Obligation, ledger: QueryLedger, *, timeout_ms: int = TIMEOUT_MS) -> ObligationResult:
    """Check one obligation: UNSAT proves it; a model is replayed before it counts as a counterexample."""
    how = Question(ob.node, ob.name, timeout_ms / 1000, keep_query=False,
                   details={"condition": ob.condition, "shape": ob.shape})
    return decide(ob.build(), ob.replay, how, ledger=ledger)


# -- graph nodes of a template ---------------------------------------------------------------

def template_nodes(prefix: str, t: Template) -> tuple[Node, ...]:
    """Definition nodes: decisions+params, one per constraint group, preconditions, cost.

    Constraints stay in named groups so that a lemma rests only on the groups it reads."""
    decl = [f"decision {d.name} {d.decision.side} {list(d.decision.menu)}" for d in t.decisions]
    decl += [f"param {p.name} {p.payload.kind} int={p.payload.integer} lower={p.payload.lower}" for p in t.params]
    decl += [f"scope {c.name}: {render(c.expr)}" for c in t.scope]
    base = f"{prefix}.decisions"
    nodes = [Node(base, "definition", "\n".join(decl))]
    for group in groups(t):
        text = "\n".join(f"{c.name}: {render(c.expr)}" for c in t.constraints if c.group == group)
        nodes.append(Node(f"{prefix}.C.{group}", "definition", text, (base,)))
    nodes.append(Node(f"{prefix}.pre", "definition",
                      "\n".join(f"{c.group}.{c.name}: {render(c.expr)}" for c in t.preconditions), (base,)))
    cost = [f"cost [{t.unit}]: {render(t.cost)}"] + [f"term {k}: {render(v)}" for k, v in t.terms.items()]
    nodes.append(Node(f"{prefix}.cost", "definition", "\n".join(cost), (base,)))
    return tuple(nodes)


def groups(t: Template) -> list[str]:
    seen: list[str] = []
    for c in t.constraints:
        if c.group not in seen:
            seen.append(c.group)
    return seen


def in_groups(t: Template, names: Sequence[str]) -> tuple[Constraint, ...]:
    return tuple(c for c in t.constraints if c.group in names)


# -- obligations every template step owes --------------------------------------------------------

def k1_obligation(step: int, t: Template, prefix: str, used: Sequence[str], shape: int | None) -> Obligation:
    """K1: the solver's constraints (the groups in `used`) imply the verifier's preconditions."""
    return Obligation(step, "K1", "K1", f"groups {list(used)} of {t.name} imply its preconditions",
                      (f"{prefix}.pre", *(f"{prefix}.C.{g}" for g in used)),
                      lambda: k1_query(TemplateLowering(t), used), k1_replay(t, used), shape)


def k3_obligation(step: int, t: Template, prefix: str, witness: Mapping[str, Expr | int], shape: int | None
                  ) -> Obligation:
    """K3: for every parameter in scope, the design `witness` (expressions over parameters) is feasible."""
    text = ", ".join(f"{k}={render(v) if isinstance(v, Expr) else v}" for k, v in witness.items())
    return Obligation(step, "K3", "K3", f"{t.name} is non-empty over its scope, witnessed by {text}",
                      tuple(f"{prefix}.C.{g}" for g in groups(t)),
                      lambda: k3_query(TemplateLowering(t), [witness]), k3_replay(t, witness), shape)


def feasibility_obligation(step: int, fine: Template, fine_prefix: str, coarse: Template, coarse_prefix: str,
                           pi: Mapping[str, Expr | int], map_node: str, shape: int | None,
                           fine_groups: Sequence[str] | None = None) -> Obligation:
    """Side condition of composition: π maps every feasible fine design to a feasible coarse one."""
    rules = fine.constraints if fine_groups is None else in_groups(fine, fine_groups)
    used = groups(fine) if fine_groups is None else list(fine_groups)

    def build() -> Query:
        low = TemplateLowering(fine)
        image = {k: low.z(v) for k, v in pi.items()}
        for leaf in (*coarse.decisions, *coarse.params):
            if leaf.name not in image:
                if leaf.name not in low.env:
                    raise InvalidInput(f"backward map of step {step}", leaf.name, "a value for every coarse name")
                image[leaf.name] = low.env[leaf.name]
        image_ok = z3.And(low.holds(coarse.constraints, env=pi), *domain_constraints(tuple(coarse.decisions), image))
        return Query([*low.in_scope(), low.holds(rules), z3.Not(image_ok)], low.symbols_of(leaves(fine)))

    def replay(w: dict) -> Replay:
        image = {k: (evaluate(v, w) if isinstance(v, Expr) else v) for k, v in pi.items()}
        cw = {**w, **{k: int(v) for k, v in image.items()}}
        fine_ok = all(bool(evaluate(c.expr, w)) for c in rules)
        bad = [c.name for c in coarse.constraints if not bool(evaluate(c.expr, cw))]
        bad += [f"menu of {d.name}" for d in coarse.decisions if cw[d.name] not in d.decision.menu]
        return Replay(("feasibility",) if fine_ok and bad else (), (("fine", dict(w)), ("coarse", image)),
                      f"feasible fine design maps to a coarse design breaking {bad}")

    return Obligation(step, "feasibility", "feasibility",
                      f"pi maps designs of {fine.name} satisfying {used} into the feasible set of {coarse.name}",
                      (map_node, *(f"{fine_prefix}.C.{g}" for g in used),
                       *(f"{coarse_prefix}.C.{g}" for g in groups(coarse))), build, replay, shape)


def scope_obligation(step: int, fine: Template, coarse: Template, coarse_prefix: str, fine_prefix: str,
                     shape: int | None) -> Obligation:
    """Side condition of composition: every feasible coarse design lies in the fine template's
    scope, so the fine step's proof covers every design the coarse solver can hand it."""
    def build() -> Query:
        low = TemplateLowering(coarse)
        fine_params = {p.name: low.z(p) for p in fine.params}
        inside = z3.And(*[low.z(c.expr) for c in fine.scope], *domain_constraints(tuple(fine.params), low.env))
        names = {**low.symbols_of(leaves(coarse)), **fine_params}
        return Query([*low.in_scope(), low.holds(coarse.constraints), z3.Not(inside)], names)

    def replay(w: dict) -> Replay:
        c_ok = all(bool(evaluate(c.expr, w)) for c in coarse.constraints)
        bad = [c.name for c in fine.scope if not bool(evaluate(c.expr, w))]
        return Replay(("scope",) if c_ok and bad else (), (("coarse design", dict(w)),),
                      f"a feasible design of {coarse.name} lies outside the scope of {fine.name}: breaks {bad}")

    return Obligation(step, "scope", "feasibility",
                      f"every feasible design of {coarse.name} is in the scope of {fine.name}",
                      (f"{fine_prefix}.decisions", *(f"{coarse_prefix}.C.{g}" for g in groups(coarse))),
                      build, replay, shape)


def local_obligation(step: int, t: Template, name: str, condition: str, statement: str, premises: Sequence[str],
                     claim: Claim, replay: Callable[[dict], Replay], shape: int | None,
                     assume: Sequence[Constraint] = ()) -> Obligation:
    """An obligation over the template's decisions and parameters: `claim(leaves)` must hold for
    every design in the menus and scope that satisfies `assume`. `claim` returns a boolean
    expression, or a pair (expression, {witness key: bound variable}) when it reads variables of
    the bounded model (see `variables`)."""
    def build() -> Query:
        low = TemplateLowering(t)
        out = claim(leaves(t))
        formula, extra = out if isinstance(out, tuple) else (out, {})
        negated = z3.Not(low.z(formula))
        names = {**low.symbols_of(leaves(t)), **{k: low.env[v.name] for k, v in extra.items()}}
        return Query([*low.in_scope(), low.holds(assume), negated], names)

    return Obligation(step, name, condition, statement, tuple(premises), build, replay, shape)


def by_menu(var: Expr, menu: Sequence[int], fn: Callable[[int], object]) -> Expr:
    """fn(var) as a case split over var's menu: division and remainder by a menu value become
    division by a constant, which keeps queries in linear arithmetic."""
    out = const(fn(menu[-1]))
    for v in reversed(menu[:-1]):
        out = where(var.eq(v), fn(v), out)
    return out


def pairs(n: int) -> list[tuple[int, int]]:
    return [(u, v) for u in range(n) for v in range(n) if u < v]


@dataclass
class Timeline:
    """A replay's event log: (time, event, detail) rows, sorted, plus named defects."""

    events: list[tuple] = field(default_factory=list)
    defects: dict[str, str] = field(default_factory=dict)

    def flag(self, obligation: str, message: str) -> None:
        self.defects.setdefault(obligation, message)

    def replay(self) -> Replay:
        account = "; ".join(f"{k}: {v}" for k, v in self.defects.items()) or "no defect"
        return Replay(tuple(self.defects), tuple(sorted(self.events, key=lambda e: e[:1])), account)
