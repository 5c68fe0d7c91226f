"""The emulated tier: a smaller chip's walls imposed on the H200 itself (issue 18, part 3).

    SM count            a torch green context: the launch's stream may use only `sm_count` SMs
    shared memory/block a launch decision: a design whose shared memory (the template's own
                        `smem_bytes`, checked by its walls against the emulated chip) exceeds the
                        budget is not launched (infeasible, as on a chip that small)
    registers/thread    Triton's `maxnreg` launch option caps the registers of every thread

The emulated chip (`emulated_chip`) is the base chip with those walls moved and the tensor peak
scaled by the SM fraction (per-SM rate unchanged); DRAM bandwidth is left as the base chip's: the
cost model's own Little's-law pull limit is what bounds a chip with fewer SMs. Timings run on the green
context's stream (a CUDA graph captured elsewhere would run on every SM): `timing` 'eager' (per call,
launch path included through the plan/run path; the GEMM runs recorded so) or 'stream' (back-to-back calls,
the host's launch work hidden where the device is slower: kernels of tens of microseconds, as decode
attention's). Measurements say tier 'emulated', name the walls and the timing mode."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from numbers import Real
from typing import Any

from formloop.errors import InvalidInput
from formloop.evaluate.gpu import GpuEvaluator, check, measurement_from
from formloop.evaluate.measurement import Measurement, Provenance, Tier, failed
from formloop.evaluate.model import chip_name
from formloop.hw.chips import Chip
from formloop.measure.device import read_clocks
from formloop.measure.timer import operand_sets_for, time_launches
from formloop.template import Template

KiB = 1024


@dataclass(frozen=True)
class Walls:
    """The walls an emulated chip moves: SMs, shared memory a block may use (bytes), registers a
    thread may use (None: the compiler's choice)."""

    sm_count: int
    smem_per_block: int
    regs_per_thread: int | None = None

    def label(self) -> str:
        regs = "any" if self.regs_per_thread is None else str(self.regs_per_thread)
        return f"{self.sm_count}sm-{self.smem_per_block // KiB}k-{regs}r"


def emulated_chip(base: Chip, walls: Walls) -> Chip:
    """`base` with the walls moved (at most the base's own), peaks scaled by the SM fraction."""
    if not 1 <= walls.sm_count <= base.sm_count:
        raise InvalidInput("emulated sm_count", walls.sm_count, f"1..{base.sm_count} (SMs of {base.name})")
    if not 0 < walls.smem_per_block <= base.smem_per_block:
        raise InvalidInput("emulated smem_per_block", walls.smem_per_block,
                           f"1..{base.smem_per_block} bytes (what {base.name} allows a block)")
    if walls.regs_per_thread is not None and not 24 <= walls.regs_per_thread <= 255:
        raise InvalidInput("emulated regs_per_thread", walls.regs_per_thread, "None or 24..255")
    f = walls.sm_count / base.sm_count
    measured = {k: (v * f if k.startswith("flops_") else v) for k, v in base.measured.items()}
    # The name stays the base chip's (the Triton family's contract names the Hopper chip it runs on);
    # `source` and `notes` say what was emulated.
    regs = base.registers_per_thread if walls.regs_per_thread is None else walls.regs_per_thread
    return replace(base, sm_count=walls.sm_count, notes=f"emulated {walls.label()} on {base.name}",
                   registers_per_thread=regs,
                   smem_per_block=walls.smem_per_block, peak_flops={k: v * f for k, v in base.peak_flops.items()},
                   measured=measured, source=f"emulated on {base.name}: {walls.label()}")


class EmulatedEvaluator(GpuEvaluator):
    """Checks and times instances of a Triton family whose plan takes `maxnreg` (the GEMM tiling family,
    attention-decode) under an emulated chip's walls on the current GPU."""

    tier = Tier.EMULATED

    def __init__(self, walls: Walls, device: str = "cuda", policy=None, seed: int = 0, timing: str = "eager"):
        if timing not in ("eager", "stream"):
            raise InvalidInput("emulated timing mode", timing, ("eager", "stream"))
        super().__init__(device=device, policy=policy, seed=seed, eager=False)
        self.walls, self.timing = walls, timing
        self.stream, self.context = _green_stream(walls.sm_count, self.device)

    def provenance(self, timing: str = "") -> Provenance:
        return Provenance(tier=self.tier.value, device=f"{self.facts['device']} as {self.walls.label()} "
                          "(green context, smem budget, maxnreg)", sm_count=self.walls.sm_count,
                          clocks_mhz=read_clocks(), versions=self.facts["versions"], timing=timing)

    def evaluate(self, template: Template, assignment: Mapping[str, Real], workload: Mapping[str, Real],
                 chip: Any = None) -> Measurement:
        import torch

        args = (template.name, template.content_hash, assignment, workload, chip_name(chip))
        violations = template.check(assignment, workload, chip)
        if violations:  # the walls of the emulated chip (shared memory among them) refuse the design
            return failed(*args, self.provenance(), "infeasible: " + "; ".join(str(v) for v in violations))
        try:
            runnable = template.program(assignment, workload)
            if self.walls.regs_per_thread is not None:
                runnable = type(runnable)(replace(runnable.plan, maxnreg=self.walls.regs_per_thread))
            with torch.cuda.stream(self.stream):
                correctness = check(runnable, self.device, self.generator)
                timing = self._time(runnable) if correctness.passed else None
        except Exception as exc:  # noqa: BLE001 - a compile or launch failure is a result
            first = str(exc).splitlines()[0][:300] if str(exc) else ""
            return failed(*args, self.provenance(), f"{type(exc).__name__}: {first}")
        return measurement_from(template, assignment, workload, chip_name(chip), correctness, timing, self.provenance)

    def _time(self, runnable) -> dict[str, Any]:
        n_sets = operand_sets_for(runnable.case_bytes, self.facts["l2_bytes"], self.policy)
        cases = [runnable.new_case(self.device, self.generator) for _ in range(n_sets)]
        t = time_launches(lambda i: runnable.launch(cases[i]), n_sets, device=self.device, mode=self.timing,
                          policy=self.policy).timing
        return {"median_us": t.seconds * 1e6, "p20_us": t.p20_s * 1e6, "p80_us": t.p80_s * 1e6, "reps": t.reps,
                "launches": t.launches, "operand_sets": t.operand_sets,
                "timing": t.describe() + f"; on a green-context stream of {self.walls.sm_count} SMs",
                "device": dict(t.device)}


_GREEN: dict[tuple[int, str], tuple[Any, Any]] = {}


def _green_stream(sm_count: int, device: str):
    """A stream whose launches use `sm_count` SMs (torch green contexts), cached per (count, device).
    The full chip needs none: the current stream."""
    import torch

    index = torch.device(device).index or 0
    if sm_count >= torch.cuda.get_device_properties(index).multi_processor_count:
        return torch.cuda.current_stream(index), None
    key = (sm_count, device)
    if key not in _GREEN:
        from torch.cuda.green_contexts import GreenContext

        ctx = GreenContext.create(num_sms=sm_count, device_id=index)
        if hasattr(ctx, "Stream"):
            stream = ctx.Stream()
        else:  # older torch: the context's own stream after making it current
            ctx.set_context()
            stream = torch.cuda.Stream(index)
            ctx.pop_context()
        _GREEN[key] = (stream, ctx)
    return _GREEN[key]


def predicted_gain(before_us: float, after_us: float) -> float:
    """before / after (> 1: the purchase made it faster)."""
    return before_us / after_us if after_us > 0 and math.isfinite(after_us) else math.nan
