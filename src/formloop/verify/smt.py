"""K1 and K3, once: the query builders and replays that template proofs (`prove_template`) and the
refinement chain's steps (`formloop.verify.local`) both use, and the checks that run them.

K1: every design the constraints allow meets the preconditions, for every parameter in scope.
K3: every parameter in scope admits a design. Both are lowered from the template's own
expressions (no rule is re-typed here) over a `ParamScope`: parameters fixed for decidability,
chip parameters symbolic within the ranges or menus a hardware library offers, and the rest
symbolic over their declared domains. A satisfiable query becomes a counterexample only after its
witness replays on the numpy evaluator; a witness that does not replay leaves it unresolved."""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from numbers import Real

import numpy as np
import z3

from formloop.errors import InvalidInput, SolverFailure, StructureError
from formloop.expr import Expr, evaluate, grid_env, render
from formloop.template import Template
from formloop.verify.lowering import ParamScope, TemplateLowering, proof_scope
from formloop.verify.outcome import ObligationResult, Verdict, z3_solver_name
from formloop.verify.solver import Question, Ledger, Query, Replay, decide, new_solver, query_text

Design = Mapping[str, Expr | Real]


def _rules(template: Template, groups: Sequence[str] | None):
    return tuple(c for c in template.constraints if groups is None or c.group in groups)


# -- K1 ---------------------------------------------------------------------------------------------

def k1_query(low: TemplateLowering, groups: Sequence[str] | None = None) -> Query:
    """Satisfiable iff some design in scope meets the constraints (of `groups`, default all) and
    breaks a precondition."""
    t = low.template
    rules = {c.name: low.C[c.name] for c in _rules(t, groups)}
    return Query([*low.in_scope(), low.holds(rules), z3.Not(low.holds(low.pre))],
                 low.symbols_of([*t.decision_names, *low.params]))


def k1_replay(template: Template, groups: Sequence[str] | None = None, fixed: Mapping[str, Real] | None = None):
    """Re-evaluates a K1 witness with numpy: in scope, meets the constraints, breaks a precondition."""
    rules, fixed = _rules(template, groups), dict(fixed or {})

    def replay(w: dict) -> Replay:
        values = {**fixed, **w}
        held = [c.name for c in rules if bool(evaluate(c.expr, values))]
        broken = [c for c in template.preconditions if not bool(evaluate(c.expr, values))]
        in_scope = all(bool(evaluate(c.expr, values)) for c in template.scope)
        design = ", ".join(f"{n}={w[n]}" for n in template.decision_names if n in w)
        shape = ", ".join(f"{k}={v}" for k, v in w.items() if k not in template.decision_names)
        ok = in_scope and len(held) == len(rules) and broken
        text = (f"design ({design}) with {shape} meets {', '.join(held) or 'no constraint'} but breaks precondition "
                + "; ".join(f"{c.name}: {render(c.expr)}" for c in broken)) if ok else \
            f"the evaluator does not confirm the witness (in scope {in_scope}, constraints held {held}, " \
            f"preconditions broken {[c.name for c in broken]})"
        return Replay(("K1",) if ok else (), (("design", dict(w)),), text)

    return replay


def check_k1(template: Template, *, groups: Sequence[str] | None = None, scope: ParamScope | None = None,
             fixed: Mapping[str, Real] | None = None, timeout_s: float = 10.0, ledger: Ledger | None = None,
             name: str = "K1", keep_query: bool = True, details: Mapping | None = None) -> ObligationResult:
    """K1 for `template` (only the constraint `groups` given, default all). Without `scope`, the
    parameters `fixed` (default: those the template's proof plan fixes) are fixed, the rest symbolic.
    The counterexample, if any, is the smallest witness (decisions in order, then parameters)."""
    low = TemplateLowering(template, scope or _scope(template, fixed))
    how = Question(name, "K1", timeout_s, smallest=(*template.decision_names, *low.params), keep_query=keep_query,
                   details={**_note(low.scope), **(details or {})})
    return decide(k1_query(low, groups), k1_replay(template, groups, low.fixed), how, ledger=ledger)


# -- K3 ---------------------------------------------------------------------------------------------

def k3_query(low: TemplateLowering, witnesses: Sequence[Design]) -> Query:
    """Satisfiable iff some parameter in scope is fitted by none of `witnesses` (designs whose
    values are numbers or expressions over the parameters): none lies on the menus and meets C."""
    t = low.template
    facts = low.param_facts()
    for w in witnesses:
        missing = [n for n in t.decision_names if n not in w]
        if missing:
            raise StructureError(f"K3 witness of {t.name} gives no value for {missing}")
        design = {k: low.z(v) for k, v in w.items()}
        facts.append(z3.Not(z3.And(*low.menus(design), low.holds(low.C, env=w))))
    return Query(facts, low.symbols_of(low.params))


def k3_replay(template: Template, witness: Design, fixed: Mapping[str, Real] | None = None):
    """Re-evaluates a K3 witness family member at the parameters the solver found."""
    fixed = dict(fixed or {})

    def replay(w: dict) -> Replay:
        values = {**fixed, **w}
        design = {k: _number(evaluate(v, values)) if isinstance(v, Expr) else v for k, v in witness.items()}
        env = {**values, **design}
        bad = [c.name for c in template.constraints if not bool(evaluate(c.expr, env))]
        bad += [f"menu of {d.name}" for d in template.decisions if design[d.name] not in d.decision.menu]
        return Replay(("K3",) if bad else (), (("params", dict(w)), ("design", design)),
                      f"the witness design {design} breaks {bad} at these parameters")

    return replay


def check_k3(template: Template, *, witness: Design | None = None, scope: ParamScope | None = None,
             fixed: Mapping[str, Real] | None = None, timeout_s: float = 10.0, max_rounds: int = 20,
             ledger: Ledger | None = None, name: str = "K3", keep_query: bool = True,
             details: Mapping | None = None) -> ObligationResult:
    """K3 for `template`. With `witness` (a design written over the parameters) one query asks
    whether it fits every parameter in scope. Without, counterexample-guided search: keep a set of
    witness designs; ask for a parameter in scope that none of them fits; if there is none the set
    proves K3, else add a design for that parameter (the first of the joint menu) or report the
    parameter as a counterexample, confirmed by enumerating the joint menu and by Z3."""
    low = TemplateLowering(template, scope or _scope(template, fixed))
    note = {**_note(low.scope), **(details or {})}
    if witness is not None:
        how = Question(name, "K3", timeout_s, keep_query=keep_query, details=note)
        return decide(k3_query(low, [witness]), k3_replay(template, witness, low.fixed), how, ledger=ledger)
    return _search_k3(template, low, timeout_s, max_rounds, name, note)


def _search_k3(template: Template, low: TemplateLowering, timeout_s: float, max_rounds: int, name: str,
               note: Mapping) -> ObligationResult:
    start = time.perf_counter()
    witnesses: list[dict] = []
    query = ""
    for _ in range(max_rounds):
        s = new_solver(timeout_s)
        s.add(*k3_query(low, witnesses).assertions)
        query = query_text(s)
        r = s.check()
        common = dict(obligation=name, solver=z3_solver_name(), query=query,
                      details={**note, "witness_designs": list(witnesses)})
        if r == z3.unsat:
            return ObligationResult(verdict=Verdict.PROVED, seconds=time.perf_counter() - start,
                                    witness={"designs": list(witnesses)}, **common)
        if r != z3.sat:
            return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start,
                                    reason=f"z3 {r}: {s.reason_unknown()}", **common)
        p_star = low.read(s.model(), low.params)
        # The design for p* is the first feasible one in menu order (enumerated, so the witness
        # set, and with it the recorded query, is the same on every run).
        design = first_design(template, {**low.fixed, **p_star})
        if design is not None:
            witnesses.append(design)
            continue
        s2 = new_solver(timeout_s)
        s2.add(*low.menus(), low.holds(low.C), *[low.env[n] == v for n, v in p_star.items()])
        r2 = s2.check()
        if r2 == z3.unsat:
            text = f"no design of the joint menu meets {', '.join(low.C)} at {p_star} (enumerated; z3 agrees)"
            return ObligationResult(verdict=Verdict.COUNTEREXAMPLE, seconds=time.perf_counter() - start,
                                    witness=p_star, replay=text, **common)
        return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start, witness=p_star,
                                reason=f"enumeration finds no design at {p_star} but z3 says {r2}", **common)
    return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start, query=query,
                            obligation=name, solver=z3_solver_name(), details=dict(note),
                            reason=f"no finite witness set after {max_rounds} rounds")


def first_design(template: Template, values: Mapping[str, Real]) -> dict | None:
    """The first design in menu order that meets every constraint at parameter `values`, or None."""
    env = {**grid_env(template.decisions), **values}
    shape = tuple(len(d.decision.menu) for d in template.decisions)
    mask = np.ones(shape, dtype=bool)
    for c in template.constraints:
        mask &= np.broadcast_to(np.asarray(evaluate(c.expr, env), dtype=bool), shape)
    flat = np.flatnonzero(mask)
    if flat.size == 0:
        return None
    pos = np.unravel_index(int(flat[0]), shape)
    return {d.name: d.decision.menu[int(i)] for d, i in zip(template.decisions, pos)}


# -- any claim over a template's names ------------------------------------------------------------

def check_claim(template: Template, name: str, claim: Expr, *, assume: str = "preconditions",
                scope: ParamScope | None = None, fixed: Mapping[str, Real] | None = None, timeout_s: float = 10.0,
                replay: Callable[[dict], Replay] | None = None, ledger: Ledger | None = None) -> ObligationResult:
    """`claim` (a boolean expression over the template's decisions and parameters, and bound
    variables of its own, e.g. an index) holds for every design on the menus and every parameter in
    scope that meets the template's `assume` rules ("preconditions", "constraints" or "none").
    The default replay re-evaluates the claim at the witness with numpy; a counterexample is the
    smallest witness (decisions, then parameters, then bound variables)."""
    rules = {"preconditions": template.preconditions, "constraints": template.constraints, "none": ()}
    if assume not in rules:
        raise InvalidInput("assume", assume, tuple(rules))
    low = TemplateLowering(template, scope or _scope(template, fixed))
    negated = z3.Not(low.z(claim))
    names = [*template.decision_names, *low.params, *(n for n in low.env if n not in template.decision_names
                                                       and n not in low.params)]
    query = Query([*low.in_scope(), low.holds(rules[assume]), negated], low.symbols_of(names))

    def evaluated(w: dict) -> Replay:
        values = {**low.fixed, **w}
        held = bool(evaluate(claim, values))
        return Replay(() if held else (name,), (("witness", dict(w)),),
                      f"{render(claim)} is {held} at {w}")

    how = Question(name, name, timeout_s, smallest=tuple(names), details=_note(low.scope))
    return decide(query, replay or evaluated, how, ledger=ledger)


# -- what the solver can ever pick -------------------------------------------------------------------

def admitted(template: Template, names: tuple[str, ...], *, scope: ParamScope | None = None,
             fixed: Mapping[str, Real] | None = None, timeout_s: float = 10.0) -> list[dict]:
    """The joint values of decisions `names` that some design in C takes for some parameter in
    scope (one small query per joint value): what the solver can ever pick for them."""
    low = TemplateLowering(template, scope or _scope(template, fixed))
    menus = [next(d for d in template.decisions if d.name == n).decision.menu for n in names]
    out = []
    for values in itertools.product(*menus):
        s = new_solver(timeout_s)
        s.add(*low.in_scope(), low.holds(low.C), *[low.env[n] == v for n, v in zip(names, values)])
        r = s.check()
        if r == z3.sat:
            out.append(dict(zip(names, values)))
        elif r != z3.unsat:
            raise SolverFailure(f"z3 could not decide whether {dict(zip(names, values))} is admitted: "
                                f"{s.reason_unknown()}")
    return out


# -- helpers ----------------------------------------------------------------------------------------

def _scope(template: Template, fixed: Mapping[str, Real] | None) -> ParamScope:
    """`fixed` exactly as given, or when None the proof plan's scope as `prove_template` uses it
    (the plan's fixed values, chip parameters no rule reads left free); pass {} to keep every
    parameter symbolic."""
    if fixed is not None:
        return ParamScope(dict(fixed))
    plan_fixed = getattr(template.obligations(template), "fixed", {}) if template.obligations is not None else {}
    return proof_scope(template, plan_fixed)


def _note(scope: ParamScope) -> dict:
    out: dict = {}
    if scope.fixed:
        out["fixed"] = dict(scope.fixed)
    if scope.ranges or scope.menus:
        out["symbolic"] = scope.symbolic
    return out


def _number(v):
    v = np.asarray(v).item()
    return int(v) if isinstance(v, float) and v.is_integer() else v
