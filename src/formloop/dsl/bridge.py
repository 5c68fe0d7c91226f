"""The bridge: a validated spec becomes an instance of gemm-epilogue-gpu.

Fixed fields become equality rows added to the template's formulation for the spec's shape (the
template itself, and so its proof, does not change); the open fields (?) are solved by its MILP.
The chosen design is then checked against the template (scope, menus, walls, preconditions, the
solver's rows) with the template's certificate, and against the spec's fixed fields, before any
kernel is built. Proofs are cached per template content hash for the life of the process."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from formloop.dsl.diagnostics import Diagnostic, SpecError
from formloop.dsl.ir import MENUS
from formloop.dsl.validate import Validated, template_for, workload_of
from formloop.errors import Infeasible, InvalidInput
from formloop.hw.chips import get_chip
from formloop.solve import SOLVERS
from formloop.library import gemm_tiling_gpu as base
from formloop.template import Constraint, Template
from formloop.verify import Certificate, InstanceCheck, check_instance, prove_template

_CERTIFICATES: dict[str, Certificate] = {}


@dataclass(frozen=True)
class Design:
    """The instance a spec stands for: every decision's value and where it came from."""

    assignment: Mapping[str, int]
    solved: tuple[str, ...]                     # decisions the MILP chose (the rest: the spec)
    workload: Mapping[str, int] | None
    template: Template
    solve: Mapping[str, Any] | None = None      # MILP objective, bound, time (model, solver)
    check: InstanceCheck | None = None
    certificate: Certificate | None = None
    predicted_us: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {"assignment": dict(self.assignment), "solved": list(self.solved),
                "workload": dict(self.workload) if self.workload else None, "template": self.template.name,
                "template_hash": self.template.content_hash, "options": dict(self.template.options),
                "solve": dict(self.solve) if self.solve else None,
                "instance_check": self.check.as_dict() if self.check else None,
                "certificate": None if self.certificate is None else
                {"verdict": self.certificate.verdict.value, "counts": self.certificate.counts(),
                 "seconds": self.certificate.seconds},
                "predicted_us": self.predicted_us, "notes": list(self.notes)}


def certificate_for(template: Template) -> Certificate:
    key = template.content_hash
    if key not in _CERTIFICATES:
        _CERTIFICATES[key] = prove_template(template)
    return _CERTIFICATES[key]


def pin_rows(pins: Mapping[str, int], template: Template) -> tuple[Constraint, ...]:
    by_name = {d.name: d for d in template.decisions}
    return tuple(Constraint(f"spec_{d}", by_name[d].eq(v), "spec", f"the spec fixes {d} = {v}")
                 for d, v in pins.items())


def design(v: Validated, *, calibration: Mapping[str, float] | None = None, calibration_id: str = "priors",
           prove: bool = True, solver: str = "milp") -> Design:
    """Solve the open fields (the MILP; `solver="enumerate"` walks the joint menu instead, same
    template, same tie-break) and check the instance; refuse a spec it cannot complete."""
    k = v.spec.kernel
    workload = workload_of(v.spec)
    if workload is None:
        if k.open_decisions:
            why = f"open fields {', '.join(k.open_decisions)} are solved for a shape"
            raise SpecError(v.spec.source, [Diagnostic(*k.pos("kernel"), "shape", "missing", "M x N x K (or --shape)",
                                                       why)])
        return Design(dict(k.pins), (), None, v.template,
                      notes=("no shape: the instance is checked against the template when it runs",))
    if k.chip not in base.CONTRACT_CHIPS:
        return Design(dict(k.pins), (), workload, v.template,
                      notes=(f"{k.chip}: the fixed fields meet the template's walls on its capacities; the "
                             f"instance check with the cost binding covers {', '.join(base.CONTRACT_CHIPS)} only",))
    template = template_for(v.spec, calibration, calibration_id)
    chip = get_chip(k.chip)
    solve, solved = None, ()
    if k.open_decisions:
        if solver not in SOLVERS:
            raise InvalidInput("solver", solver, sorted(SOLVERS))
        f = template.formulate(workload, chip)
        f = replace(f, constraints=f.constraints + pin_rows(k.pins, template))
        try:
            sol = SOLVERS[solver](f)
        except Infeasible as exc:
            raise SpecError(v.spec.source, [Diagnostic(*k.pos("kernel"), "configuration", dict(k.pins),
                                                       "a design meeting every wall", str(exc))]) from None
        assignment = {d: int(x) for d, x in sol.assignment.items()}
        solved = k.open_decisions
        solve = {"solver": "milp (HiGHS)" if solver == "milp" else "enumerate (numpy)",
                 "objective_us": sol.objective, "bound_us": sol.bound, "gap": sol.gap,
                 "seconds": sol.seconds, "status": sol.status.value, "model": sol.model.as_dict(),
                 "terms": dict(sol.terms)}
    else:
        assignment = dict(k.pins)
    cert = certificate_for(template) if prove else None
    check = check_instance(template, assignment, workload, chip, certificate=cert)
    broken = [d for d, val in k.pins.items() if assignment[d] != val]
    if broken or not check.ok:
        detail = "; ".join([str(x) for x in check.violations] + [f"{d} is not the spec's {k.pins[d]}" for d in broken])
        raise SpecError(v.spec.source, [Diagnostic(*k.pos("kernel"), "instance", assignment,
                                                   "an instance of the proved template", detail)])
    values = template.bind(workload, chip)
    predicted = template.evaluate_terms(assignment, values)["cost"]
    return Design(assignment, solved, workload, template, solve, check, cert, predicted)


def assignment_text(a: Mapping[str, int]) -> str:
    """`tile = 128 x 256 x 64, stages = 4, ...` in the language's own words."""
    load = {1: "tma", 0: "ptr"}[a["L"]]
    return (f"tile = {a['Tm']} x {a['Tn']} x {a['Tk']}, stages = {a['S']}, warps = {a['W']}, split_k = {a['KS']}, "
            f"swizzle = {a['G']}, load = {load}")


assert set(MENUS) == {"Tm", "Tn", "Tk", "S", "W", "KS", "G", "L"}
