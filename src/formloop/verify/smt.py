"""SMT obligations: K1 and K3 over a template's own expressions, and index obligations of tiled
loops (coverage, exact-once, no-phantom) with symbolic extents.

Everything is lowered with formloop.expr.to_z3 from the expressions the template (or the
program's data) declares; no rule is re-typed here. Parameters stay symbolic over the template's
scope (each Param's domain plus the scope constraints), except those a proof plan fixes for
decidability, which the result records. A satisfiable query becomes a counterexample only after
its witness replays; a witness that does not replay makes the result unresolved."""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real

import numpy as np
import z3

from formloop.errors import InvalidInput, SolverFailure
from formloop.expr import Expr, all_of, const, evaluate, grid_env, render, substitute
from formloop.expr.to_z3 import domain_constraints, symbols, to_z3
from formloop.template import Template
from formloop.verify.outcome import ObligationResult, Verdict, verdict_of_validity, z3_solver_name

INDEX_OBLIGATIONS = ("coverage", "exact-once", "no-phantom")


def _solver(timeout_s: float) -> z3.Solver:
    s = z3.Solver()
    s.set("timeout", max(1, int(timeout_s * 1000)))
    return s


def query_text(solver: z3.Solver | z3.Optimize) -> str:
    """The solver's assertions as SMT-LIB text with Z3's let-names (which carry internal node ids
    that change from run to run) renamed in order of appearance: equal queries give equal text."""
    names: dict[str, str] = {}
    return re.sub(r"[$?][a-z]+\d+", lambda m: names.setdefault(m.group(0), f"$v{len(names)}"), solver.to_smt2())


def _py(v: z3.ExprRef):
    """A Z3 numeral as a Python number (int, or float for a non-integral real)."""
    if z3.is_int_value(v):
        return v.as_long()
    if z3.is_rational_value(v):
        f = Fraction(v.numerator_as_long(), v.denominator_as_long())
        return int(f) if f.denominator == 1 else float(f)
    if z3.is_true(v) or z3.is_false(v):
        return z3.is_true(v)
    return str(v)


class _Lowering:
    """A template's rules with fixed parameters folded, lowered to Z3 over shared symbols."""

    def __init__(self, template: Template, fixed: Mapping[str, Real]):
        self.t, self.fixed = template, dict(fixed)
        fold = lambda e: substitute(e, self.fixed)  # noqa: E731
        self.scope = [fold(c.expr) for c in template.scope]
        self.C = {c.name: fold(c.expr) for c in template.constraints}
        self.pre = {c.name: fold(c.expr) for c in template.preconditions}
        free_params = tuple(p for p in template.params if p.name not in self.fixed)
        roots = (*self.scope, *self.C.values(), *self.pre.values(), *template.decisions, *free_params)
        self.env = symbols(*roots)
        self.domain = domain_constraints(roots, self.env)
        self.params = [p.name for p in free_params]

    def z(self, e: Expr) -> z3.ExprRef:
        return to_z3(e, self.env)

    def all_c(self) -> z3.BoolRef:
        return z3.And([self.z(e) for e in self.C.values()]) if self.C else z3.BoolVal(True)

    def in_scope(self) -> list[z3.BoolRef]:
        return [*self.domain, *(self.z(e) for e in self.scope)]

    def read(self, model: z3.ModelRef, names) -> dict:
        return {n: _py(model.eval(self.env[n], model_completion=True)) for n in names if n in self.env}


def _fixed(template: Template, fixed: Mapping[str, Real] | None) -> Mapping[str, Real]:
    """`fixed`, or when None the parameters the template's proof plan fixes (none without a hook);
    pass {} to keep every parameter symbolic."""
    if fixed is not None:
        return fixed
    return dict(getattr(template.obligations(template), "fixed", {})) if template.obligations is not None else {}


def _note(fixed: Mapping[str, Real]) -> dict:
    return {"fixed": dict(fixed)} if fixed else {}


def check_k1(template: Template, *, fixed: Mapping[str, Real] | None = None, timeout_s: float = 10.0) -> ObligationResult:
    """K1: every design the constraints allow meets the preconditions, for every parameter in scope."""
    start = time.perf_counter()
    low = _Lowering(template, _fixed(template, fixed))
    pre = all_of(*low.pre.values()) if low.pre else const(True)
    s = _solver(timeout_s)
    s.add(*low.in_scope(), low.all_c(), z3.Not(low.z(pre)))
    query = query_text(s)
    verdict = verdict_of_validity(s.check())
    common = dict(obligation="K1", solver=z3_solver_name(), query=query, details=_note(low.fixed))
    if verdict is not Verdict.COUNTEREXAMPLE:
        return ObligationResult(verdict=verdict, seconds=time.perf_counter() - start,
                                reason="" if verdict is Verdict.PROVED else f"z3: {s.reason_unknown()}", **common)
    # The smallest witness (decisions in declaration order, then parameters), so that every run
    # reports the same counterexample.
    opt = z3.Optimize()
    opt.set("timeout", max(1, int(timeout_s * 1000)))
    opt.add(*low.in_scope(), low.all_c(), z3.Not(low.z(pre)))
    for n in [*template.decision_names, *low.params]:
        if n in low.env and z3.is_int(low.env[n]):  # a real parameter may have no smallest value
            opt.minimize(low.env[n])
    model = opt.model() if opt.check() == z3.sat else s.model()
    witness = low.read(model, [*template.decision_names, *low.params])
    # Replay: re-evaluate the template's rules on the witness with the numpy evaluator.
    values = {**low.fixed, **witness}
    held = [n for n, e in low.C.items() if bool(evaluate(e, values))]
    broken = [n for n, e in low.pre.items() if not bool(evaluate(e, values))]
    in_scope = all(bool(evaluate(e, values)) for e in low.scope)
    design = ", ".join(f"{n}={witness[n]}" for n in template.decision_names)
    shape = ", ".join(f"{n}={witness[n]}" for n in low.params)
    if in_scope and len(held) == len(low.C) and broken:
        text = (f"design ({design}) with {shape} meets {', '.join(held)} but breaks precondition "
                + "; ".join(f"{n}: {render(template_pre(template, n))}" for n in broken))
        return ObligationResult(verdict=Verdict.COUNTEREXAMPLE, seconds=time.perf_counter() - start,
                                witness=witness, replay=text, **common)
    return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start, witness=witness,
                            reason="z3 found a witness that the evaluator does not confirm", **common)


def template_pre(template: Template, name: str) -> Expr:
    return next(c.expr for c in template.preconditions if c.name == name)


def check_k3(template: Template, *, fixed: Mapping[str, Real] | None = None, timeout_s: float = 10.0,
             max_rounds: int = 20) -> ObligationResult:
    """K3: every parameter in scope admits a design.

    Counterexample-guided: keep a set of witness designs; ask for a parameter in scope that none
    of them fits; if there is none the set proves K3, else find a design for that parameter (or
    report the parameter as a counterexample, confirmed by enumerating the joint menu)."""
    start = time.perf_counter()
    low = _Lowering(template, _fixed(template, fixed))
    names = template.decision_names
    witnesses: list[dict] = []
    query = ""
    for _ in range(max_rounds):
        s = _solver(timeout_s)
        s.add(*low.in_scope())
        for w in witnesses:
            s.add(z3.Not(z3.substitute(low.all_c(), *[(low.env[n], z3.IntVal(v) if isinstance(v, int) else z3.RealVal(v))
                                                         for n, v in w.items()])))
        query = query_text(s)
        r = s.check()
        common = dict(obligation="K3", solver=z3_solver_name(), query=query,
                      details={**_note(low.fixed), "witness_designs": list(witnesses)})
        if r == z3.unsat:
            return ObligationResult(verdict=Verdict.PROVED, seconds=time.perf_counter() - start,
                                    witness={"designs": list(witnesses)}, **common)
        if r != z3.sat:
            return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start,
                                    reason=f"z3: {s.reason_unknown()}", **common)
        p_star = low.read(s.model(), low.params)
        # The design for p* is the first feasible one in menu order (enumerated, so the witness
        # set, and with it the recorded query, is the same on every run).
        design = _first_design(template, low, p_star)
        if design is not None:
            witnesses.append(design)
            continue
        s2 = _solver(timeout_s)
        s2.add(*low.domain, low.all_c(), *[low.env[n] == v for n, v in p_star.items()])
        r2 = s2.check()
        if r2 == z3.unsat:
            text = f"no design of the joint menu meets {', '.join(low.C)} at {p_star} (enumerated; z3 agrees)"
            return ObligationResult(verdict=Verdict.COUNTEREXAMPLE, seconds=time.perf_counter() - start,
                                    witness=p_star, replay=text, **common)
        return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start, witness=p_star,
                                reason=f"enumeration finds no design at {p_star} but z3 says {r2}", **common)
    return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start, query=query,
                            obligation="K3", solver=z3_solver_name(),
                            reason=f"no finite witness set after {max_rounds} rounds", details=_note(low.fixed))


def _first_design(template: Template, low: _Lowering, params: Mapping) -> dict | None:
    env = {**grid_env(template.decisions), **low.fixed, **params}
    shape = tuple(len(d.decision.menu) for d in template.decisions)
    mask = np.ones(shape, dtype=bool)
    for e in low.C.values():
        mask &= np.broadcast_to(np.asarray(evaluate(e, env), dtype=bool), shape)
    flat = np.flatnonzero(mask)
    if flat.size == 0:
        return None
    pos = np.unravel_index(int(flat[0]), shape)
    return {d.name: d.decision.menu[int(i)] for d, i in zip(template.decisions, pos)}


# --- index obligations ---------------------------------------------------------------------------

@dataclass(frozen=True)
class IndexAxis:
    """One tiled loop axis of a program, as expressions (the program's data).

    `blocks` (tiles launched along the axis) reads `extent` and `tile`; the tile numbered b covers
    indices b*stride + r for r < tile; `guard` is the condition, over `index` and `extent`, under
    which the access at `index` happens; `owner` is the backward map π: the tile that holds
    `index` (its offset is index - owner*tile)."""

    name: str
    extent: Expr
    tile: Expr
    blocks: Expr
    stride: Expr
    guard: Expr
    owner: Expr
    index: Expr

    def at(self, tile_value: int, extent: z3.ExprRef, index: z3.ExprRef) -> dict[str, z3.ExprRef]:
        return {self.tile.name: z3.IntVal(tile_value), self.extent.name: extent, self.index.name: index}


IndexReplayer = Callable[[str, str, int, int, int], tuple[set[str], str]]
"""(obligation, axis, tile, extent, index) -> (defect kinds the replay saw, its account)."""

INDEX_CONFIRMS = {"coverage": {"missing"}, "exact-once": {"duplicate"}, "no-phantom": {"outside", "padding"}}


def _index_query(axis: IndexAxis, obligation: str, tile: int, X: z3.ArithRef, i: z3.ArithRef) -> list[z3.BoolRef]:
    """The negation of the obligation at one tile size: satisfiable iff it can fail. `i` is the
    index the failure is about."""
    low = lambda e, index: to_z3(e, axis.at(tile, X, index))  # noqa: E731
    facts = [X >= 1]
    if obligation == "coverage":
        b = low(axis.owner, i)
        start = b * low(axis.stride, i)
        facts += [i >= 0, i < X, z3.Not(z3.And(b >= 0, b < low(axis.blocks, i), i - start >= 0, i - start < tile,
                                               low(axis.guard, i)))]
    elif obligation == "exact-once":
        b1, r1, b2, r2 = z3.Ints("b1 r1 b2 r2")
        stride, blocks = low(axis.stride, i), low(axis.blocks, i)
        for b, r in ((b1, r1), (b2, r2)):
            facts += [b >= 0, b < blocks, r >= 0, r < tile, b * stride + r == i, low(axis.guard, i)]
        facts += [z3.Or(b1 != b2, r1 != r2), i >= 0, i < X]
    elif obligation == "no-phantom":
        b, r = z3.Ints("b r")
        facts += [b >= 0, b < low(axis.blocks, i), r >= 0, r < tile, b * low(axis.stride, i) + r == i,
                  low(axis.guard, i), z3.Or(i < 0, i >= X)]
    else:
        raise InvalidInput("index obligation", obligation, INDEX_OBLIGATIONS)
    return facts


def check_index(axis: IndexAxis, obligation: str, tile: int, *, replay: IndexReplayer | None = None,
                prefer_extent: int | None = None, timeout_s: float = 10.0) -> ObligationResult:
    """Prove one index obligation of `axis` at one tile size for every extent (one query).

    On failure the witness is chosen at `prefer_extent` when the failure occurs there, else at
    the smallest extent, with the smallest index; it counts only if the replay shows the defect."""
    start = time.perf_counter()
    X, i = z3.Int(axis.extent.name), z3.Int("index")
    facts = _index_query(axis, obligation, tile, X, i)
    s = _solver(timeout_s)
    s.add(*facts)
    query = query_text(s)
    verdict = verdict_of_validity(s.check())
    name = f"{obligation}[{axis.name},{axis.tile.name}={tile}]"
    common = dict(obligation=name, solver=z3_solver_name(), query=query,
                  details={"axis": axis.name, "tile": tile, "scope": f"every {axis.name} >= 1"})
    if verdict is not Verdict.COUNTEREXAMPLE:
        return ObligationResult(verdict=verdict, seconds=time.perf_counter() - start,
                                reason="" if verdict is Verdict.PROVED else f"z3: {s.reason_unknown()}", **common)
    witness = _smallest_witness(facts, X, i, prefer_extent, timeout_s)
    if replay is None:
        return ObligationResult(verdict=Verdict.COUNTEREXAMPLE, seconds=time.perf_counter() - start,
                                witness=witness, reason="not replayed", **common)
    kinds, text = replay(obligation, axis.name, tile, witness[axis.extent.name], witness["index"])
    if kinds & INDEX_CONFIRMS[obligation]:
        return ObligationResult(verdict=Verdict.COUNTEREXAMPLE, seconds=time.perf_counter() - start,
                                witness=witness, replay=text, **common)
    return ObligationResult(
        verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start, witness=witness, replay=text,
        reason=(f"the {obligation} proof fails at {axis.name}={witness[axis.extent.name]}, index {witness['index']}, "
                f"but the replay shows no {obligation} defect there: no semantic witness"), **common)


def _smallest_witness(facts, X, i, prefer_extent, timeout_s) -> dict:
    for extra in ([X == prefer_extent] if prefer_extent else []), []:
        opt = z3.Optimize()
        opt.set("timeout", max(1, int(timeout_s * 1000)))
        opt.add(*facts, *extra)
        opt.minimize(X)
        opt.minimize(i)
        if opt.check() == z3.sat:
            m = opt.model()
            return {str(X): _py(m.eval(X, model_completion=True)), "index": _py(m.eval(i, model_completion=True))}
    raise RuntimeError("satisfiable index query has no model")  # unreachable: the plain query was sat


def admitted(template: Template, names: tuple[str, ...], *, fixed: Mapping[str, Real] | None = None,
             timeout_s: float = 10.0) -> list[dict]:
    """The joint values of decisions `names` that some design in C takes for some parameter in
    scope (one small query per joint value): what the solver can ever pick for them."""
    import itertools

    low = _Lowering(template, _fixed(template, fixed))
    menus = [next(d for d in template.decisions if d.name == n).decision.menu for n in names]
    out = []
    for values in itertools.product(*menus):
        s = _solver(timeout_s)
        s.add(*low.in_scope(), low.all_c(), *[low.env[n] == v for n, v in zip(names, values)])
        r = s.check()
        if r == z3.sat:
            out.append(dict(zip(names, values)))
        elif r != z3.unsat:
            raise SolverFailure(f"z3 could not decide whether {dict(zip(names, values))} is admitted: {s.reason_unknown()}")
    return out
