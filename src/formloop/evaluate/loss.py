"""The design-loss decomposition: why a measured design is slower than the speed-of-light floor.

    log(measured / floor) = representation + precondition + selection + model error

  representation  log(best_all / floor): the best design the family's menus and constraints can
                  express at all, by the model, against the SOL floor (what the template cannot say)
  precondition    log(best_pre / best_all): what the preconditions (the verifier's assumptions)
                  exclude from that menu, by the model
  selection       log(predicted / best_pre): the solver's pick against the best admissible design
                  (0 for a proved-optimal solve; positive at a time limit or gap)
  model error     log(measured / predicted): the cost model against the measurement
  spread          log(p80 / p20) of the measurement: how far apart repeated timings are (not a term of
                  the sum; a model error smaller than the spread is within the measurement's noise)

Every term is a natural log (0 = no loss; 0.1 ≈ 10 %), each labelled with its source."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from formloop.errors import FormloopError
from formloop.expr import substitute
from formloop.solve.enumerate import MAX_POINTS, feasible_mask, grid_shape, term_grid
from formloop.template import Template

SOURCES = {"representation": "model vs sol", "precondition": "model", "selection": "model",
           "model_error": "measured vs model", "spread": "measured", "total": "measured vs sol"}


def _ln(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (a > 0 and b > 0) or not (math.isfinite(a) and math.isfinite(b)):
        return None
    return math.log(a / b)


def best_costs(template: Template, workload: Mapping[str, Any], chip: Any) -> tuple[float | None, float | None]:
    """(best model cost under the constraints, best under the constraints and the preconditions), by
    enumerating the menus; (None, None) when the joint menu is too large to enumerate."""
    f = template.formulate(workload, chip)
    if int(np.prod(grid_shape(f))) > MAX_POINTS:
        return None, None
    cost = term_grid(f, f.cost)
    ok = feasible_mask(f)
    pre = [type(c)(c.name, substitute(c.expr, f.params), c.group, c.doc) for c in template.preconditions]
    ok_pre = ok & feasible_mask(f, pre) if pre else ok
    best_all = float(cost[ok].min()) if ok.any() else None
    best_pre = float(cost[ok_pre].min()) if ok_pre.any() else None
    return best_all, best_pre


def design_loss(template: Template, workload: Mapping[str, Any], chip: Any, *, predicted_us: float | None,
                measured_us: float | None, floor_us: float | None,
                spread_us: tuple[float, float] | None = None) -> dict[str, Any]:
    """The decomposition for one design (times in the template's unit, us for the GPU families)."""
    try:
        best_all, best_pre = best_costs(template, workload, chip)
    except FormloopError as exc:
        best_all = best_pre = None
        note = f"menus not enumerated: {exc}"
    else:
        note = "" if best_all is not None else "joint menu too large to enumerate: representation and precondition " \
                                                "terms not computed"
    out = {"representation": _ln(best_all, floor_us), "precondition": _ln(best_pre, best_all),
           "selection": _ln(predicted_us, best_pre), "model_error": _ln(measured_us, predicted_us),
           "spread": _ln(spread_us[1], spread_us[0]) if spread_us else None,
           "total": _ln(measured_us, floor_us), "best_all_us": best_all, "best_admissible_us": best_pre,
           "floor_us": floor_us, "predicted_us": predicted_us, "measured_us": measured_us,
           "sources": dict(SOURCES), "unit": "natural log of a time ratio (0 = no loss)"}
    if note:
        out["note"] = note
    return out
