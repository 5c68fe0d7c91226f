"""The tiling program of gemm-tiling as data, its six named faults, and its proof obligations.

The program a design (Tm, Tn, Tk, S, P, beta) stands for, in the terms the verifier reads:
  grid        ⌈M/Tm⌉ × ⌈N/Tn⌉ blocks; each block runs ⌈K/Tk⌉ k-tiles
  strides     tile b of an axis starts at b·T
  guards      an access at row, column or k index x happens only if x < M, N or K
  backward π  index x belongs to tile x // T at offset x mod T
  schedule    S slots, prefetch distance P, leading barrier, trailing barrier if beta = 1
The tiling rule of each axis is declared once (`gemm_tiling_index.AxisSpec`); the same data gives
Z3 expressions (formloop.verify.index) and plain numbers (the replay interpreter), so a fault
changes one field and both readers see it.

Faults (each a plausible implementation mistake, checked on the proved 1000³ design):
  floor-grid                 grid and k-loop use ⌊X/T⌋: the tail is never computed
  unguarded-tail             no bounds guards: tail blocks write outside C and add padding terms
  overlapping-tiles          output tiles start at b·(T−1), grid ⌈X/(T−1)⌉: elements computed twice
  single-buffer-prefetch     S = 1 with P = 1
  double-buffer-no-trailing  S = 2, P = 1, beta = 0
  missing-leading-barrier    the barrier before each compute is dropped
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from formloop.errors import InvalidInput
from formloop.library.gemm_tiling_index import AxisSpec
from formloop.template import Template
from formloop.verify.certificate import ProofPlan, ProofRun, overall
from formloop.verify.events import Schedule, check_schedule
from formloop.verify.index import INDEX_CONFIRMS, INDEX_OBLIGATIONS, check_index
from formloop.verify.outcome import ObligationResult, Verdict
from formloop.verify.replay import AxisLoop, replay_tiling, replay_trace
from formloop.verify.smt import admitted

FAULTS = {
    "floor-grid": ("floor-divided grid and k-loop (tail uncovered)", ("coverage",)),
    "unguarded-tail": ("no bounds guards on the tail", ("no-phantom",)),
    "overlapping-tiles": ("output tiles overlap (stride T-1)", ("exact-once",)),
    "single-buffer-prefetch": ("one slot with prefetch distance one (S=1, P=1)", ("lifetime",)),
    "double-buffer-no-trailing": ("two slots, P=1, no trailing barrier (S=2, P=1, beta=0)", ("lifetime",)),
    "missing-leading-barrier": ("no barrier between a tile's loads and its compute", ("readiness", "lifetime")),
}
"""name -> (what is wrong, the obligations responsible for catching it)."""

PROVED_DESIGN = {"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0}
PROVED_SHAPE = (1000, 1000, 1000)
WARPS, PHASES = 2, 5
AXES = (("M", "Tm"), ("N", "Tn"), ("K", "Tk"))


@dataclass(frozen=True)
class TilingProgram:
    """One design of gemm-tiling as the verifier reads it (a fault, if any, applied)."""

    design: Mapping[str, int]
    axes: tuple[AxisSpec, AxisSpec, AxisSpec]
    schedule: Schedule
    fault: str | None = None

    def axis(self, name: str) -> AxisSpec:
        return next(a for a in self.axes if a.extent == name)

    def loops(self, M: int, N: int, K: int) -> tuple[AxisLoop, AxisLoop, AxisLoop]:
        ext = {"M": M, "N": N, "K": K}
        return tuple(a.loop(ext[a.extent], self.design[a.tile]) for a in self.axes)  # type: ignore[return-value]


def program(assignment: Mapping[str, int], fault: str | None = None, *, warps: int = WARPS,
            phases: int = PHASES) -> TilingProgram:
    """The program of `assignment`, with `fault` injected (None for the correct program)."""
    if fault is not None and fault not in FAULTS:
        raise InvalidInput("fault", fault, sorted(FAULTS))
    missing = [n for n in ("Tm", "Tn", "Tk", "S", "P", "beta") if n not in assignment]
    if missing:
        raise InvalidInput("design", dict(assignment), "values for Tm, Tn, Tk, S, P, beta", fix=f"missing {missing}")
    axes = [AxisSpec(x, t) for x, t in AXES]
    sched = Schedule(int(assignment["S"]), int(assignment["P"]), int(assignment["beta"]), warps, phases)
    if fault == "floor-grid":
        axes = [replace(a, floor=True) for a in axes]
    elif fault == "unguarded-tail":
        axes = [replace(a, guarded=False) for a in axes]
    elif fault == "overlapping-tiles":
        axes = [replace(a, shrink=1) if a.extent in ("M", "N") else a for a in axes]
    elif fault == "single-buffer-prefetch":
        sched = replace(sched, S=1, P=1)
    elif fault == "double-buffer-no-trailing":
        sched = replace(sched, S=2, P=1, beta=0)
    elif fault == "missing-leading-barrier":
        sched = replace(sched, leading=False)
    return TilingProgram(dict(assignment), tuple(axes), sched, fault)  # type: ignore[arg-type]


# --- replay wiring -------------------------------------------------------------------------------

def schedule_replayer(s: Schedule):
    def replay(trace, focus):
        r = replay_trace(trace, S=s.S, P=s.P, beta=s.beta, warps=s.warps, phases=s.phases, leading=s.leading,
                         focus=focus)
        return set(r.kinds), r.text
    return replay


def index_replayer(prog: TilingProgram, shape: Sequence[int] | None):
    """Replays an index witness on the whole loop nest: the failing axis at the witness extent,
    the others at the workload's extents (or one full tile when there is no workload)."""
    def replay(obligation: str, axis: str, tile: int, extent: int, index: int):
        ext = dict(zip(("M", "N", "K"), shape)) if shape is not None else \
            {x: prog.design[t] for x, t in AXES}
        ext[axis] = extent
        design = {**prog.design, prog.axis(axis).tile: tile}
        loops = replace(prog, design=design).loops(ext["M"], ext["N"], ext["K"])
        r = replay_tiling(*loops, focus=(axis, index))
        return set(r.kinds), r.describe(INDEX_CONFIRMS[obligation], axis)
    return replay


# --- obligations ---------------------------------------------------------------------------------

def check_index_axes(prog: TilingProgram, *, shape: Sequence[int] | None = None, timeout_s: float = 10.0,
                     menus: Mapping[str, Sequence[int]] | None = None) -> list[ObligationResult]:
    """Coverage, exact-once and no-phantom on every axis, at the design's tile sizes (or at every
    size of `menus`), each for every extent."""
    out = []
    replay = index_replayer(prog, shape)
    prefer = dict(zip(("M", "N", "K"), shape)) if shape is not None else {}
    for spec in prog.axes:
        axis = spec.expr()
        for tile in (menus[spec.tile] if menus else (prog.design[spec.tile],)):
            for ob in INDEX_OBLIGATIONS:
                out.append(check_index(axis, ob, int(tile), replay=replay, prefer_extent=prefer.get(spec.extent),
                                       timeout_s=timeout_s))
    return out


def combine(name: str, parts: Sequence[ObligationResult]) -> ObligationResult:
    """One obligation from its parts (per axis): proved if all are, a counterexample if any is."""
    verdict = overall(parts)
    failing = [p for p in parts if p.verdict is Verdict.COUNTEREXAMPLE] or \
        [p for p in parts if p.verdict is Verdict.UNRESOLVED]
    first = failing[0] if failing else None
    return ObligationResult(
        obligation=name, verdict=verdict, seconds=sum(p.seconds for p in parts),
        solver=parts[0].solver if parts else "", query="\n".join(p.query for p in parts),
        witness=first.witness if first else None, trace=first.trace if first else (),
        replay="; ".join(f"{p.obligation}: {p.replay}" for p in failing if p.replay),
        reason="; ".join(p.reason for p in failing if p.reason and p.verdict is verdict),
        details={"parts": {p.obligation: p.verdict.value for p in parts}},
    )


def check_program(prog: TilingProgram, *, shape: Sequence[int] | None = PROVED_SHAPE,
                  timeout_s: float = 10.0) -> list[ObligationResult]:
    """The five obligations of one design (fault applied): coverage, exact-once, no-phantom over
    every extent at its tile sizes, then readiness and lifetime of its slot schedule."""
    index = check_index_axes(prog, shape=shape, timeout_s=timeout_s)
    out = [combine(ob, [r for r in index if r.obligation.startswith(ob + "[")]) for ob in INDEX_OBLIGATIONS]
    for r in check_schedule(prog.schedule, replay=schedule_replayer(prog.schedule), timeout_s=timeout_s):
        parts = {r.obligation: r.verdict.value}
        out.append(replace(r, obligation=r.obligation.split("[")[0], details={**r.details, "parts": parts}))
    return out


def check_design(assignment: Mapping[str, int], shape: Sequence[int] | None = PROVED_SHAPE, *,
                 fault: str | None = None, warps: int = WARPS, phases: int = PHASES,
                 timeout_s: float = 10.0) -> list[ObligationResult]:
    return check_program(program(assignment, fault, warps=warps, phases=phases), shape=shape, timeout_s=timeout_s)


def check_fault(name: str, *, warps: int = WARPS, phases: int = PHASES, timeout_s: float = 10.0
                ) -> list[ObligationResult]:
    """The proved 1000³ design with fault `name` injected, checked against all five obligations."""
    if name not in FAULTS:
        raise InvalidInput("fault", name, sorted(FAULTS))
    return check_design(PROVED_DESIGN, PROVED_SHAPE, fault=name, warps=warps, phases=phases, timeout_s=timeout_s)


def verify_schedule(S: int, P: int, beta: int, *, warps: int = WARPS, phases: int = PHASES, leading: bool = True,
                    timeout_s: float = 10.0) -> list[ObligationResult]:
    """Readiness and lifetime of one slot schedule over every interleaving of warps × phases."""
    s = Schedule(S, P, beta, warps, phases, leading)
    return check_schedule(s, replay=schedule_replayer(s), timeout_s=timeout_s)


def obligations(template: Template, fixed: Mapping[str, Any]) -> ProofPlan:
    """The obligations hook: index obligations at every menu tile size and schedule obligations
    for every (S, P, beta) the template's constraints admit under the proof's scope; by default the
    chip is `fixed` (the gemm-tiling module passes the illustrative chip and the dtype's size)."""
    menus = {d.name: d.decision.menu for d in template.decisions}

    def index_checks(run: ProofRun) -> list[ObligationResult]:
        base = program({n: menus[n][0] for n in ("Tm", "Tn", "Tk", "S", "P", "beta")})
        return check_index_axes(base, shape=None, timeout_s=run.timeout_s, menus=menus)

    def schedule_checks(run: ProofRun) -> list[ObligationResult]:
        out = []
        for sched in admitted(template, ("S", "P", "beta"), scope=run.scope, timeout_s=run.timeout_s):
            out += verify_schedule(sched["S"], sched["P"], sched["beta"], timeout_s=run.timeout_s)
        return out

    return ProofPlan(
        fixed=dict(fixed),
        fixed_reason=("C1 and C2 read chip capacities (Ms, R_acc) and the element size e; they are fixed to the "
                      "illustrative chip and the template's dtype so K1/K3 stay decidable, unless the proof is asked "
                      "to keep chip parameters symbolic; M, N, K stay symbolic"),
        bounds={"warps": WARPS, "phases": PHASES, "index extents": "every extent >= 1, one query per menu tile size"},
        checks=(index_checks, schedule_checks),
    )
