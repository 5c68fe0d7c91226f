"""The model tier: the template's own cost, evaluated for one instance (no hardware needed)."""
from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from typing import Any

from formloop.evaluate.measurement import Measurement, Provenance, Tier, failed
from formloop.template import Template


def chip_name(chip: Any) -> str:
    return getattr(chip, "name", "none") if chip is not None else "none"


class ModelEvaluator:
    """Latency = the template's cost expression at the assignment (unit: the template's, µs here)."""

    tier = Tier.MODEL

    def provenance(self, chip: Any) -> Provenance:
        from formloop import __version__ as formloop_version

        return Provenance(tier=self.tier.value, device=f"model of {chip_name(chip)}",
                          sm_count=getattr(chip, "sm_count", None),
                          versions={"formloop": str(formloop_version)}, timing="cost expression")

    def evaluate(self, template: Template, assignment: Mapping[str, Real], workload: Mapping[str, Real],
                 chip: Any = None) -> Measurement:
        prov = self.provenance(chip)
        violations = template.check(assignment, workload, chip)
        if violations:
            return failed(template.name, template.content_hash, assignment, workload, chip_name(chip), prov,
                          "infeasible: " + "; ".join(str(v) for v in violations))
        values = template.bind(workload, chip)
        terms = template.evaluate_terms({k: assignment[k] for k in template.decision_names}, values)
        return Measurement(template.name, template.content_hash, dict(assignment), dict(workload), chip_name(chip),
                           terms["cost"], prov, terms=terms)
