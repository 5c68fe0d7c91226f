"""Index obligations of tiled loops, proved for every extent: the loops are the program's data
(expressions), declared once by the template that owns them and lowered here.

Three kinds of declaration:
  IndexAxis   one tiled axis (blocks, stride, guard, backward map): coverage, exact-once, no-phantom
  partition   a family of ranges [lo(s), hi(s)) over s < parts: every index of [0, X) in exactly one
  bijection   a map of a program id onto a grid of tiles: into the grid and one-to-one
Queries fix the tile sizes (one query per menu value) and leave the extents symbolic. A witness
counts only when a replay shows the defect: the tiling replay interpreter for axes, the numpy
evaluator of the same declaration for partitions and bijections."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import z3

from formloop.errors import InvalidInput
from formloop.expr import Expr, evaluate
from formloop.expr.to_z3 import symbols, to_z3
from formloop.verify.outcome import ObligationResult, Verdict, verdict_of_validity, z3_solver_name
from formloop.verify.solver import Question, Query, Replay, decide, new_optimizer, new_solver, py_value, query_text

INDEX_OBLIGATIONS = ("coverage", "exact-once", "no-phantom")


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
    s = new_solver(timeout_s)
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
        opt = new_optimizer(timeout_s)
        opt.add(*facts, *extra)
        opt.minimize(X)
        opt.minimize(i)
        if opt.check() == z3.sat:
            m = opt.model()
            value = lambda v: py_value(m.eval(v, model_completion=True))  # noqa: E731
            return {str(X): value(X), "index": value(i)}
    raise RuntimeError("satisfiable index query has no model")  # unreachable: the plain query was sat


# --- partitions and bijections -------------------------------------------------------------------

def check_partition(name: str, ranges: Sequence[tuple[Expr, Expr]], extent: Expr, index: Expr, *,
                    timeout_s: float = 10.0) -> ObligationResult:
    """Every index of [0, extent) lies in exactly one of `ranges` ([lo, hi) pairs over `extent`
    and constants), for every extent >= 1 (one query). The witness is the smallest extent and
    index; the numpy evaluator of the same ranges replays it."""
    env = symbols(extent, index, *(e for r in ranges for e in r))
    X, i = env[extent.name], env[index.name]
    count = z3.Sum([z3.If(z3.And(to_z3(lo, env) <= i, i < to_z3(hi, env)), 1, 0) for lo, hi in ranges])
    facts = [X >= 1, i >= 0, i < X, count != 1]
    extra = {n: s for n, s in env.items() if n not in (extent.name, index.name)}
    query = Query([*facts, *(s >= 0 for s in extra.values())], {extent.name: X, index.name: i, **extra})

    def replay(w: dict) -> Replay:
        owners = [s for s, (lo, hi) in enumerate(ranges) if evaluate(lo, w) <= w[index.name] < evaluate(hi, w)]
        bounds = [(int(evaluate(lo, w)), int(evaluate(hi, w))) for lo, hi in ranges]
        ok = 0 <= w[index.name] < w[extent.name] and len(owners) != 1
        text = (f"at {extent.name}={w[extent.name]}, index {w[index.name]} lies in {len(owners)} of the ranges "
                f"{bounds} (parts {owners})")
        return Replay(("partition",) if ok else (), (("ranges", tuple(bounds)),), text)

    how = Question(name, "partition", timeout_s, smallest=(extent.name, index.name),
                   details={"scope": f"every {extent.name} >= 1", "parts": len(ranges)})
    return decide(query, replay, how)


def check_bijection(name: str, var: Expr, count: Expr, images: Sequence[tuple[Expr, Expr]], *,
                    timeout_s: float = 10.0) -> ObligationResult:
    """`var` ↦ (image expressions) maps [0, count) one-to-one into the grid ∏ [0, bound), for
    every value of the other leaves >= 1 (one query). `images` are (image, bound) pairs."""
    env = symbols(var, count, *(e for pair in images for e in pair))
    sizes = {n: s for n, s in env.items() if n != var.name}
    a, b = z3.Ints(f"{var.name}_a {var.name}_b")
    at = lambda x: [to_z3(img, {**env, var.name: x}) for img, _ in images]  # noqa: E731
    bounds = [to_z3(bound, env) for _, bound in images]
    ia, ib = at(a), at(b)
    outside = z3.Or([z3.Or(v < 0, v >= n) for v, n in zip(ia, bounds)])
    collide = z3.And(a != b, *[x == y for x, y in zip(ia, ib)])
    n = to_z3(count, env)
    facts = [*(s >= 1 for s in sizes.values()), a >= 0, a < n, b >= 0, b < n, z3.Or(outside, collide)]
    names = {**sizes, f"{var.name}_a": a, f"{var.name}_b": b}

    def replay(w: dict) -> Replay:
        values = {k: v for k, v in w.items() if k in sizes}
        pa, pb = (tuple(int(evaluate(img, {**values, var.name: w[k]})) for img, _ in images)
                  for k in (f"{var.name}_a", f"{var.name}_b"))
        grid = tuple(int(evaluate(bd, values)) for _, bd in images)
        out = [p for p in (pa, pb) if any(not 0 <= x < g for x, g in zip(p, grid))]
        dup = w[f"{var.name}_a"] != w[f"{var.name}_b"] and pa == pb
        text = (f"{values}: {var.name} {w[f'{var.name}_a']} -> {pa}, {w[f'{var.name}_b']} -> {pb} in a grid of {grid}"
                + (" (outside the grid)" if out else "") + (" (the same tile twice)" if dup else ""))
        return Replay(("bijection",) if (out or dup) else (), ((var.name, w[f"{var.name}_a"], pa),
                                                                (var.name, w[f"{var.name}_b"], pb)), text)

    how = Question(name, "bijection", timeout_s, smallest=tuple(names),
                   details={"scope": f"every {', '.join(sizes)} >= 1"})
    return decide(Query(facts, names), replay, how)
