"""The gpu tier: build the instance, check it, time it, with provenance.

Correctness before timing: fresh random operands for every check (never zeros), the output
poisoned with NaN before the launch so an unwritten element fails, relative Frobenius error and
worst element against a float64 reference. Timing: the launches are captured in a CUDA graph
(launch overhead out of the number, the same for every competitor), cycling over enough operand
sets that together exceed the L2 several times (so repeats do not measure the cache); each graph
replay is timed with CUDA events and the median per launch is reported with its p20/p80."""
from __future__ import annotations

import math
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

from formloop.evaluate.measurement import Correctness, Measurement, Provenance, Runnable, Tier, failed
from formloop.evaluate.model import chip_name
from formloop.template import Template


@dataclass(frozen=True)
class TimingPolicy:
    """How long to time: each replay should last `graph_ms`; `budget_ms` of replays per instance;
    operand sets spanning `l2_multiple` times the L2."""

    graph_ms: float = 2.0
    budget_ms: float = 40.0
    min_reps: int = 5
    max_reps: int = 30
    max_launches: int = 2000
    max_sets: int = 64
    l2_multiple: float = 3.0


def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def read_clocks() -> dict[str, float]:
    """Current SM and memory clocks (MHz) through NVML, else nvidia-smi; empty if neither answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {"sm": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                "mem": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                "sm_max": float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))}
    except Exception:  # noqa: BLE001 - any NVML failure falls through to nvidia-smi
        pass
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
        sm, mem, sm_max = (float(x) for x in text.strip().splitlines()[0].split(","))
        return {"sm": sm, "mem": mem, "sm_max": sm_max}
    except Exception:  # noqa: BLE001
        return {}


def device_facts(device: int = 0) -> dict[str, Any]:
    import torch
    import triton

    props = torch.cuda.get_device_properties(device)
    return {"device": props.name, "sm_count": props.multi_processor_count,
            "l2_bytes": int(getattr(props, "L2_cache_size", 50 * 2**20)),
            "versions": {"torch": torch.__version__, "triton": triton.__version__,
                         "cuda": str(torch.version.cuda), "capability": f"{props.major}.{props.minor}"}}


def check(runnable: Runnable, device: str, generator) -> Correctness:
    """One correctness check on fresh operands with a poisoned output."""
    import torch

    case = runnable.new_case(device, generator)
    runnable.poison(case)
    runnable.launch(case)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    out = runnable.output(case).double()
    ref = runnable.reference(case).double()
    written = bool(torch.isfinite(out).all().item())
    diff = out - ref
    ref_norm = ref.norm().item()
    rel = diff.norm().item() / ref_norm if ref_norm > 0 else math.inf
    rms = ref_norm / math.sqrt(ref.numel())
    worst = diff.abs().max().item() / rms if rms > 0 else math.inf
    return Correctness(rel_error=rel if written else math.nan, max_error_rms=worst if written else math.nan,
                       tolerance=runnable.tolerance, all_written=written, reference="float64")


def time_runnable(runnable: Runnable, device: str, generator, policy: TimingPolicy, l2_bytes: int) -> dict[str, Any]:
    """Median seconds per launch over CUDA-graph replays that cycle over rotating operand sets."""
    import torch

    n_sets = max(1, min(policy.max_sets, math.ceil(policy.l2_multiple * l2_bytes / max(1, runnable.case_bytes))))
    cases = [runnable.new_case(device, generator) for _ in range(n_sets)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for c in cases:  # warm-up: compilation, handles, workspaces stay out of the numbers
            runnable.launch(c)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for c in cases:
        runnable.launch(c)
    end.record()
    torch.cuda.synchronize()
    estimate_ms = max(start.elapsed_time(end) / n_sets, 1e-4)
    launches = max(n_sets, min(policy.max_launches, math.ceil(policy.graph_ms / estimate_ms)))
    launches = n_sets * math.ceil(launches / n_sets)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(launches):
            runnable.launch(cases[i % n_sets])
    graph.replay()
    torch.cuda.synchronize()
    reps = int(min(policy.max_reps, max(policy.min_reps, policy.budget_ms // max(estimate_ms * launches, 1e-3))))
    per_launch = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        per_launch.append(start.elapsed_time(end) / launches * 1e3)  # µs
    del graph
    per_launch.sort()
    q = lambda f: per_launch[min(len(per_launch) - 1, int(f * len(per_launch)))]  # noqa: E731
    return {"median_us": q(0.5), "p20_us": q(0.2), "p80_us": q(0.8), "reps": reps, "launches": launches,
            "operand_sets": n_sets, "timing": f"CUDA graph of {launches} launches over {n_sets} operand sets, "
                                              f"{reps} replays, event-timed median"}


class GpuEvaluator:
    """Checks and times instances on the current CUDA device."""

    tier = Tier.GPU

    def __init__(self, device: str = "cuda", policy: TimingPolicy | None = None, seed: int = 0):
        import torch

        self.device = device
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
        return correctness, time_runnable(runnable, self.device, self.generator, self.policy, self.facts["l2_bytes"])

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
            return failed(*args, self.provenance(), f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
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
                       details={"launches": timing["launches"], "operand_sets": timing["operand_sets"]})


def _why(c: Correctness) -> str:
    if not c.all_written:
        return "output has NaN/unwritten elements"
    return f"relative error {c.rel_error:.3g} (tolerance {c.tolerance:g}), worst element {c.max_error_rms:.3g} x RMS"
