"""The GPU GEMM family's cost on an emulated chip, with the occupancy the emulated walls set (issue 18 part 3).

Why the first H200 run missed (RESULTS.md, "Emulated walls"): the family's cost model runs one block per
SM (waves = ⌈blocks / n_sm⌉), but the emulated walls cap what one block may use, not what the SM holds:
an SM keeps its 228 KiB of shared memory and 64 Ki registers, so designs of 64 KiB run two or three
blocks per SM, which hide one another's load latency, prologue and epilogue. A purchase of shared memory
moves the pick to larger tiles with one block per SM: the model, blind to occupancy, priced it as a gain
(16sm-64k-128r -> 16sm-128k-128r) that the GPU did not show. The register cap (maxnreg) acts through the
same occupancy: a thread capped at 128 registers lets two 8-warp blocks share an SM's file.

Occupancy of a design (blocks resident per SM) on an emulated chip with walls (sm, smem/block, regs/thread):
    regs   = min(cap, acc + ACC_HEADROOM) rounded up to 8 (acc = Tm·Tn / (32·W), the family's C2 count;
             cap = maxnreg, or 255 uncapped)
    occ    = min(⌊smem_sm / (smem_bytes + 1 KiB)⌋, ⌊regs_sm / (regs·32·W)⌋, ⌊warps_sm / W⌋, MAX_OCC), >= 1
Cost at occupancy k: the family's own cost formula read as k virtual SMs per SM (n_sm·k SMs, each with
1/k of the SM's tensor rate and L2 feed, `bw_sm / k`; the load latency each virtual SM's pipeline must
cover is unchanged, so co-resident blocks hide it k-fold; per-block fixed costs overlap within a wave;
DRAM pull counts every resident block's prefetch). k = 1 is the family's model unchanged.

SOLVE is exhaustive: every admitted design (the family's constraints on the emulated chip, C1 smem and
C2 registers among them) is scored at its own occupancy; the MILP's formula per occupancy class, the
class picked per design (the MILP cannot read occupancy: it is a floor of a quotient of decisions)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from formloop.errors import Infeasible, InvalidInput
from formloop.evaluate.emulated import KiB, Walls, emulated_chip
from formloop.expr import substitute
from formloop.hw.chips import Chip
from formloop.library.gemm_tiling_gpu import ACC_HEADROOM
from formloop.solve.enumerate import assignment_at, feasible_mask, term_grid
from formloop.template import Formulation, Template

MAX_OCC = 4          # blocks per SM the model considers (more adds nothing it can see)
BLOCK_RESERVE = KiB  # shared memory the runtime reserves per resident block
FULL_REGS = 255


def _formulate(template: Template, workload: Mapping[str, int], chip: Chip, **override) -> Formulation:
    """template.formulate with chip-side parameter values overridden (the virtual SMs of one occupancy)."""
    values = {**template.bind(workload, chip), **override}
    fold = lambda e: substitute(e, values)  # noqa: E731
    return Formulation(template=template, params=values,
                       constraints=tuple(replace(c, expr=fold(c.expr)) for c in template.constraints),
                       cost=fold(template.cost), terms={k: fold(v) for k, v in template.terms.items()})


OCCUPANCY_FAMILIES = ("gemm-tiling-gpu",)  # families whose own cost runs one block per SM (the grid above applies)


class EmulatedModel:
    """The family's model on emulated chips of `base`; `occupancy=False` is the family's model unchanged
    (for the GEMM family: one block per SM, the model the first H200 run used). By default the occupancy
    grid applies to the GEMM family only: attention-decode's own cost already counts the programs an SM
    holds (its shared memory per SM and warps), so it is read unchanged."""

    def __init__(self, template: Template, base: Chip, *, occupancy: bool | None = None):
        if occupancy is None:
            occupancy = template.name in OCCUPANCY_FAMILIES
        if occupancy and template.name not in OCCUPANCY_FAMILIES:
            raise InvalidInput("occupancy model", template.name, OCCUPANCY_FAMILIES,
                               fix="occupancy=False: the family's own cost")
        self.template, self.base, self.occupancy = template, base, occupancy
        self._grids: dict = {}

    def chip(self, walls: Walls) -> Chip:
        return emulated_chip(self.base, walls)

    def grids(self, workload: Mapping[str, int], walls: Walls) -> tuple[Formulation, np.ndarray, np.ndarray,
                                                                         np.ndarray]:
        """(formulation, admitted mask, cost per design (us, model), occupancy per design) over the menu grid."""
        key = (tuple(sorted(workload.items())), walls)
        if key not in self._grids:
            chip = self.chip(walls)
            f = self.template.formulate(workload, chip)
            mask = feasible_mask(f)
            occ = self.occupancy_grid(f, chip, walls) if self.occupancy else np.ones(mask.shape, dtype=np.int64)
            cost = np.full(mask.shape, np.inf)
            base = f.params
            for k in np.unique(occ[mask]) if mask.any() else ():
                fk = f if k == 1 else _formulate(self.template, workload, chip, n_sm=base["n_sm"] * int(k),
                                                 bw_sm=base["bw_sm"] / int(k))
                sel = mask & (occ == k)
                cost[sel] = term_grid(fk, fk.cost)[sel]
            self._grids[key] = (f, mask, cost, occ)
        return self._grids[key]

    def occupancy_grid(self, f: Formulation, chip: Chip, walls: Walls) -> np.ndarray:
        by = {d.name: d for d in f.decisions}
        tm, tn, w = (term_grid(f, by[n]) for n in ("Tm", "Tn", "W"))
        smem = term_grid(f, f.terms["smem_bytes"])
        cap = FULL_REGS if walls.regs_per_thread is None else walls.regs_per_thread
        regs = np.ceil(np.minimum(cap, tm * tn / (32 * w) + ACC_HEADROOM) / 8) * 8
        occ = np.minimum.reduce([np.floor(chip.smem_per_sm / (smem + BLOCK_RESERVE)),
                                 np.floor(chip.registers_per_sm / (regs * 32 * w)),
                                 np.floor(chip.warps_per_sm / w), np.full(smem.shape, MAX_OCC)])
        return np.maximum(occ, 1).astype(np.int64)

    def ranked(self, workload: Mapping[str, int], walls: Walls, n: int) -> list[tuple[dict, float]]:
        """The n cheapest admitted designs (model order; ties by menu position), with their model us."""
        f, mask, cost, _ = self.grids(workload, walls)
        flat = np.flatnonzero(mask)
        if not len(flat):
            raise Infeasible(self.template.name, [f"no admitted design on {walls.label()}"])
        order = flat[np.argsort(cost.ravel()[flat], kind="stable")[:n]]
        return [({k: int(v) for k, v in assignment_at(f, int(i)).items()}, float(cost.ravel()[i])) for i in order]

    def pick(self, workload: Mapping[str, int], walls: Walls) -> tuple[dict, float]:
        return self.ranked(workload, walls, 1)[0]

    def occupancy_of(self, a: Mapping[str, int], workload: Mapping[str, int], walls: Walls) -> int:
        f, _, _, occ = self.grids(workload, walls)
        idx = tuple(list(d.decision.menu).index(a[d.name]) for d in f.decisions)
        return int(occ[idx])

    def cost_of(self, a: Mapping[str, int], workload: Mapping[str, int], walls: Walls) -> float:
        f, mask, cost, _ = self.grids(workload, walls)
        idx = tuple(list(d.decision.menu).index(a[d.name]) for d in f.decisions)
        return float(cost[idx]) if mask[idx] else float("inf")
