"""Evaluate one design on a tier, and measure: solve the GEMM's GPU contract and evaluate its pick.

A measurement says its tier (model, emulated, simulated, gpu) and device; without a CUDA device
`measure` falls back to the model tier and says so in `fallback` (never a silent substitute)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from formloop import evaluate as evaluators
from formloop.api.admission import evaluator_for
from formloop.api.resolve import chip_from, is_hopper, settings_from
from formloop.api.solve import Shape, design_from, routed_workload, solve_routed
from formloop.api.values import plain
from formloop.errors import InvalidInput
from formloop.library import gemm_tiling, gemm_tiling_gpu
from formloop.settings import Settings
from formloop.solve import SOLVERS

NO_GPU = "no CUDA device here: measured on the model tier (the template's cost), not on a GPU"


def evaluate(template: str, design: str | Mapping[str, Any], shape: Shape, *, op: str | None = None,
             dtype: str = "fp32", chip: str = "illustrative", options: Mapping[str, Any] | None = None,
             tier: str | None = None, settings: Settings | None = None) -> dict:
    """Evaluate one design on `tier` (default: the settings' tier; auto takes the best available),
    labelled with the tier and device that produced the number."""
    s = settings_from(settings)
    routed, w = routed_workload(template, shape, op=op, dtype=dtype, chip=chip, options=options)
    t = routed.candidate.template
    m = evaluator_for(tier or s.tier).evaluate(t, design_from(t, design), w.params, chip_from(chip))
    return plain({"template": t.name, "template_hash": t.content_hash, "workload": w.key, "chip": chip,
                  "measurement": m.as_dict(), "source": m.tier,
                  "units": {"measurement.latency_us": f"us ({m.tier})"}})


def measure(template: str, shape: Shape, *, chip: str = "h200", dtype: str = "bf16", solver: str = "milp",
            calibration: str | None = None, settings: Settings | None = None) -> dict:
    """Pick an instance of gemm-tiling's GPU contract with the solver and measure it: the gpu tier on
    a CUDA device (built, checked against float64, timed), else the model tier, labelled."""
    if template != gemm_tiling.NAME:
        raise InvalidInput("template", template, [gemm_tiling.NAME])
    if not is_hopper(chip):
        raise InvalidInput("chip", chip, gemm_tiling_gpu.CONTRACT_CHIPS,
                           fix="the Triton family's contract is written for Hopper")
    if solver not in SOLVERS:
        raise InvalidInput("solver", solver, sorted(SOLVERS))
    routed, w = routed_workload(template, shape, op=None, dtype=dtype, chip=chip, options=None,
                                calibration=calibration)
    report = solve_routed(routed, w, chip, solver, settings)
    gpu = evaluators.gpu_available()
    evaluator = evaluators.best_available() if gpu else evaluators.ModelEvaluator()
    m = evaluator.evaluate(routed.candidate.template, report["design"], w.params, chip_from(chip))
    return plain({**report, "measurement": m.as_dict(), "fallback": "" if gpu else NO_GPU})
