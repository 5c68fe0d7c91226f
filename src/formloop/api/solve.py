"""Solve a template for one workload on one chip, and check one design against it.

Both faces call these: `formloop solve`/`check` and the MCP tools of the same names. A GEMM
template's report also carries the design-report fields (bound class, T_comp/T_mem, shared
memory) that the tiling study reads; every time in it is the model's (`source`). The attention
templates (shape B,Hq,Hkv,D,L, optionally `,page=P` or `,causal=0|1`) are solved by
formloop.library.attention_service, whose report has the same fields and the SOL floor (`sol`).
A request that names no dtype or chip means the template's own (`resolve.default_dtype`,
`resolve.default_chip`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from formloop.api.resolve import Routed, chip_from, default_chip, default_dtype, gpu_contract, route, settings_from
from formloop.api.values import plain
from formloop.errors import FormloopError, InvalidInput
from formloop.library import attention_decode, attention_prefill, attention_service, gemm_tiling, gemm_tiling_gpu
from formloop.settings import Settings
from formloop.solve import SOLVERS, enumerate_designs
from formloop.template import Template
from formloop.verify import check_instance
from formloop.workload import WorkloadSpec, as_integer, as_workload, split_shape

Shape = str | Mapping[str, Any] | Sequence[int]
BOUND_CLASS = {m.NAME: m.bound_class for m in (gemm_tiling, gemm_tiling_gpu, attention_decode, attention_prefill)}
"""Templates whose report names what bounds the design (memory or compute), by template name."""


def defaults(template: str, dtype: str | None, chip: str | None) -> tuple[str, str]:
    """(dtype, chip) of a request: as given, else the template's own."""
    return (default_dtype(template) if dtype is None else dtype), (default_chip(template) if chip is None else chip)


def workload_for(t: Template, shape: Shape, op: str | None, dtype: str) -> WorkloadSpec:
    """The workload `shape` describes for template `t` (op defaults to the operator it computes)."""
    algorithm = t.descriptor.get("algorithm")
    if op is None:
        op = algorithm
    if op is None:
        raise InvalidInput("op", None, "the operator of the workload (the template does not say it)")
    if algorithm is not None and op != algorithm:
        raise InvalidInput(f"op for {t.name}", op, [algorithm])
    if attention_service.is_attention(t.name):
        return attention_service.workload_spec(t.name, shape, dtype)
    return as_workload(op, shape, dtype, [t])


def routed_workload(template: str, shape: Shape, *, op: str | None, dtype: str, chip: str,
                    options: Mapping[str, Any] | None, calibration: str | None = None,
                    settings: Settings | None = None) -> tuple[Routed, WorkloadSpec]:
    routed = route(template, options, chip, dtype, calibration, settings)
    return routed, workload_for(routed.candidate.template, shape, op, dtype)


def solve(template: str, shape: Shape, *, op: str | None = None, dtype: str | None = None, chip: str | None = None,
          options: Mapping[str, Any] | None = None, solver: str = "milp", calibration: str | None = None,
          settings: Settings | None = None) -> dict:
    """The optimal design of `template` for one workload on `chip`, its bound, gap and tied optima.

    `shape` is the shape grammar ('1000,1000,1000', 'R=4096,D=1024') or a mapping of named extents;
    on h200/h100, gemm-tiling is solved under the Triton family's contract (gemm-tiling-gpu)."""
    if solver not in SOLVERS:
        raise InvalidInput("solver", solver, sorted(SOLVERS))
    dtype, chip = defaults(template, dtype, chip)
    if attention_service.is_attention(template):
        attention_only(template, op, options)
        routed = gpu_contract(dtype, calibration, name=template, chip=chip, settings=settings)
        report = attention_service.solve_template(routed.candidate.template, shape, chip=chip, dtype=dtype,
                                                  solver=solver, time_limit=settings_from(settings).solver_time_limit_s)
        return plain({**report, **routed.extra})
    routed, w = routed_workload(template, shape, op=op, dtype=dtype, chip=chip, options=options,
                                calibration=calibration, settings=settings)
    return plain(solve_routed(routed, w, chip, solver, settings))


def solve_routed(routed: Routed, w: WorkloadSpec, chip: str, solver: str, settings: Settings | None) -> dict:
    """The solve report of a routed template for workload `w` (not yet made plain)."""
    t = routed.candidate.template
    f = t.formulate(w.params, chip_from(chip))
    limit = {"time_limit": settings_from(settings).solver_time_limit_s} if solver == "milp" else {}
    sol = SOLVERS[solver](f, **limit)
    ties = sol.ties if sol.ties is not None else _enumerated_ties(f)
    n_ties = None if ties is None else len(ties)
    report: dict[str, Any] = {
        "template": t.name, "template_hash": t.content_hash, "contract": routed.contract, "chip": chip,
        "shape": dict(w.shape), "dtype": w.dtype, **routed.extra, "solver": sol.solver, "status": sol.status,
        "design": dict(sol.assignment)}
    if t.name in BOUND_CLASS:
        report.update({
            "objective_us": sol.objective, "bound_us": sol.bound, "gap": sol.gap, "ties": n_ties,
            "bound_class": BOUND_CLASS[t.name](sol.terms), "smem_bytes": int(sol.terms["smem_bytes"]),
            "T_comp_us": sol.terms["T_comp_us"], "T_mem_us": sol.terms["T_mem_us"], "solve_seconds": sol.seconds})
    report.update({
        "model": sol.model.as_dict(), "source": "model", "workload": w.key, "options": dict(t.options),
        "objective": sol.objective, "unit": sol.unit, "bound": sol.bound, "gap": sol.gap, "ties": n_ties,
        "feasible": sol.feasible_count, "terms": dict(sol.terms), "seconds": sol.seconds,
        "units": {"objective": f"{sol.unit} (model)", "bound": f"{sol.unit} (solver)", "seconds": "s (wall)"}})
    return report


def attention_only(template: str, op: str | None, options: Mapping[str, Any] | None) -> None:
    """An attention request names its workload in the shape (page, causal) and takes no factory options."""
    if op is not None and op != template:
        raise InvalidInput(f"op for {template}", op, [template])
    if options:
        raise InvalidInput(f"options of {template}", dict(options), "none (dtype, --calibration; page= and "
                                                                     "causal= go in the shape)")


def _enumerated_ties(f):
    """The tied optima by enumeration (the MILP finds one); None when the menus are too large to list."""
    try:
        return enumerate_designs(f).ties
    except FormloopError:
        return None


def design_from(t: Template, design: str | Mapping[str, Any]) -> dict[str, Any]:
    """A design as the template's decision values: a mapping, or 'Tm=128,Tn=128,...' / '128,128,...'
    (the shape grammar over the decision names, in their declared order)."""
    if isinstance(design, Mapping):
        return dict(design)
    raw = split_shape(design, t.decision_names, what=f"design of {t.name}")
    out = {}
    for k, v in raw.items():
        n = as_integer(v)
        if n is None:
            try:
                n = float(v) if v.isascii() else None
            except ValueError:
                n = None
        if n is None:
            raise InvalidInput(f"design {k}", v, "a number from the decision's menu")
        out[k] = n
    return out


def check(template: str, design: str | Mapping[str, Any], shape: Shape, *, op: str | None = None,
          dtype: str | None = None, chip: str | None = None, options: Mapping[str, Any] | None = None) -> dict:
    """One design against the template's scope, menus, constraints and preconditions (in ms)."""
    dtype, chip = defaults(template, dtype, chip)
    routed, w = routed_workload(template, shape, op=op, dtype=dtype, chip=chip, options=options)
    t = routed.candidate.template
    assignment = design_from(t, design)
    r = check_instance(t, assignment, w.params, chip_from(chip))
    return plain({"template": t.name, "template_hash": t.content_hash, "workload": w.key, "chip": chip,
                  "design": assignment, "valid": r.ok, "violations": [str(v) for v in r.violations],
                  "conditions": r.conditions, "seconds": r.seconds, "units": {"seconds": "s (wall)"}})
