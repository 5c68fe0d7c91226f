"""Wall relaxation (seed 000 §3, Algorithm 1) and its coupled variant.

From a start chip within the area ceiling: SOLVE(h) (each scenario's program MILP at the fixed
chip; L* = worst scenario ratio); screen every wall by re-solving with it removed (Λ_i); price each
passing wall k menu steps out (its staircase) and every pair of passing walls one step each; buy
the move with the largest drop of L* per added mm² within the ceiling (near-ties go to the smaller
area); validate the purchase on the evaluator (on a miss: refit the responsible cost term, re-solve
the incumbent under the new model, discard every stored price, price again); reclaim one step of
each wall with slack when L* stays the same; repeat until nothing gains or T rounds are spent.
The coupled variant also screens each pair of walls with both removed and prices passing pairs.

Proofs follow the chip: the start chip, every chip bought and every chip reclaimed to must be
admitted by the problem's certificate (`problem.certify(chip)`: for a library template, its
obligations proved at that chip); a priced move onto a chip that is not proved is passed over for
the next best. `gain="raw"` ranks moves by the drop of L* alone, ignoring area: an ablation that
shows what pricing per mm² buys where area binds.

Counts: `calls` is every SOLVE the algorithm asks for (the quantity bounded by 1 + T(2n + bk + b²)
for Algorithm 1; the coupled variant adds n(n-1)/2 pair screens per round), `inner_problems` the
distinct (chip, removed walls, model version) among them, `scenario_solves` the MILPs actually run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from formloop.codesign.chip_proofs import ChipCertificate
from formloop.codesign.problem import ScenarioOptimum
from formloop.errors import InvalidInput
from formloop.hw.library import ChipConfig, Step
from formloop.solve.result import tied

GAIN_TOL = 1e-9
GAINS = ("per_mm2", "raw")


@dataclass(frozen=True)
class Inner:
    """SOLVE(h) with walls `removed`: the best program per scenario and L* (worst ratio)."""

    chip: ChipConfig
    removed: frozenset[str]
    optima: tuple[ScenarioOptimum, ...]

    @property
    def L(self) -> float:
        return max(o.ratio for o in self.optima)

    @property
    def software(self) -> dict[str, str | None]:
        return {o.scenario: o.program for o in self.optima}


class InnerSolver:
    """SOLVE for one objective, with the counts the acceptance bound speaks about."""

    def __init__(self, problem, objective: str):
        self.problem, self.scenarios = problem, problem.objective(objective)
        self.calls = 0
        self.problems: set = set()
        self.scenario_solves = 0

    def solve(self, h: ChipConfig, removed=frozenset()) -> Inner:
        removed = frozenset(removed)
        self.calls += 1
        self.problems.add((self.problem.version, h.values, removed))
        optima = []
        for sc in self.scenarios:
            before = len(self.problem.cache)
            optima.append(self.problem.solve_scenario(sc, h, removed))
            self.scenario_solves += len(self.problem.cache) - before
        return Inner(h, removed, tuple(optima))


def solve_chip(problem, objective: str, h: ChipConfig) -> tuple[dict, float, dict[str, float]]:
    """SOLVE(h) -> (s*(h), L*(h), B(h)): the best programs, the worst ratio, and the walls whose
    removal lowers L* (Λ_i > 0) with their Λ_i."""
    S = InnerSolver(problem, objective)
    inner = S.solve(h)
    lam = {w.name: inner.L - S.solve(h, {w.name}).L for w in problem.open_walls}
    return inner.software, inner.L, {k: v for k, v in lam.items() if v > GAIN_TOL}


@dataclass(frozen=True)
class Purchase:
    before: ChipConfig
    after: ChipConfig
    move: str
    predicted_drop: float
    evaluated_drop: float
    added_mm2: float
    mechanism: tuple[str, ...]
    certificate: ChipCertificate | None = None


@dataclass
class Relaxation:
    objective: str
    start: ChipConfig
    chip: ChipConfig
    L: float                     # model ratio of the final design
    evaluated: float             # evaluator ratio of the final design
    software: dict
    visited: list[Inner]
    purchases: list[Purchase]
    reclaims: list[tuple[ChipConfig, ChipConfig]]
    events: list[str]
    calls: int
    inner_problems: int
    scenario_solves: int
    rounds: int
    walls: int
    max_passing: int
    k: int
    coupled: bool
    recalibrations: int
    trajectory: list[tuple[int, float]] = field(default_factory=list)   # (distinct problems so far, L*)
    path: list[tuple[str, ChipConfig, float, int]] = field(default_factory=list)  # (step, chip, L*, model version)
    keys: frozenset = frozenset()        # the distinct inner problems: (model version, chip values, removed)
    gain: str = "per_mm2"
    certificates: dict = field(default_factory=dict)   # chip label -> ChipCertificate of every chip scored

    @property
    def bound(self) -> int:
        """1 + T(2n + bk + b²) with T the rounds run; the coupled variant adds its pair screens,
        and each recalibration one re-solve of the incumbent."""
        n, b = self.walls, self.max_passing
        per_round = 2 * n + b * self.k + b * b + (n * (n - 1) // 2 if self.coupled else 0)
        return 1 + self.rounds * per_round + self.recalibrations

    def nondominated(self) -> list[Inner]:
        pts = [v for v in self.visited if not v.removed and math.isfinite(v.L)]
        out = []
        for v in pts:
            if not any((o.L <= v.L and o.chip.area <= v.chip.area) and (o.L < v.L or o.chip.area < v.chip.area)
                       for o in pts):
                if all(o.chip != v.chip for o in out):
                    out.append(v)
        return sorted(out, key=lambda v: v.chip.area)


def relax_walls(problem, objective: str, start: ChipConfig, *, k: int = 2, rounds: int = 20, coupled: bool = False,
                band: float = 0.05, near_tie: float = 1e-6, gain: str = "per_mm2") -> Relaxation:
    """Algorithm 1 (coupled=False) or its coupled variant from chip `start`."""
    lib = problem.library
    if not lib.fits(start):
        raise InvalidInput("start chip", start.label(lib.open_components()),
                           f"a chip with area <= {lib.ceiling_mm2} mm2 (this one: {start.area:.4f} mm2)")
    if k < 1 or rounds < 1:
        raise InvalidInput("k and rounds", (k, rounds), "positive integers")
    if gain not in GAINS:
        raise InvalidInput("gain", gain, GAINS)
    S = InnerSolver(problem, objective)
    walls = problem.open_walls
    names = lib.open_components()
    events: list[str] = []
    certificates: dict[str, ChipCertificate] = {}

    def certify(chip: ChipConfig) -> ChipCertificate:
        cert = certificates[chip.label(names)] = problem.certify(chip)
        return cert

    if not (cert := certify(start)).admits:
        raise InvalidInput("start chip", start.label(names), "a chip at which the template is proved",
                           fix=cert.summary())
    h = start
    cur = S.solve(h)
    visited = [cur]
    trajectory = [(len(S.problems), cur.L)]
    measured = _measure(problem, cur)
    path = [("start", h, cur.L, problem.version)]
    purchases: list[Purchase] = []
    reclaims: list[tuple[ChipConfig, ChipConfig]] = []
    rounds_run = max_b = recalibrations = 0
    while rounds_run < rounds:
        rounds_run += 1
        # 2. Screen, then price passing walls (staircase k out) and pairs.
        lam = {w.name: cur.L - S.solve(h, {w.name}).L for w in walls}
        passing = [w for w in walls if lam[w.name] > GAIN_TOL]
        max_b = max(max_b, len(passing))
        moves: list[tuple[str, Step]] = []
        for w in passing:
            moves += [(f"{w.resource}+{t}", t * lib.e(w.resource)) for t in range(1, k + 1)]
        pairs = [(a, b) for i, a in enumerate(passing) for b in passing[i + 1:]]
        if coupled:
            for i, a in enumerate(walls):
                for b in walls[i + 1:]:
                    if (a in passing and b in passing) or cur.L - S.solve(h, {a.name, b.name}).L <= GAIN_TOL:
                        continue
                    pairs.append((a, b))
        moves += [(f"{a.resource}+1,{b.resource}+1", lib.e(a.resource) + lib.e(b.resource))
                  for a, b in pairs if a.resource != b.resource]
        events.append(f"round {rounds_run} at {h.label(names)}: L*={cur.L:.4f}; screen "
                      + ", ".join(f"Λ[{n}]={v:.4f}" for n, v in lam.items()) + f"; pricing {len(moves)} moves")
        priced = []
        for label, step in moves:
            if not h.can_move(step) or not lib.fits(h2 := h + step):
                continue
            res = S.solve(h2)
            visited.append(res)
            trajectory.append((len(S.problems), cur.L))   # the incumbent's L* (Proposition 2)
            drop, added = cur.L - res.L, h2.area - h.area
            if drop > GAIN_TOL and added > 0:
                priced.append((drop / added if gain == "per_mm2" else drop, added, label, res))
        # 3. Buy the best priced move on a proved chip.
        choice = None
        for m in _ranked(priced, near_tie):
            if (cert := certify(m[3].chip)).admits:
                choice = m
                break
            events.append(f"pass over {m[2]}: chip not proved ({cert.summary()})")
        if choice is None:
            events.append("no move with a positive gain on a proved chip: stop")
            break
        _, added, label, res = choice
        # 4. Validate on the evaluator.
        after = _measure(problem, res)
        predicted, evaluated = cur.L - res.L, measured - after
        if abs(predicted - evaluated) > band * max(abs(predicted), abs(evaluated)) + 1e-12:
            refit = problem.refit(res.optima, res.chip)
            if refit is None:
                events.append(f"miss on {label}: predicted drop {predicted:.4f}, evaluated {evaluated:.4f}; "
                              "no cost term to refit: stop")
                break
            term, factor = refit
            problem.recalibrate(term, factor)
            recalibrations += 1
            events.append(f"miss on {label}: predicted drop {predicted:.4f}, evaluated {evaluated:.4f}; "
                          f"recalibrated {term} to {factor:.4g}; re-solved incumbent; discarded {len(priced)} prices")
            cur = S.solve(h)
            measured = _measure(problem, cur)
            path.append(("recalibrated", h, cur.L, problem.version))
            continue
        purchases.append(Purchase(h, res.chip, label, predicted, evaluated, added, _mechanism(problem, cur, res),
                                  certificates[res.chip.label(names)]))
        events.append(f"buy {label}: {h.label(names)} -> {res.chip.label(names)}, drop {predicted:.4f} "
                      f"(evaluated {evaluated:.4f}) for {added:.4f} mm2")
        h, cur, measured = res.chip, res, after
        path.append(("buy", h, cur.L, problem.version))
        # 5. Reclaim one step of each wall with slack when L* stays (onto a proved chip only).
        for w in walls:
            down = -lib.e(w.resource)
            if not h.can_move(down) or not _has_slack(problem, cur, w.name):
                continue
            trial = S.solve(h + down)
            visited.append(trial)
            if math.isfinite(trial.L) and tied(trial.L, cur.L):   # inf - x <= inf: infinities never tie
                if not (cert := certify(trial.chip)).admits:
                    events.append(f"keep {w.resource}: reclaimed chip not proved ({cert.summary()})")
                    continue
                reclaims.append((h, trial.chip))
                events.append(f"reclaim {w.resource}: {h.label(names)} -> {trial.chip.label(names)}")
                h, cur = trial.chip, trial
                measured = _measure(problem, cur)
                path.append(("reclaim", h, cur.L, problem.version))
        trajectory.append((len(S.problems), cur.L))
    trajectory.append((len(S.problems), cur.L))
    return Relaxation(objective, start, h, cur.L, measured, cur.software, visited, purchases, reclaims, events,
                      S.calls, len(S.problems), S.scenario_solves, rounds_run, len(walls), max_b, k, coupled,
                      recalibrations, trajectory, path, frozenset(S.problems), gain, certificates)


def _ranked(priced: list, near_tie: float) -> list:
    """Moves in buying order: the largest gain first; among gains within `near_tie` of it, the
    smallest added area (then pricing order)."""
    rest, out = list(priced), []
    while rest:
        best = max(m[0] for m in rest)
        pick = min((m for m in rest if m[0] >= best * (1 - near_tie)), key=lambda m: m[1])
        out.append(pick)
        rest.remove(pick)
    return out


def _measure(problem, inner: Inner) -> float:
    """The evaluator's worst-scenario ratio for the inner optimum's programs on its chip."""
    out = []
    for o in inner.optima:
        out.append(float("inf") if o.program is None else problem.measure(o.scenario, o.program, inner.chip).ratio)
    return max(out)


def _has_slack(problem, inner: Inner, wall: str) -> bool:
    cap = problem.capacity(wall, inner.chip)
    return all(o.program is not None and problem.demand(o.scenario, o.program, wall, inner.chip) < cap
               for o in inner.optima)


def _mechanism(problem, before: Inner, after: Inner) -> tuple[str, ...]:
    """Which programs became legal: for each scenario whose program changed, the walls the new
    program broke on the old chip."""
    out = []
    for b, a in zip(before.optima, after.optima):
        if a.program == b.program or a.program is None:
            continue
        needs = [f"{problem.wall(w).limit} {problem.demand(a.scenario, a.program, w, before.chip):g} > "
                 f"{problem.capacity(w, before.chip):g}" for w in problem.admitted(a.scenario, a.program, before.chip)]
        out.append(f"{a.scenario}: {b.program} -> {a.program}" + (f" (needs {', '.join(needs)})" if needs else ""))
    return tuple(out)
