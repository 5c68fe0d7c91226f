"""Z3 plumbing every obligation shares: timeouts, solver construction, query text, model decoding,
and `decide`, the one place a validity query becomes a verdict.

An obligation is a validity question posed as "is its negation satisfiable?": UNSAT is a proof;
a model is decoded into a witness and replayed by an independent interpreter, and only a replay
that shows the obligation's defect makes it a counterexample (otherwise, and on Z3's `unknown`,
it is unresolved, never proved)."""
from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real
from typing import Any, Protocol

import z3

from formloop.errors import InvalidInput
from formloop.verify.outcome import ObligationResult, Verdict, verdict_of_validity, z3_solver_name


def timeout_ms(timeout_s: float) -> int:
    """Z3's timeout in whole milliseconds, at least 1: Z3 reads 0 as "no limit", so a positive
    timeout below a millisecond must round up, never down."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, Real) or not timeout_s > 0 \
            or not math.isfinite(timeout_s):
        raise InvalidInput("timeout_s", timeout_s, "a positive, finite number of seconds")
    return max(1, math.ceil(timeout_s * 1000))


def new_solver(timeout_s: float) -> z3.Solver:
    s = z3.Solver()
    s.set("timeout", timeout_ms(timeout_s))
    return s


def new_optimizer(timeout_s: float) -> z3.Optimize:
    opt = z3.Optimize()
    opt.set("timeout", timeout_ms(timeout_s))
    return opt


def query_text(solver: z3.Solver | z3.Optimize) -> str:
    """The solver's assertions as SMT-LIB text with Z3's let-names (which carry internal node ids
    that change from run to run) renamed in order of appearance: equal queries give equal text."""
    names: dict[str, str] = {}
    return re.sub(r"[$?][a-z]+\d+", lambda m: names.setdefault(m.group(0), f"$v{len(names)}"), solver.to_smt2())


def py_value(v: z3.ExprRef):
    """A Z3 value as a Python value: int, float for a non-integral (or irrational) real, bool, else
    its text."""
    if z3.is_int_value(v):
        return v.as_long()
    if z3.is_rational_value(v):
        f = Fraction(v.numerator_as_long(), v.denominator_as_long())
        return int(f) if f.denominator == 1 else float(f)
    if z3.is_algebraic_value(v):  # an irrational real (nonlinear arithmetic): 20 decimal digits
        return float(v.approx(20).as_fraction())
    if z3.is_true(v) or z3.is_false(v):
        return z3.is_true(v)
    return str(v)


def decode(model: z3.ModelRef, symbols: Mapping[str, z3.ExprRef]) -> dict:
    """Python values for every named symbol of a model."""
    return {name: py_value(model.eval(sym, model_completion=True)) for name, sym in symbols.items()}


@dataclass(frozen=True)
class Query:
    """Assertions whose satisfiability refutes a claim, and the named symbols a witness reads.

    `hints` are extra assertions tried in order when the witness is chosen (a model under them is
    still a model of the query): a design's tile sizes, so the witness is reported where the
    template's solver would pick; small integers, so a real witness replays exactly in float64."""

    assertions: Sequence[z3.BoolRef]
    symbols: Mapping[str, z3.ExprRef]
    hints: Sequence[Sequence[z3.BoolRef]] = ()


@dataclass(frozen=True)
class Replay:
    """What an interpreter saw when it ran a witness: `defects` names the failed checks."""

    defects: tuple[str, ...]
    trace: tuple = ()
    account: str = ""


class Ledger(Protocol):
    """Counts (and may answer from a store) the checks of a proof run; see proofgraph.QueryLedger."""

    def check(self, solver: z3.Solver) -> tuple[z3.CheckSatResult, bool]: ...


@dataclass(frozen=True)
class Question:
    """How one query is put: its name, the defect its replay must show, and what to record."""

    name: str
    defect: str
    timeout_s: float = 10.0
    smallest: tuple[str, ...] = ()           # minimize these symbols, in order, for the witness
    keep_query: bool = True                  # record the normalized query text (what a cache keys on)
    details: Mapping[str, Any] = field(default_factory=dict)


def decide(query: Query, replay: Callable[[dict], Replay], how: Question, *,
           ledger: Ledger | None = None) -> ObligationResult:
    """Check `query`: UNSAT proves the claim; a model is decoded, made smallest when asked, and
    replayed; only a replay showing `how.defect` makes a counterexample."""
    start = time.perf_counter()
    solver = new_solver(how.timeout_s)
    solver.add(*query.assertions)
    text = query_text(solver) if how.keep_query else ""
    if ledger is None:
        result, from_store = solver.check(), False
    else:
        result, from_store = ledger.check(solver)
    details = {**how.details, "queries": 0 if from_store else 1}
    verdict = verdict_of_validity(result)
    common = dict(obligation=how.name, solver=z3_solver_name(), query=text)
    if verdict is Verdict.PROVED:
        return ObligationResult(verdict=verdict, seconds=time.perf_counter() - start,
                                details={**details, "query_reused": from_store}, **common)
    if verdict is Verdict.UNRESOLVED:
        return ObligationResult(verdict=verdict, seconds=time.perf_counter() - start,
                                reason=f"z3 {result}: {solver.reason_unknown()}", details=details, **common)
    model = _witness_model(query, how) or solver.model()
    witness = decode(model, query.symbols)
    rep = replay(witness)
    if how.defect in rep.defects:
        return ObligationResult(verdict=Verdict.COUNTEREXAMPLE, seconds=time.perf_counter() - start,
                                witness=witness, trace=tuple(rep.trace), replay=rep.account, details=details,
                                **common)
    return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start, witness=witness,
                            trace=tuple(rep.trace), replay=rep.account, details=details,
                            reason="solver witness not reproduced by the replay "
                                   f"(saw {list(rep.defects) or 'no defect'})",
                            **common)


def _witness_model(query: Query, how: Question) -> z3.ModelRef | None:
    """The model a witness is read from: under the first of `query.hints` that admits one, else the
    query alone, minimizing `how.smallest` in order (integers only), so every run reports the same
    counterexample; None when there is nothing to choose or every attempt gives up (the caller
    keeps the solver's model)."""
    ints = [sym for name in how.smallest if (sym := query.symbols.get(name)) is not None and z3.is_int(sym)]
    for extra in (*query.hints, ()):
        if not extra and not ints:
            return None
        if ints:  # a real may have no smallest value
            opt = new_optimizer(how.timeout_s)
            opt.add(*query.assertions, *extra)
            for sym in ints:
                opt.minimize(sym)
            found = opt
        else:
            found = new_solver(how.timeout_s)
            found.add(*query.assertions, *extra)
        if found.check() == z3.sat:
            return found.model()
    return None
