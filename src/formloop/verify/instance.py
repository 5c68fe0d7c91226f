"""The cheap per-candidate check: once a template is proved, a design is correct if it lies in C,
its parameters lie in Γ, and the solver's encoding agrees with the declared constraints there.

The encoding check linearizes each constraint of the instantiated formulation exactly as the MILP
back end does (rows over one-hot tables, masks over joint menus) and evaluates those rows at the
design: a row that accepts a design its constraint rejects, or the reverse, is an encoding
violation."""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import numpy as np

from formloop.expr import evaluate, substitute
from formloop.expr.linearize import Affine, Linearizer, Mask, Row
from formloop.template import Assignment, Constraint, Template, Violation

ROW_TOLERANCE = 1e-9


@dataclass(frozen=True)
class InstanceCheck:
    template: str
    template_hash: str
    assignment: Mapping[str, Real]
    workload: Mapping[str, Real]
    violations: tuple[Violation, ...]
    conditions: int
    seconds: float
    certificate: str = "none given"
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {"template": self.template, "template_hash": self.template_hash, "ok": self.ok,
                "assignment": dict(self.assignment), "workload": dict(self.workload),
                "violations": [str(v) for v in self.violations], "conditions": self.conditions,
                "seconds": self.seconds, "certificate": self.certificate}


def _position(template: Template, assignment: Assignment, key: tuple[str, ...]) -> tuple[int, ...]:
    by_name = {d.name: d for d in template.decisions}
    return tuple(by_name[n].decision.menu.index(assignment[n]) for n in key)


def _affine_at(template: Template, a: Affine, assignment: Assignment) -> float:
    if a.aux:
        raise ValueError("a constraint row with auxiliary columns cannot be evaluated at a design alone")
    return a.const + sum(float(t[_position(template, assignment, k)]) for k, t in a.tables.items())


def encoding_violations(template: Template, params: Mapping[str, Real], assignment: Assignment
                        ) -> tuple[list[Violation], int]:
    """Compare each constraint with its MILP rows at one design; returns (violations, rows checked)."""
    # Fold the parameters exactly as Template.formulate does before the MILP back end reads them.
    folded = [Constraint(c.name, substitute(c.expr, dict(params)), c.group) for c in template.constraints]
    lin = Linearizer(template.decisions)
    env = {**params, **assignment}
    out, rows = [], 0
    for c in folded:
        declared = bool(evaluate(c.expr, env))
        encoded = True
        for part in lin.constraint(f"{c.group}.{c.name}", c.expr):
            rows += 1
            if isinstance(part, Row):
                v = _affine_at(template, part.lhs, assignment)
                tol = ROW_TOLERANCE * max(1.0, abs(v))
                encoded &= part.lower - tol <= v <= part.upper + tol
            elif isinstance(part, Mask):
                encoded &= bool(np.asarray(part.allowed)[_position(template, assignment, part.key)]) if part.key \
                    else bool(part.allowed)
        if encoded != declared:
            rows_say, rule_says = "accept" if encoded else "reject", "holds" if declared else "fails"
            out.append(Violation("encoding", c.name,
                                 f"the solver's rows {rows_say} this design but the constraint {rule_says}"))
    return out, rows


def check_instance(template: Template, assignment: Assignment, workload: Mapping[str, Real], chip: Any = None, *,
                   certificate: Any = None) -> InstanceCheck:
    """Scope, menus, constraints, preconditions and encoding for one design, timed.

    With `certificate` (a formloop.verify Certificate), also that it is a proof of this very
    template (same content hash) and that its verdict is proved."""
    start = time.perf_counter()
    violations = list(template.check(assignment, workload, chip))
    conditions = len(template.scope) + len(template.decisions) + len(template.constraints) + len(template.preconditions)
    rows = 0
    if not any(v.kind in ("menu", "scope") for v in violations):
        params = template.bind(workload, chip)
        enc, rows = encoding_violations(template, params, assignment)
        violations += enc
    cert_note = "none given"
    if certificate is not None:
        conditions += 1
        if certificate.template_hash != template.content_hash:
            violations.append(Violation("certificate", certificate.template,
                                        f"certifies content hash {certificate.template_hash}, "
                                        f"template is {template.content_hash}"))
        elif certificate.verdict.value != "proved":
            violations.append(Violation("certificate", certificate.template, f"verdict is {certificate.verdict.value}"))
        cert_note = f"{certificate.verdict.value} ({certificate.template_hash})"
    return InstanceCheck(template=template.name, template_hash=template.content_hash, assignment=dict(assignment),
                         workload=dict(workload), violations=tuple(violations), conditions=conditions + rows,
                         seconds=time.perf_counter() - start, certificate=cert_note, details={"encoding_rows": rows})
