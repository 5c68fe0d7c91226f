"""Exactly-once obligations of work schedules (persistent and stream-K launches), proved for every
size: the schedule is the template's data (expressions over named leaves) and is lowered here.

  check_cover   every unit of work (a tuple of indices, each below its extent) belongs to exactly
                one program's work set and no program works outside the extents: coverage (the
                declared owner holds it), exact-once (no two programs hold it), no-phantom
  check_fixup   every partial result a program writes is summed exactly once by the merge of its
                tile, and no two partials of one program share a workspace slot
Queries leave every size symbolic (>= 1). A witness counts only when the caller's replay (an
interpreter of the schedule, independent of these expressions) shows the defect at its values."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import z3

from formloop.expr import Expr
from formloop.expr.to_z3 import symbols, to_z3
from formloop.verify.outcome import ObligationResult, Verdict
from formloop.verify.solver import Query, Question, Replay, decide, new_solver

COVER_OBLIGATIONS = ("coverage", "exact-once", "no-phantom")
COVER_DEFECTS = {"coverage": "missing", "exact-once": "duplicate", "no-phantom": "phantom",
                 "summed-once": "miscounted", "slots-distinct": "overwritten"}


def _env(index_names: Sequence[str], *roots: Expr):
    env = symbols(*roots)
    sizes = {n: s for n, s in env.items() if n not in index_names}
    return env, sizes


def check_cover(name: str, *, units: Sequence[tuple[Expr, Expr]], program: Expr, programs: Expr, member: Expr,
                owner: Expr, replay: Callable[[dict], Replay], timeout_s: float = 10.0) -> list[ObligationResult]:
    """`member` (boolean over `program`, the unit indices and sizes) is each program's work set;
    `owner` (over the unit indices and sizes) names the program that should hold a unit."""
    idx = [u.name for u, _ in units] + [program.name]
    env, sizes = _env(idx, program, programs, member, owner, *(e for pair in units for e in pair))
    p = env[program.name]
    inside = [z3.And(env[u.name] >= 0, env[u.name] < to_z3(x, env)) for u, x in units]
    base = [*(s >= 1 for s in sizes.values())]
    at = lambda q: to_z3(member, {**env, program.name: q})  # noqa: E731
    o = to_z3(owner, env)
    p2 = z3.Int(program.name + "_2")
    P = to_z3(programs, env)
    queries = {
        "coverage": [*inside, z3.Not(z3.And(o >= 0, o < P, at(o)))],
        "exact-once": [*inside, p >= 0, p < P, p2 >= 0, p2 < P, p != p2, at(p), at(p2)],
        "no-phantom": [*(env[u.name] >= 0 for u, _ in units), p >= 0, p < P, at(p), z3.Not(z3.And(*inside))],
    }
    names = {**sizes, **{u.name: env[u.name] for u, _ in units}, program.name: p, program.name + "_2": p2}
    out = []
    for ob, facts in queries.items():
        how = Question(f"{ob}[{name}]", COVER_DEFECTS[ob], timeout_s, smallest=tuple(names),
                       details={"scope": f"every {', '.join(sizes)} >= 1", "schedule": name})
        out.append(decide(Query([*base, *facts], names), replay, how))
    return out


def check_fixup(name: str, *, tile: Expr, tiles: Expr, program: Expr, programs: Expr, merger: Expr,
                merger_ok: Expr, written: Expr, summed: Expr, slot: Expr, replay: Callable[[dict], Replay],
                lemmas: Sequence[Expr] = (), timeout_s: float = 10.0) -> list[ObligationResult]:
    """summed-once: for every tile, program and admissible merger, the times the merge adds the
    program's partial (`summed`) is 1 if the program wrote one (`written`), else 0.
    slots-distinct: no program writes partials of two tiles (`tile` and `tile`_2) to one `slot`.
    `lemmas` (booleans over the same leaves and `tile`_2: facts of integer arithmetic that Z3's
    nonlinear search does not find in time, e.g. that tile starts are ordered) are each proved on
    their own first, then stated in both queries; a lemma not proved leaves the obligations unresolved."""
    idx = [tile.name, program.name, merger.name, tile.name + "_2"]
    env, sizes = _env(idx, tile, tiles, program, programs, merger, merger_ok, written, summed, slot, *lemmas)
    t, p = env[tile.name], env[program.name]
    t2 = env.setdefault(tile.name + "_2", z3.Int(tile.name + "_2"))
    T, P = to_z3(tiles, env), to_z3(programs, env)
    base = [*(s >= 1 for s in sizes.values()), t >= 0, t < T, p >= 0, p < P, t2 >= 0, t2 < T]
    facts = [to_z3(lemma, env) for lemma in lemmas]
    unproved = []
    for i, fact in enumerate(facts):
        check = new_solver(timeout_s)
        check.add(*base, z3.Not(fact))
        if check.check() != z3.unsat:
            unproved.append(i)
    other = {**env, tile.name: t2}
    queries = {
        "summed-once": [to_z3(merger_ok, env),
                        to_z3(summed, env) != z3.If(to_z3(written, env), 1, 0)],
        "slots-distinct": [t != t2, to_z3(written, env), to_z3(written, other),
                           to_z3(slot, env) == to_z3(slot, other)],
    }
    names = {**sizes, tile.name: t, program.name: p, merger.name: env[merger.name], tile.name + "_2": t2}
    out = []
    for ob, query in queries.items():
        how = Question(f"{ob}[{name}]", COVER_DEFECTS[ob], timeout_s, smallest=tuple(names),
                       details={"scope": f"every {', '.join(sizes)} >= 1", "schedule": name, "lemmas": len(facts)})
        r = decide(Query([*base, *facts, *query], names), replay, how)
        if unproved and r.verdict is not Verdict.COUNTEREXAMPLE:
            r = replace(r, verdict=Verdict.UNRESOLVED, reason=f"lemmas {unproved} were not proved")
        out.append(r)
    return out
