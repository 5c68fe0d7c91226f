"""Evaluate one design on a tier, and measure: solve a Triton family's contract (gemm-tiling's GPU
contract, attention-decode, attention-prefill) and evaluate its pick.

A measurement says its tier (model, emulated, simulated, gpu) and device; without a CUDA device
`measure` falls back to the model tier and says so in `fallback` (never a silent substitute). An
attention measurement adds `rates`: the KV bandwidth (decode) or tensor rate (prefill) its time
implies, as fractions of the chip's copy bandwidth or peak."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from formloop import evaluate as evaluators
from formloop.api.admission import evaluator_for
from formloop.api.learning import learn_after_measure, loss_against, loss_of
from formloop.api.resolve import chip_from, default_chip, default_dtype, gpu_contract, is_hopper, settings_from
from formloop.api.solve import Shape, defaults, design_from, routed_workload, solve_routed
from formloop.api.values import plain
from formloop.errors import InvalidInput
from formloop.library import attention_service, gemm_tiling, gemm_tiling_gpu
from formloop.settings import Settings
from formloop.solve import SOLVERS

NO_GPU = "no CUDA device here: measured on the model tier (the template's cost), not on a GPU"
MEASURED = (gemm_tiling.NAME, *attention_service.TEMPLATES)
"""What `measure` takes: gemm-tiling (measured under gemm-tiling-gpu's contract) and the attention families."""


def evaluate(template: str, design: str | Mapping[str, Any], shape: Shape, *, op: str | None = None,
             dtype: str | None = None, chip: str | None = None, options: Mapping[str, Any] | None = None,
             tier: str | None = None, settings: Settings | None = None) -> dict:
    """Evaluate one design on `tier` (default: the settings' tier; auto takes the best available),
    labelled with the tier and device that produced the number."""
    s = settings_from(settings)
    dtype, chip = defaults(template, dtype, chip)
    routed, w = routed_workload(template, shape, op=op, dtype=dtype, chip=chip, options=options)
    t = routed.candidate.template
    m = evaluator_for(tier or s.tier).evaluate(t, design_from(t, design), w.params, chip_from(chip))
    return plain({"template": t.name, "template_hash": t.content_hash, "workload": w.key, "chip": chip,
                  "measurement": m.as_dict(), "source": m.tier,
                  "units": {"measurement.latency_us": f"us ({m.tier})"}})


def measure(template: str, shape: Shape, *, chip: str | None = None, dtype: str | None = None, solver: str = "milp",
            calibration: str | None = None, settings: Settings | None = None, evaluator: Any = None) -> dict:
    """Pick an instance of a Triton family's contract with the solver and measure it: the gpu tier on
    a CUDA device (built, checked against a higher-precision reference, timed), else the model tier,
    labelled. gemm-tiling is measured under gemm-tiling-gpu's contract (its defaults: bf16, h200).

    The cost model is the store's latest calibration unless `calibration` names a JSON or 'prior'
    (`calibration_source` says which); a correct gpu measurement is stored as a calibration point
    and the family refit (`learned`); `design_loss` decomposes measured / SOL floor. `evaluator`
    replaces the tier's evaluator (tests pass a synthetic gpu one)."""
    if template not in MEASURED:
        raise InvalidInput("template", template, MEASURED)
    measured = gemm_tiling_gpu.NAME if template == gemm_tiling.NAME else template
    dtype = default_dtype(measured) if dtype is None else dtype
    chip = default_chip(measured) if chip is None else chip
    if not is_hopper(chip):
        raise InvalidInput("chip", chip, gemm_tiling_gpu.CONTRACT_CHIPS,
                           fix="the Triton family's contract is written for Hopper")
    if solver not in SOLVERS:
        raise InvalidInput("solver", solver, sorted(SOLVERS))
    time_limit = settings_from(settings).solver_time_limit_s
    if attention_service.is_attention(template):
        return plain(_measure_attention(template, shape, chip, dtype, solver, calibration, settings, evaluator))
    routed, w = routed_workload(template, shape, op=None, dtype=dtype, chip=chip, options=None,
                                calibration=calibration, settings=settings)
    report = solve_routed(routed, w, chip, solver, settings)
    gpu = evaluators.gpu_available() if evaluator is None else True
    if evaluator is None:
        evaluator = evaluators.best_available() if gpu else evaluators.ModelEvaluator()
    t, chip_obj = routed.candidate.template, chip_from(chip)
    m = evaluator.evaluate(t, report["design"], w.params, chip_obj)
    loss = loss_of(t, w.params, w.shape, w.op, dtype, chip_obj, report.get("objective_us"), m)
    learned = learn_after_measure(t, m, dtype=dtype, chip=chip, chip_obj=chip_obj, workload=w.params,
                                  settings=settings, source="formloop measure")
    return plain({**report, "measurement": m.as_dict(), "fallback": "" if gpu else NO_GPU, "design_loss": loss,
                  "learned": learned})


def _measure_attention(template: str, shape: Shape, chip: str, dtype: str, solver: str, calibration: str | None,
                       settings: Settings | None, evaluator: Any) -> dict:
    """`measure` of an attention family: the store's calibration by default, the pick measured, then (a correct gpu
    measurement) stored as a calibration point and the family refit, as the GEMM contract does."""
    routed = gpu_contract(dtype, calibration, name=template, chip=chip, settings=settings)
    t, chip_obj = routed.candidate.template, chip_from(chip)
    report, m = attention_service.measure_template(t, shape, chip=chip, dtype=dtype, solver=solver,
                                                   time_limit=settings_from(settings).solver_time_limit_s,
                                                   evaluator=evaluator)
    loss = loss_against(t, report["workload"], chip_obj, report.get("objective_us"), m, report["sol"]["floor_us"])
    learned = learn_after_measure(t, m, dtype=dtype, chip=chip, chip_obj=chip_obj, workload=report["workload"],
                                  settings=settings, source="formloop measure")
    return {**report, **routed.extra, "design_loss": loss, "learned": learned}
