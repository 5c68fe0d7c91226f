"""The cost model learns from measurements: a correct gpu measurement of a calibrated family becomes
a calibration point in the population, and the family's terms for (template, dtype, chip, toolchain)
are refit on every stored point (formloop.population.calibrations). `measure` and the loop call
this; `solve`, `measure` and the loop then read the newest fit by default (api.resolve.gpu_contract).
Also here: the design-loss decomposition a measure report carries (formloop.evaluate.loss)."""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from formloop.api.resolve import open_population
from formloop.evaluate.loss import design_loss
from formloop.evaluate.measurement import Measurement
from formloop.errors import FormloopError
from formloop.library import template_factory
from formloop.population import Population
from formloop.population import calibrations as stored
from formloop.settings import Settings
from formloop.sol import sol_report
from formloop.template import Template


def learnable(t: Template) -> bool:
    """A family whose factory takes a calibration and whose descriptor lists calibrated terms."""
    if not t.descriptor.get("calibrated"):
        return False
    try:
        params = inspect.signature(template_factory(t.name)).parameters
    except FormloopError:
        return False
    return "calibration" in params and "calibration_id" in params


def learn_from(pop: Population, t: Template, m: Measurement, *, dtype: str, chip: str, chip_obj: Any,
               workload: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Store `m` as a calibration point (when it is a correct gpu measurement) and refit. Returns what
    happened: {'recorded': bool, 'note': str, 'calibration': the new fit or None}."""
    if not learnable(t):
        return {"recorded": False, "note": f"{t.name} has no calibrated terms", "calibration": None}
    if m.tier != "gpu" or not m.ok:
        why = "not a gpu measurement" if m.tier != "gpu" else "the measurement failed"
        return {"recorded": False, "note": f"calibration unchanged: {why}", "calibration": None}
    toolchain = stored.toolchain_of(m.provenance.versions)
    spread = m.spread_us or (None, None)
    stored.add_point(pop, template=t.name, dtype=dtype, chip=chip, toolchain=toolchain, device=m.provenance.device,
                     workload=workload, assignment=m.assignment, latency_us=m.latency_us, p20_us=spread[0],
                     p80_us=spread[1], source=source)
    factory = template_factory(t.name)
    if t.options.get("schedules"):  # refit the family the measured design came from (its decisions, its terms)
        factory = _with_schedules(factory)
    new, note = stored.learn(pop, factory, chip_obj, template=t.name, dtype=dtype, chip=chip,
                             toolchain=toolchain, source=source)
    return {"recorded": True, "note": note, "calibration": new.as_dict() if new else None}


def _with_schedules(factory):
    return lambda **kw: factory(schedules=True, **kw)


def learn_after_measure(t: Template, m: Measurement, *, dtype: str, chip: str, chip_obj: Any,
                        workload: Mapping[str, Any], settings: Settings | None, source: str) -> dict[str, Any]:
    """`learn_from` against the settings' store (opened for writing only when there is something to learn)."""
    if not learnable(t) or m.tier != "gpu" or not m.ok:
        return learn_from(None, t, m, dtype=dtype, chip=chip, chip_obj=chip_obj, workload=workload,  # type: ignore
                          source=source)
    with open_population(settings) as pop:
        return learn_from(pop, t, m, dtype=dtype, chip=chip, chip_obj=chip_obj, workload=workload, source=source)


def loss_of(t: Template, workload: Mapping[str, Any], shape: Mapping[str, Any], op: str, dtype: str, chip: Any,
            predicted_us: float | None, m: Measurement) -> dict[str, Any]:
    """The design-loss decomposition of a measured design (the SOL floor from formloop.sol)."""
    try:
        floor_us = sol_report(op, dict(shape), dtype, chip).time_floor_s * 1e6
    except FormloopError:
        floor_us = None
    return loss_against(t, workload, chip, predicted_us, m, floor_us)


def loss_against(t: Template, workload: Mapping[str, Any], chip: Any, predicted_us: float | None, m: Measurement,
                 floor_us: float | None) -> dict[str, Any]:
    """The design-loss decomposition of a measured design against a given SOL floor (us, sol)."""
    measured = m.latency_us if m.ok else None
    spread = tuple(m.spread_us) if m.ok and m.spread_us else None
    loss = design_loss(t, workload, chip, predicted_us=predicted_us, measured_us=measured, floor_us=floor_us,
                       spread_us=spread)
    tier = m.tier  # the measured terms name the tier that produced the number (model, emulated, gpu)
    loss["sources"].update({"model_error": f"{tier} vs model", "spread": tier, "total": f"{tier} vs sol"})
    return loss
