"""Wall relaxation (codesign.walls.relax_walls, Algorithm 1) over chips the H200 emulates (issue 18).

The chip grid is a hardware library of three components, each an `evaluate.emulated.Walls` field:
`sm` (SMs a green context leaves the launch), `smem` (KiB of shared memory a block may use) and
`regs` (registers a thread may use: maxnreg; 255 is the uncapped file). Its area model is an
ASSUMPTION, labelled so wherever it is printed (see AREA): SM logic per SM, shared memory per KiB
per SM and registers per thread per SM (×2048 threads / 1024).

This is the problem object relax_walls reads, over the GPU GEMM family or the attention-decode family
(DEMANDS says what a design of each asks of each wall):
  SOLVE(h)   the family's pick per shape on the emulated chip of h under `codesign.emulated_model`
             (GEMM: the family's cost read at the occupancy the walls leave: blocks per SM from shared
             memory, registers (the maxnreg cap) and warps; attention-decode: its own cost, which counts
             the programs an SM holds; the cap is each family's C2 wall, shared memory its C1, SMs scale
             the peaks); ratio = model time / the model's time of its pick on the full chip. The
             benchmark measures exactly these picks, so a purchase's predicted gain is the model SOLVE
             used.
  removing   a wall relaxes its component to the full chip's value (an emulated chip cannot exceed
             the H200): the screen says which wall the model thinks binds. The SM count is priced
             as a wall here although the family's contract reads it in its cost, not a constraint.
  measure    the `measure(walls, shape)` callable (the benchmark's: an emulated timing with fallback
             to the next-best admitted design when one fails), ratio to the full chip's measurement;
             a scenario without a finite measurement has ratio inf.
  refit      on a miss, every chip measured so far gets its measured ratios (a per-chip, per-shape
             factor measured / model; any other chip takes the factors of the nearest corrected chip in
             menu steps: version + 1); the relaxation re-solves and prices again, and stops only when a
             miss has no finite measurement to learn from.
  certify    every emulated chip is admitted: the family's obligations are its h200 contract's, and
             each design is checked against the emulated walls (template.check) before it runs.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from formloop.codesign.chip_proofs import ChipCertificate
from formloop.codesign.emulated_model import EmulatedModel
from formloop.codesign.problem import ScenarioOptimum
from formloop.errors import Infeasible, InvalidInput
from formloop.evaluate.emulated import KiB, Walls, emulated_chip
from formloop.hw.chips import Chip
from formloop.hw.library import ChipConfig, Component, HardwareLibrary
from formloop.template import Template

# mm2 per unit (ASSUMED, illustrative): an SM's logic, a KiB of shared memory per SM, a register of
# every thread's file per SM (2048 threads, per 1024: x2).
AREA = {"sm": 1.6, "smem": 0.012, "regs": 0.004 * 2}
FULL_REGS = 255


def library(sms=(16, 33, 66, 132), smem_kib=(64, 128, 227), regs=(128, 255), ceiling_mm2: float = 450.0,
            ) -> HardwareLibrary:
    """The emulated chip grid with its assumed area model; the reference is the full H200."""
    return HardwareLibrary(
        name="h200-emulated", ceiling_mm2=ceiling_mm2, uncore_mm2=0.0, sm_component="sm",
        components=(Component("sm", "SMs", tuple(sms), per_sm=False, logic_mm2=AREA["sm"],
                              doc="SMs a green context leaves the launch"),
                    Component("smem", "KiB/block", tuple(smem_kib), per_sm=True, logic_mm2=AREA["smem"],
                              doc="shared memory a block may use"),
                    Component("regs", "regs/thread", tuple(regs), per_sm=True, logic_mm2=AREA["regs"],
                              doc="registers a thread may use (maxnreg; 255 = uncapped)")),
        reference_values={"sm": max(sms), "smem": max(smem_kib), "regs": max(regs)},
        source="assumed area model (formloop.codesign.emulated_walls.AREA)")


def walls_of(h: ChipConfig) -> Walls:
    regs = int(h["regs"])
    return Walls(int(h["sm"]), int(h["smem"]) * KiB, None if regs >= FULL_REGS else regs)


@dataclass(frozen=True)
class Wall:
    name: str
    resource: str
    limit: str


@dataclass(frozen=True)
class Measured:
    ratio: float
    us: float


@dataclass
class EmulatedWallsProblem:
    """relax_walls' problem over emulated chips of `base` for `template` at `scenarios` (shape -> workload)."""

    template: Template
    base: Chip
    library: HardwareLibrary
    scenarios: Mapping[str, Mapping[str, int]]
    measure_us: Callable[[Walls, str], float]     # (walls, scenario) -> measured us (nan: none)
    model: EmulatedModel | None = None            # default: the occupancy-aware model of `template` on `base`
    version: int = 0
    cache: dict = field(default_factory=dict, repr=False)
    corrections: dict = field(default_factory=dict)   # chip values -> {scenario: measured / model ratio}
    measured: dict = field(default_factory=dict, repr=False)   # (chip values, scenario) -> measured ratio
    open_walls: tuple = (Wall("sm", "sm", "sm_count"), Wall("smem", "smem", "smem_per_block"),
                         Wall("regs", "regs", "registers_per_thread"))

    def __post_init__(self) -> None:
        if self.template.name not in DEMANDS:
            raise InvalidInput("template of an emulated-walls problem", self.template.name, sorted(DEMANDS))
        if self.model is None:
            self.model = EmulatedModel(self.template, self.base)
        self.full = self.library.reference
        self.reference = {sc: self._pick(sc, self.full, frozenset())[1] for sc in self.scenarios}

    def objective(self, name: str) -> tuple[str, ...]:
        return tuple(self.scenarios)

    def wall(self, name: str) -> Wall:
        return next(w for w in self.open_walls if w.name == name)

    def walls(self, h: ChipConfig, removed=frozenset()) -> Walls:
        values = {**h.as_dict(), **{w: self.full[w] for w in removed}}
        return walls_of(self.library.chip(**values))

    def chip(self, h: ChipConfig, removed=frozenset()) -> Chip:
        return emulated_chip(self.base, self.walls(h, removed))

    def _pick(self, sc: str, h: ChipConfig, removed: frozenset) -> tuple[str | None, float, str]:
        try:
            a, us = self.model.pick(self.scenarios[sc], self.walls(h, removed))
        except Infeasible as exc:
            return None, math.inf, "; ".join(exc.reasons)
        return label(a), us, ""

    def solve_scenario(self, sc: str, h: ChipConfig, removed=frozenset()) -> ScenarioOptimum:
        """The model's pick and ratio; a chip the evaluator corrected (refit) reads its measured ratio."""
        key = (h.values, frozenset(removed), sc)
        if key not in self.cache:
            program, us, why = self._pick(sc, h, frozenset(removed))
            ratio = us / self.reference[sc]
            if not removed and self.corrections:
                ratio *= self.corrections[self._nearest_corrected(h)][sc]
            self.cache[key] = ScenarioOptimum(sc, program, ratio, why)
        return self.cache[key]

    def _nearest_corrected(self, h: ChipConfig):
        """The corrected chip nearest to h in menu steps (ties: the smaller area, then menu order): its
        measured/model factors stand for h's, so neighbours of a corrected incumbent are not priced
        against it with the raw model (a phantom gain)."""
        def steps(v):
            other = dict(v)
            return sum(abs(c.menu.index(h[c.name]) - c.menu.index(other[c.name])) for c in self.library.components)
        return min(self.corrections, key=lambda v: (steps(v), self.library.chip(**dict(v)).area, v))

    def model_ratio(self, h: ChipConfig) -> float:
        """The worst scenario ratio the model (uncorrected) predicts for chip h."""
        return max(self._pick(sc, h, frozenset())[1] / self.reference[sc] for sc in self.scenarios)

    def measure(self, sc: str, program: str, h: ChipConfig) -> Measured:
        """The evaluator's ratio for the chip's pick of `sc` (the benchmark measures the pick, falling
        back to the next-best admitted design when it fails): inf without two finite measurements."""
        us, ref = self.measure_us(walls_of(h), sc), self.measure_us(walls_of(self.full), sc)
        ok = math.isfinite(us) and math.isfinite(ref) and ref > 0
        ratio = us / ref if ok else math.inf
        self.measured[(h.values, sc)] = ratio
        return Measured(ratio, us)

    def capacity(self, wall: str, h: ChipConfig) -> float:
        return float(h[wall])

    def demand(self, sc: str, program: str, wall: str, h: ChipConfig) -> float:
        """What the design asks of the wall (DEMANDS: the family's blocks, shared memory in KiB, registers
        a thread)."""
        a = design(program)
        values = self.template.bind(self.scenarios[sc], self.chip(h))
        return DEMANDS[self.template.name](a, values, self.template.evaluate_terms(a, values))[wall]

    def admitted(self, sc: str, program: str, h: ChipConfig) -> list[str]:
        """Walls the design breaks on h (C1: smem, C2: regs)."""
        broken = {v.name for v in self.template.check(design(program), self.scenarios[sc], self.chip(h))}
        return [w for w, c in (("smem", "C1"), ("regs", "C2")) if c in broken]

    def refit(self, optima, h: ChipConfig):
        """After a miss: every chip with finite measurements of all scenarios takes them as its ratios
        (model ratio x measured / model). None (stop) when the missed chip has no finite measurement."""
        if any(not math.isfinite(self.measured.get((h.values, o.scenario), math.inf)) for o in optima):
            return None
        chips = {v for v, _ in self.measured}
        fixes = {}
        for v in chips:
            ratios = {sc: self.measured.get((v, sc), math.inf) for sc in self.scenarios}
            if all(math.isfinite(r) for r in ratios.values()):
                chip = self.library.chip(**dict(v))
                fixes[v] = {sc: ratios[sc] / (self._pick(sc, chip, frozenset())[1] / self.reference[sc])
                            for sc in self.scenarios}
        self._pending = fixes
        return f"measured ratios of {len(fixes)} chips", max(fixes[h.values].values())

    def recalibrate(self, term: str, factor: float) -> None:
        self.corrections.update(self._pending)
        self.version += 1
        self.cache.clear()

    def certify(self, h: ChipConfig) -> ChipCertificate:
        return ChipCertificate(h.label(), None, "emulated on the h200: the family's h200 contract; designs are "
                                                "checked against the emulated walls before they run")


def _gemm_demand(a: Mapping[str, int], values: Mapping[str, float], terms: Mapping[str, float]) -> dict:
    """gemm-tiling-gpu: blocks of its grid (sm), shared memory in KiB (smem, C1), fp32 accumulators a thread +
    the family's headroom (regs, C2)."""
    from formloop.library.gemm_tiling_gpu import ACC_HEADROOM

    return {"sm": float(-(-values["M"] // a["Tm"]) * -(-values["N"] // a["Tn"]) * a["KS"]),
            "smem": terms["smem_bytes"] / KiB, "regs": a["Tm"] * a["Tn"] / (32 * a["W"]) + ACC_HEADROOM}


def _decode_demand(a: Mapping[str, int], values: Mapping[str, float], terms: Mapping[str, float]) -> dict:
    """attention-decode: its programs (sm), shared memory in KiB (smem, C1), fp32 accumulator and score rows a
    thread (the 16-row padded dots: max(QP, 16)·(D + 2·Bn) over the warps' threads) + the family's reserve (regs,
    C2)."""
    from formloop.library.attention_decode import REG_RESERVE

    rows = max(a["QP"], 16) * (values["D"] + 2 * a["Bn"])
    return {"sm": float(terms["programs"]), "smem": terms["smem_bytes"] / KiB,
            "regs": rows / (32 * a["W"]) + REG_RESERVE}


# wall -> demand of a design, per family; both families' C1 is their shared memory and C2 their registers
DEMANDS = {"gemm-tiling-gpu": _gemm_demand, "attention-decode": _decode_demand}


def label(assignment: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in assignment.items())


def design(program: str) -> dict[str, int]:
    return {k: int(v) for k, v in (part.split("=") for part in program.split(","))}
