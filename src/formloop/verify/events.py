"""Bounded event model of the slotted shared-memory pipeline, decided with Z3 over event times.

The model: W warps share S slots; the reduction runs R phases, one k-tile per phase. Every warp
loads its own portion of each k-tile (its row of the A tile, its column of the B tile) and reads
every warp's portion when it computes. Warp program, the same for every warp:

    prologue:   load k-tile u into slot u mod S, for u < min(P, R)
    phase p:    load k-tile p+P into slot (p+P) mod S  (if p+P < R)
                leading barrier A_p                     (unless the leading barrier is dropped)
                compute k-tile p from slot p mod S
                trailing barrier B_p                    (if beta = 1)

Encoding (complete for the bounded model): one integer time per event, all distinct; program
order within each warp; a barrier lets a warp's next event happen only after every warp has
arrived. Every interleaving is a solution and every solution, sorted by time, is an interleaving.

Obligations, over every compute of k-tile u by warp w and every warp w' whose portion it reads:
  readiness — w' has loaded its portion of k-tile u before the compute;
  lifetime  — w' has not yet overwritten that portion with k-tile u+S.

A counterexample is the whole interleaving as a trace of plain tuples:
("load", warp, tile, slot), ("arrive", warp, "A" | "B", phase), ("compute", warp, tile, slot).
The replay interpreter (formloop.verify.replay) executes it independently; nothing here is shared
with it.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import z3

from formloop.errors import InvalidInput
from formloop.verify.outcome import ObligationResult, Verdict, verdict_of_validity, z3_solver_name
from formloop.verify.solver import new_optimizer, new_solver, query_text

Event = tuple
SCHEDULE_OBLIGATIONS = ("readiness", "lifetime")


@dataclass(frozen=True)
class Schedule:
    """One slot schedule of the bounded model.

    S: shared-memory slots; P: prefetch distance (k-tile p+P is loaded while p is consumed);
    beta: 1 if a trailing barrier follows each compute; warps, phases: the bound W × R;
    leading: False drops the leading barrier (a fault)."""

    S: int
    P: int
    beta: int
    warps: int = 2
    phases: int = 5
    leading: bool = True

    def __post_init__(self) -> None:
        for name, value, low in (("S", self.S, 1), ("P", self.P, 0), ("warps", self.warps, 1),
                                 ("phases", self.phases, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidInput(name, value, f"an integer >= {low}")
        if self.beta not in (0, 1):
            raise InvalidInput("beta", self.beta, (0, 1))

    @property
    def label(self) -> str:
        lead = "" if self.leading else ",no-leading"
        return f"S={self.S},P={self.P},beta={self.beta}{lead}"

    def as_dict(self) -> dict:
        return {"S": self.S, "P": self.P, "beta": self.beta, "warps": self.warps, "phases": self.phases,
                "leading": self.leading}


def warp_program(s: Schedule, w: int) -> list[Event]:
    """The events of warp `w`, in program order."""
    events: list[Event] = [("load", w, u, u % s.S) for u in range(min(s.P, s.phases))]
    for p in range(s.phases):
        if p + s.P < s.phases:
            events.append(("load", w, p + s.P, (p + s.P) % s.S))
        if s.leading:
            events.append(("arrive", w, "A", p))
        events.append(("compute", w, p, p % s.S))
        if s.beta:
            events.append(("arrive", w, "B", p))
    return events


class EventModel:
    """The Z3 constraints of one bounded schedule: times, program order, barrier semantics."""

    def __init__(self, s: Schedule):
        self.schedule = s
        self.programs = [warp_program(s, w) for w in range(s.warps)]
        self.time = {ev: z3.Int("t_" + "_".join(str(x) for x in ev)) for prog in self.programs for ev in prog}
        self.facts: list[z3.BoolRef] = [z3.Distinct(*self.time.values())] if len(self.time) > 1 else []
        for prog in self.programs:
            self.facts += [self.time[a] < self.time[b] for a, b in zip(prog, prog[1:])]
        arrivals: dict[tuple, list[Event]] = {}
        for prog in self.programs:
            for ev in prog:
                if ev[0] == "arrive":
                    arrivals.setdefault((ev[2], ev[3]), []).append(ev)
        for prog in self.programs:
            for ev, nxt in zip(prog, prog[1:]):
                if ev[0] == "arrive":
                    self.facts += [self.time[other] < self.time[nxt] for other in arrivals[(ev[2], ev[3])]]

    def _event(self, kind: str, w: int, tile: int) -> Event | None:
        return next((ev for ev in self.programs[w] if ev[0] == kind and ev[2] == tile), None)

    def violations(self, obligation: str) -> list[tuple[dict, z3.BoolRef]]:
        """Each way the obligation can fail, as (description, atom), smallest k-tile first."""
        s, out = self.schedule, []
        for u in range(s.phases):
            for w in range(s.warps):
                read = self._event("compute", w, u)
                for w2 in range(s.warps):
                    if obligation == "readiness":
                        load = self._event("load", w2, u)
                        atom = z3.BoolVal(True) if load is None else self.time[read] < self.time[load]
                    elif obligation == "lifetime":
                        load = self._event("load", w2, u + s.S)
                        if load is None:
                            continue
                        atom = self.time[load] < self.time[read]
                    else:
                        raise InvalidInput("schedule obligation", obligation, SCHEDULE_OBLIGATIONS)
                    out.append(({"tile": u, "reader": w, "writer": w2}, atom))
        return out

    def trace(self, model: z3.ModelRef) -> tuple[Event, ...]:
        return tuple(sorted(self.time, key=lambda ev: model.eval(self.time[ev], model_completion=True).as_long()))


Replayer = Callable[[tuple[Event, ...], frozenset], tuple[set[str], str]]
"""Given a trace and the defect kinds to describe first, returns the defect kinds the replay
interpreter saw and its account in words."""

CONFIRMS = {"readiness": frozenset({"uninitialized", "stale"}), "lifetime": frozenset({"overwritten"})}
"""Which replayed defect kinds witness which obligation's failure."""


def _clearest_trace(model: EventModel, atom: z3.BoolRef, timeout_s: float) -> tuple[Event, ...]:
    """An interleaving with the chosen violation and as few other violations as the solver can
    manage (soft constraints), so the replayed trace shows one defect, not a cascade."""
    opt = new_optimizer(timeout_s)
    opt.add(*model.facts, atom)
    for ob in SCHEDULE_OBLIGATIONS:
        for _, other in model.violations(ob):
            if not other.eq(atom):
                opt.add_soft(z3.Not(other))
    if opt.check() == z3.sat:
        return model.trace(opt.model())
    s = new_solver(timeout_s)  # the optimizer gave up (timeout): any interleaving with the violation
    s.add(*model.facts, atom)
    if s.check() != z3.sat:
        raise RuntimeError("a satisfiable violation has no interleaving")
    return model.trace(s.model())


def check_schedule_obligation(s: Schedule, obligation: str, *, replay: Replayer | None = None,
                              timeout_s: float = 10.0) -> ObligationResult:
    """Decide one obligation over every interleaving of the bounded model `s`.

    A satisfiable violation is turned into a trace (the violation with the smallest k-tile, then
    reader, then writer) and, when `replay` is given, executed by the replay interpreter: the
    verdict is a counterexample only if the replay sees the defect; otherwise unresolved."""
    start = time.perf_counter()
    model = EventModel(s)
    atoms = model.violations(obligation)
    solver = new_solver(timeout_s)
    solver.add(*model.facts)
    solver.add(z3.Or([a for _, a in atoms]) if atoms else z3.BoolVal(False))
    query = query_text(solver)
    verdict = verdict_of_validity(solver.check())
    name = f"{obligation}[{s.label}]"
    common = dict(obligation=name, solver=z3_solver_name(), query=query,
                  details={"schedule": s.as_dict(), "bound": f"{s.warps} warps x {s.phases} phases"})
    if verdict is Verdict.PROVED:
        return ObligationResult(verdict=verdict, seconds=time.perf_counter() - start, **common)
    if verdict is Verdict.UNRESOLVED:
        return ObligationResult(verdict=verdict, seconds=time.perf_counter() - start,
                                reason=f"z3: {solver.reason_unknown()}", **common)
    solver = new_solver(timeout_s)
    solver.add(*model.facts)
    for where, atom in atoms:
        solver.push()
        solver.add(atom)
        found = solver.check() == z3.sat
        solver.pop()
        if found:
            trace = _clearest_trace(model, atom, timeout_s)
            witness = {**s.as_dict(), **where}
            break
    else:  # the disjunction was satisfiable, so one disjunct is
        return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start,
                                reason="violation found but no single disjunct reproduces it", **common)
    if replay is None:
        return ObligationResult(verdict=Verdict.COUNTEREXAMPLE, seconds=time.perf_counter() - start,
                                witness=witness, trace=trace, reason="not replayed", **common)
    kinds, text = replay(trace, CONFIRMS[obligation])
    if kinds & CONFIRMS[obligation]:
        return ObligationResult(verdict=Verdict.COUNTEREXAMPLE, seconds=time.perf_counter() - start,
                                witness=witness, trace=trace, replay=text, **common)
    return ObligationResult(verdict=Verdict.UNRESOLVED, seconds=time.perf_counter() - start, witness=witness,
                            trace=trace, replay=text,
                            reason=f"the {obligation} proof fails but replay of the trace shows no such defect",
                            **common)


def check_schedule(s: Schedule, *, replay: Replayer | None = None, timeout_s: float = 10.0) -> list[ObligationResult]:
    """Readiness and lifetime of one schedule."""
    return [check_schedule_obligation(s, ob, replay=replay, timeout_s=timeout_s) for ob in SCHEDULE_OBLIGATIONS]
