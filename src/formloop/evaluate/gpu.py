"""The gpu tier: build the instance, check it, time it, with provenance.

Correctness before timing: fresh random operands for every check (never zeros), the output
poisoned with NaN before the launch so an unwritten element fails, relative Frobenius error and
worst element against a float64 reference, computed by the one checker (formloop.measure.compare,
rule NormBound). Timing is the one timer's (formloop.measure.timer, graph mode): the launches are
captured in a CUDA graph that cycles over enough operand sets to exceed the L2 several times, each
replay is timed with CUDA events and the median per launch is reported with its p20/p80, beside the
SM clock and power read before and after."""
from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

from formloop.evaluate.measurement import ELEMENT_FACTOR, Correctness, Measurement, Provenance, Runnable, Tier, failed
from formloop.evaluate.model import chip_name
from formloop.measure.compare import NormBound, compare_tensor
from formloop.measure.device import device_facts, read_clocks
from formloop.measure.timer import TimingPolicy, operand_sets_for, time_launches
from formloop.template import Template

__all__ = ["GpuEvaluator", "TimingPolicy", "check", "device_facts", "gpu_available", "measurement_from",
           "read_clocks", "time_runnable"]


def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def check(runnable: Runnable, device: str, generator) -> Correctness:
    """One correctness check on fresh operands with a poisoned output."""
    import torch

    case = runnable.new_case(device, generator)
    runnable.poison(case)
    runnable.launch(case)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    ref = runnable.reference(case).double()
    out = runnable.output(case)
    cmp = compare_tensor(out.double(), ref, rule=NormBound(runnable.tolerance, ELEMENT_FACTOR))
    return Correctness(rel_error=cmp.norm_rel_error if cmp.all_written else math.nan,
                       max_error_rms=cmp.max_error_rms if cmp.all_written else math.nan,
                       tolerance=runnable.tolerance, all_written=cmp.all_written, reference="float64")


def time_runnable(runnable: Runnable, device: str, generator, policy: TimingPolicy, l2_bytes: int,
                  eager: bool = False) -> dict[str, Any]:
    """Median seconds per launch over CUDA-graph replays that cycle over rotating operand sets; with
    `eager`, also per-call eager latency (launch path included) on the same operand sets, with its
    own clocks and power."""
    n_sets = operand_sets_for(runnable.case_bytes, l2_bytes, policy)
    cases = [runnable.new_case(device, generator) for _ in range(n_sets)]
    run = time_launches(lambda i: runnable.launch(cases[i]), n_sets, device=device, mode="graph", policy=policy)
    t = run.timing
    out = {"median_us": t.seconds * 1e6, "p20_us": t.p20_s * 1e6, "p80_us": t.p80_s * 1e6, "reps": t.reps,
           "launches": t.launches, "operand_sets": t.operand_sets, "timing": t.describe(), "device": dict(t.device)}
    if eager:
        e = time_launches(lambda i: runnable.launch(cases[i]), n_sets, device=device, mode="eager",
                          policy=policy).timing
        out["eager"] = {"median_us": e.seconds * 1e6, "p20_us": e.p20_s * 1e6, "p80_us": e.p80_s * 1e6,
                        "reps": e.reps, "timing": e.describe(), "device": dict(e.device)}
    return out


class GpuEvaluator:
    """Checks and times instances on the current CUDA device."""

    tier = Tier.GPU

    def __init__(self, device: str = "cuda", policy: TimingPolicy | None = None, seed: int = 0,
                 eager: bool = True):
        import torch

        self.device = device
        self.eager = eager  # also time eager calls (launch path included) beside the graph replay
        self.policy = policy or TimingPolicy()
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.facts = device_facts()

    def provenance(self, timing: str = "") -> Provenance:
        return Provenance(tier=self.tier.value, device=self.facts["device"], sm_count=self.facts["sm_count"],
                          clocks_mhz=read_clocks(), versions=self.facts["versions"], timing=timing)

    def measure(self, runnable: Runnable) -> tuple[Correctness, dict[str, Any] | None]:
        """Check, then time only if the check passed."""
        correctness = check(runnable, self.device, self.generator)
        if not correctness.passed:
            return correctness, None
        return correctness, time_runnable(runnable, self.device, self.generator, self.policy, self.facts["l2_bytes"],
                                          eager=self.eager)

    def evaluate(self, template: Template, assignment: Mapping[str, Real], workload: Mapping[str, Real],
                 chip: Any = None) -> Measurement:
        violations = template.check(assignment, workload, chip)
        args = (template.name, template.content_hash, assignment, workload, chip_name(chip))
        if violations:
            return failed(*args, self.provenance(), "infeasible: " + "; ".join(str(v) for v in violations))
        if template.program is None:
            return failed(*args, self.provenance(), "no program: the template builds no executable instance")
        try:
            runnable = template.program(assignment, workload)
            correctness, timing = self.measure(runnable)
        except Exception as exc:  # noqa: BLE001 - a compile or launch failure is a result, with its class
            first = str(exc).splitlines()[0][:300] if str(exc) else ""
            return failed(*args, self.provenance(), f"{type(exc).__name__}: {first}")
        return measurement_from(template, assignment, workload, chip_name(chip), correctness, timing, self.provenance)


def measurement_from(template: Template, assignment, workload, chip: str, correctness: Correctness,
                     timing: Mapping[str, Any] | None, provenance_fn) -> Measurement:
    if timing is None:
        return Measurement(template.name, template.content_hash, dict(assignment), dict(workload), chip, math.inf,
                           provenance_fn("not timed: the correctness check failed"), correctness=correctness,
                           failure="incorrect: " + _why(correctness))
    return Measurement(template.name, template.content_hash, dict(assignment), dict(workload), chip,
                       timing["median_us"], provenance_fn(timing["timing"]), correctness=correctness,
                       spread_us=(timing["p20_us"], timing["p80_us"]), reps=timing["reps"],
                       details={"launches": timing["launches"], "operand_sets": timing["operand_sets"],
                                "device_state": timing.get("device", {}),
                                **({"eager": timing["eager"]} if "eager" in timing else {})})


def _why(c: Correctness) -> str:
    if not c.all_written:
        return "output has NaN/unwritten elements"
    return f"relative error {c.rel_error:.3g} (tolerance {c.tolerance:g}), worst element {c.max_error_rms:.3g} x RMS"
