"""The MILP back end (HiGHS).

Encoding: each decision is one-hot over its menu (binary columns). Every table over two or more
decisions lives on a *factor*: continuous columns z over the joint menu of a maximal set of
decisions, tied to the one-hot marginals (Σ_{j: j_i = v} z_j = x_{i,v}); with x integral this
forces z to the indicator of the chosen joint value, so the encoding is exact. A table over a
subset of a factor's decisions is broadcast onto it. Ties are broken by re-solving with the
objective held at its optimum: each tie-break term in turn, then menu positions lexicographically.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np

from formloop.errors import Infeasible, SolverFailure
from formloop.expr import evaluate
from formloop.expr.linearize import Affine, Epigraph, Key, Linearizer, Mask, Row
from formloop.solve.explain import irreducible_conflict
from formloop.solve.result import ModelSize, Solution, SolveStatus, tie_slack
from formloop.solve.split import split_solve
from formloop.template import Constraint, Formulation

_STATUS = {
    highspy.HighsModelStatus.kOptimal: SolveStatus.OPTIMAL,
    highspy.HighsModelStatus.kInfeasible: SolveStatus.INFEASIBLE,
    highspy.HighsModelStatus.kTimeLimit: SolveStatus.TIME_LIMIT,
}
CAPABILITIES = frozenset({"integer", "continuous", "epigraph"})


def _silence_banner() -> None:
    """HiGHS prints a banner on the first Highs() of a process; keep it off stdout (--json)."""
    fd = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(fd, 1)
        os.close(fd)


_silence_banner()


@dataclass
class _Model:
    """Columns and rows of the MILP, with the inverse map from columns to decision values."""

    onehot: dict[str, list[int]]           # decision -> column per menu position
    factors: dict[Key, tuple[int, tuple[int, ...]]]  # key -> (first column, joint shape)
    aux: dict[str, int]
    lower: list[float]
    upper: list[float]
    integer: list[bool]
    rows: list[tuple[dict[int, float], float, float]]

    def add_col(self, lo: float, hi: float, integer: bool) -> int:
        self.lower.append(lo)
        self.upper.append(hi)
        self.integer.append(integer)
        return len(self.lower) - 1


PRESOLVE_OFF_COLUMNS = 1000  # models with at least this many columns are solved without HiGHS's presolve


class MilpBuilder:
    def __init__(self, f: Formulation, constraints: Sequence[Constraint] | None = None):
        self.f = f
        self.lin = Linearizer(f.decisions)
        parts: list[Row | Mask] = []
        for c in f.constraints if constraints is None else constraints:
            parts += self.lin.constraint(f"{c.group}.{c.name}", c.expr)
        self.parts = parts
        self.objective = self.lin.affine(f.cost, objective=True)
        self.tie_terms = [(name, self.lin.affine(expr)) for name, expr in f.tie_break_terms()]
        self.model = self._build()

    def _keys(self) -> set[Key]:
        affines: list[Affine] = [self.objective, *(a for _, a in self.tie_terms)]
        affines += [p.lhs for p in self.parts if isinstance(p, Row)]
        affines += [a for e in self.lin.epigraphs for a in e.args]
        keys = {k for a in affines for k in a.tables}
        keys |= {p.key for p in self.parts if isinstance(p, Mask)}
        return {k for k in keys if len(k) >= 2}

    def _build(self) -> _Model:
        m = _Model({}, {}, {}, [], [], [], [])
        for d in self.f.decisions:
            m.onehot[d.name] = [m.add_col(0.0, 1.0, True) for _ in d.decision.menu]
            m.rows.append(({c: 1.0 for c in m.onehot[d.name]}, 1.0, 1.0))
        keys = self._keys()
        maximal = sorted((k for k in keys if not any(set(k) < set(o) for o in keys)), key=len)
        self.host = {k: next(h for h in maximal if set(k) <= set(h)) for k in keys}
        for h in maximal:
            shape = tuple(len(self.lin.decisions[n].decision.menu) for n in h)
            first = len(m.lower)
            for _ in range(int(np.prod(shape))):
                m.add_col(0.0, 1.0, False)
            m.factors[h] = (first, shape)
            grid = np.arange(int(np.prod(shape))).reshape(shape)
            for axis, name in enumerate(h):
                for pos, xcol in enumerate(m.onehot[name]):
                    cols = np.take(grid, pos, axis=axis).ravel() + first
                    row = {int(c): 1.0 for c in cols}
                    row[xcol] = -1.0
                    m.rows.append((row, 0.0, 0.0))
        for e in self.lin.epigraphs:
            m.aux[e.name] = m.add_col(-np.inf, np.inf, False)
        self.m = m
        for e in self.lin.epigraphs:
            self._add_epigraph(e)
        for p in self.parts:
            if isinstance(p, Row):
                m.rows.append((self.coefficients(p.lhs), p.lower, p.upper))
            else:
                self._add_mask(p)
        return m

    def _broadcast(self, key: Key, table: np.ndarray) -> tuple[int, np.ndarray]:
        host = self.host[key]
        first, shape = self.m.factors[host]
        expand = [slice(None) if n in key else np.newaxis for n in host]
        return first, np.broadcast_to(table[tuple(expand)], shape).ravel()

    def coefficients(self, a: Affine) -> dict[int, float]:
        out: dict[int, float] = {}
        for key, table in a.tables.items():
            if len(key) == 1:
                cols, values = self.m.onehot[key[0]], table.ravel()
            else:
                first, values = self._broadcast(key, table)
                cols = range(first, first + values.size)
            for c, v in zip(cols, values):
                if v != 0.0:
                    out[c] = out.get(c, 0.0) + float(v)
        for name, coef in a.aux.items():
            out[self.m.aux[name]] = out.get(self.m.aux[name], 0.0) + coef
        return out

    def _add_epigraph(self, e: Epigraph) -> None:
        for arg in e.args:
            row = {c: -v for c, v in self.coefficients(arg).items()}
            row[self.m.aux[e.name]] = row.get(self.m.aux[e.name], 0.0) + 1.0
            self.m.rows.append((row, arg.const, np.inf))

    def _add_mask(self, mask: Mask) -> None:
        if not mask.key:
            if not bool(mask.allowed):
                self.m.rows.append(({}, 1.0, 1.0))  # 0 = 1: the constraint is false for every design
            return
        if len(mask.key) == 1:
            cols, allowed = self.m.onehot[mask.key[0]], mask.allowed.ravel()
        else:
            first, allowed = self._broadcast(mask.key, mask.allowed)
            cols = range(first, first + allowed.size)
        for c, ok in zip(cols, allowed):
            if not ok:
                self.m.upper[c] = 0.0

    def size(self) -> ModelSize:
        return ModelSize(len(self.m.lower), sum(self.m.integer), len(self.m.rows))

    def highs(self, time_limit: float | None) -> highspy.Highs:
        m = self.m
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 1e-9)
        if len(m.lower) >= PRESOLVE_OFF_COLUMNS:
            # the factor tables' columns: HiGHS's presolve costs more than it saves on these models (RESULTS.md,
            # "HiGHS presolve on large factor-table models": a Qwen3-8B layer plan 36.3 -> 22.0 s, same designs)
            h.setOptionValue("presolve", "off")
        if time_limit is not None:
            h.setOptionValue("time_limit", float(time_limit))
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = len(m.lower), len(m.rows)
        lp.col_cost_ = np.zeros(len(m.lower))
        lp.col_lower_, lp.col_upper_ = np.array(m.lower), np.array(m.upper)
        lp.row_lower_ = np.array([lo for _, lo, _ in m.rows], dtype=float)
        lp.row_upper_ = np.array([hi for _, _, hi in m.rows], dtype=float)
        columns: list[list[tuple[int, float]]] = [[] for _ in m.lower]
        for r, (coefs, _, _) in enumerate(m.rows):
            for c, v in coefs.items():
                columns[c].append((r, v))
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.cumsum([0] + [len(c) for c in columns]).astype(np.int32)
        lp.a_matrix_.index_ = np.array([r for c in columns for r, _ in c], dtype=np.int32)
        lp.a_matrix_.value_ = np.array([v for c in columns for _, v in c], dtype=float)
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in m.integer]
        h.passModel(lp)
        return h

    def set_objective(self, h: highspy.Highs, coefs: dict[int, float]) -> float:
        """Minimize Σ coefs·x, scaled to unit magnitude; returns the scale to multiply back."""
        scale = _magnitude(coefs)
        cost = np.zeros(len(self.m.lower))
        for c, v in coefs.items():
            cost[c] = v / scale
        h.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32), cost)
        return scale

    def cap(self, h: highspy.Highs, coefs: dict[int, float], limit: float) -> None:
        """Add the row Σ coefs·x ≤ limit (holds a finished stage at its optimum).

        The row is scaled to unit magnitude: HiGHS drops matrix entries below its
        small_matrix_value (1e-9), which would silently loosen a row of tiny costs."""
        scale = _magnitude(coefs)
        idx = np.array(list(coefs), dtype=np.int32)
        h.addRow(-np.inf, limit / scale, len(idx), idx, np.array([coefs[i] / scale for i in idx], dtype=float))

    def assignment(self, values: Sequence[float]) -> dict:
        out = {}
        for d in self.f.decisions:
            pos = int(np.argmax([values[c] for c in self.m.onehot[d.name]]))
            out[d.name] = d.decision.menu[pos]
        return out


def _run(h: highspy.Highs) -> SolveStatus:
    h.run()
    return _STATUS.get(h.getModelStatus(), SolveStatus.ERROR)


def _magnitude(coefs: dict[int, float]) -> float:
    return max((abs(v) for v in coefs.values()), default=1.0) or 1.0


def _hold(b: MilpBuilder, h: highspy.Highs, coefs: dict[int, float], const: float, value: float) -> None:
    b.cap(h, coefs, value + tie_slack(value) - const)


def solve_milp(f: Formulation, *, time_limit: float | None = None, break_ties: bool = True) -> Solution:
    """Solve `f` to proven optimality with HiGHS (or report the gap at the time limit). A template whose
    descriptor names a `milp_split` decision is solved one value of it at a time (formloop.solve.split)."""
    on = f.template.descriptor.get("milp_split")
    if on and on in {d.name for d in f.decisions}:
        return split_solve(f, on, lambda g: solve_milp(g, time_limit=time_limit, break_ties=break_ties))
    start = time.perf_counter()
    b = MilpBuilder(f)
    h = b.highs(time_limit)
    objective = b.coefficients(b.objective)
    scale = b.set_objective(h, objective)
    status = _run(h)
    if status is SolveStatus.INFEASIBLE:
        raise Infeasible(f.template.name, irreducible_conflict(f.constraints, lambda cs: _feasible(f, cs)))
    if status is SolveStatus.ERROR or (status is SolveStatus.TIME_LIMIT and not h.getInfo().primal_solution_status):
        raise SolverFailure(f"HiGHS returned {h.modelStatusToString(h.getModelStatus())} on {f.template.name}")
    info = h.getInfo()
    best = info.objective_function_value * scale + b.objective.const
    bound, gap = info.mip_dual_bound * scale + b.objective.const, info.mip_gap
    ties = ""
    if break_ties and status is SolveStatus.OPTIMAL:
        # Hold each finished stage at the exact cost of the design it found (evaluated, not the
        # solver's float, which continuous factor columns may leave a few ulps low).
        _hold(b, h, objective, b.objective.const, _exact(f.cost, b, h))
        stages = [(b.coefficients(term), term.const, expr) for (_, expr), (_, term) in
                  zip(f.tie_break_terms(), b.tie_terms)] + [(_lexicographic(b), None, None)]
        held = list(h.getSolution().col_value)   # the last finished stage's design (cost-optimal)
        for coefs, const, expr in stages:
            b.set_objective(h, coefs)
            stage = _run(h)
            if stage is SolveStatus.TIME_LIMIT and h.getInfo().primal_solution_status:
                # every stage holds the cost optimum: the incumbent is an optimal design, its tie unbroken
                held, ties = list(h.getSolution().col_value), "ties not fully broken (time limit in a tie-break stage)"
                break
            if stage is SolveStatus.INFEASIBLE:
                # a held stage value the linearization cannot meet again (an exact evaluation a few ulps
                # below it): the previous stage's design is cost-optimal; its remaining ties stay unbroken
                ties = (f"ties not fully broken ({'lexicographic' if expr is None else 'a tie-break'} stage "
                        "infeasible under the held values; the previous stage's design kept)")
                break
            if stage is not SolveStatus.OPTIMAL:
                raise SolverFailure(f"{'lexicographic ' if expr is None else ''}tie-break stage failed on "
                                    f"{f.template.name}")
            held = list(h.getSolution().col_value)
            if expr is not None:
                _hold(b, h, coefs, const, _exact(expr, b, h))
        assignment = b.assignment(held)
    else:
        assignment = b.assignment(h.getSolution().col_value)
    return _solution(f, b, status, assignment, best, bound, gap, start, ties)


def _solution(f: Formulation, b: MilpBuilder, status, assignment, best, bound, gap, start, ties) -> Solution:
    terms = f.template.evaluate_terms(assignment, f.params)
    return Solution(
        solver="milp", status=status, assignment=assignment, objective=terms["cost"], unit=f.unit,
        bound=bound, gap=max(0.0, gap) if np.isfinite(gap) else gap, seconds=time.perf_counter() - start,
        model=b.size(), terms=terms,
        reason="; ".join(r for r in ("" if status is SolveStatus.OPTIMAL else
                                     f"time limit; incumbent {best:.6g}, bound {bound:.6g}", ties) if r),
    )


def _exact(expr, b: MilpBuilder, h: highspy.Highs) -> float:
    return float(evaluate(expr, b.assignment(h.getSolution().col_value)))


def _lexicographic(b: MilpBuilder) -> dict[int, float]:
    """Weights that make the objective the C-order flat index of the joint grid."""
    coefs: dict[int, float] = {}
    weight = 1.0
    for d in reversed(b.f.decisions):
        for pos, col in enumerate(b.m.onehot[d.name]):
            coefs[col] = pos * weight
        weight *= len(d.decision.menu)
    return coefs


def _feasible(f: Formulation, constraints: Sequence[Constraint]) -> bool:
    b = MilpBuilder(f, constraints)
    h = b.highs(None)
    return _run(h) is SolveStatus.OPTIMAL
