"""The one loop: draw covering templates, prove or reuse, solve, check, evaluate, store, report.

For each workload the loop draws every template whose scope covers it (from the library, from the
templates the caller brings, and from the population's proved templates), proves each template
once (or reuses a stored proof with the same toolchain), solves the covering ones, checks the
chosen instance against the template, evaluates it on the best tier available, and stores the
design and the measurement with their chip and workload. Nothing unproved is solved: a refuted
template is reported with its counterexample, an unresolved one with the verifier's reason."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from formloop.api.admission import TOOLCHAIN, admit, default_prover, evaluator_for, library_candidates
from formloop.api.learning import learn_from, learnable
from formloop.api.resolve import Candidate, gpu_contract, is_hopper, is_user_spec, settings_from, template_from
from formloop.api.values import plain
from formloop.errors import FormloopError, InvalidInput
from formloop.hw.chips import get_chip
from formloop.population import MeasurementFact, Population, scope_miss
from formloop.settings import Settings, load_settings
from formloop.sol import sol_report
from formloop.solve import solve_milp
from formloop.template import Template
from formloop.verify import check_instance
from formloop.workload import WorkloadSpec, workloads_from

Progress = Callable[[str], None]


@dataclass
class LoopRow:
    """One (workload, template) outcome. Times in microseconds; each number names its source."""

    workload: str
    template: str
    template_hash: str
    proof: str                        # proved | refuted | unresolved | refused
    proof_source: str                 # new (the verifier ran now) | reused (a stored verdict) | '' (none)
    proof_seconds: float = 0.0
    design: dict[str, Any] = field(default_factory=dict)
    predicted_us: float | None = None  # source: model (the template's cost)
    bound_us: float | None = None      # source: solver
    check: str = ""                    # ok | the violations
    measured_us: float | None = None
    measured_eager_us: float | None = None  # gpu tier: per-call eager latency beside the graph median
    tier: str = ""                     # the evaluator tier that produced measured_us
    device: str = ""
    sol_floor_us: float | None = None  # source: sol (speed-of-light floor)
    sol_fraction: float | None = None  # floor / measured
    design_id: int | None = None
    note: str = ""
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class LoopReport:
    chip: str
    store: str
    rows: list[LoopRow]
    proofs_new: int
    proofs_reused: int
    seconds: float
    verifier_calls: int = 0
    passed_over: list[dict[str, str]] = field(default_factory=list)
    calibrations: dict[str, str] = field(default_factory=dict)  # template -> which calibration its model used
    learned: list[str] = field(default_factory=list)  # what each gpu measurement did to the calibration

    def as_dict(self) -> dict:
        return {"chip": self.chip, "store": self.store, "proofs_new": self.proofs_new,
                "calibrations": self.calibrations, "learned": self.learned,
                "proofs_reused": self.proofs_reused, "verifier_calls": self.verifier_calls, "seconds": self.seconds,
                "rows": [asdict(r) for r in self.rows], "passed_over": self.passed_over,
                "units": {"predicted_us": "us (model)", "bound_us": "us (solver)", "measured_us": "us (tier column)",
                          "measured_eager_us": "us (gpu, eager per call)",
                          "sol_floor_us": "us (sol)", "seconds": "s (wall)"}}


class Loop:
    """One run of the loop against one population and one chip."""

    def __init__(self, population: Population, *, chip: str = "illustrative", settings: Settings | None = None,
                 prover: Callable[..., Any] | None = None, checker: Callable[..., Any] | None = None,
                 evaluator: Any = None, sol: Callable[..., Any] | None = None, progress: Progress | None = None):
        self.population = population
        self.chip_name = chip
        self.chip = get_chip(chip)
        self.settings = settings or load_settings()
        self.prover = prover or default_prover()
        self.checker = checker or check_instance
        self.evaluator = evaluator or evaluator_for(self.settings.tier)
        self.sol = sol or sol_report
        self.progress = progress or (lambda msg: None)
        self.proved: dict[str, tuple[str, str, float, str]] = {}  # hash -> (status, source, seconds, note)
        self.proofs_new = self.proofs_reused = self.verifier_calls = 0
        self.calibrations: dict[str, str] = {}
        self.learned: list[str] = []

    # -- step 1: draw --------------------------------------------------------------------------
    def draw(self, w: WorkloadSpec, extra: Sequence[Candidate]) -> tuple[list[Candidate], list[dict[str, str]]]:
        pool: dict[str, Candidate] = {}
        for c in (*extra, *(self._calibrated(c, w.dtype) for c in library_candidates(w.dtype))):
            pool.setdefault(c.template.content_hash, c)
        hits, skipped = self.population.covering(w.params, self.chip, algorithm=w.op)
        for rec, t in hits:
            pool.setdefault(rec.hash, Candidate(t, rec.origin))
        passed = [{"workload": w.label, "template": rec.name, "why": why} for rec, why in skipped]
        drawn = []
        for c in pool.values():
            if c.template.descriptor.get("algorithm") != w.op:
                continue
            why = scope_miss(c.template, w.params, self.chip)
            if why:
                passed.append({"workload": w.label, "template": c.template.name, "why": why})
            else:
                drawn.append(c)
        return drawn, passed

    def _calibrated(self, c: Candidate, dtype: str) -> Candidate:
        """A calibrated library family on a Hopper chip with the store's latest calibration (else its priors)."""
        t = c.template
        if not is_hopper(self.chip_name) or not learnable(t) or t.options.get("calibration", "priors") != "priors":
            return c
        routed = gpu_contract(dtype, name=t.name, chip=self.chip_name, settings=self.settings)
        self.calibrations[f"{t.name} {dtype}"] = routed.extra["calibration_source"]
        return routed.candidate

    # -- step 2: prove or reuse ----------------------------------------------------------------
    def prove(self, c: Candidate) -> tuple[str, str, float, str]:
        h = c.template.content_hash
        if h in self.proved:
            return self.proved[h]
        start = time.perf_counter()
        # One proof per template across every run sharing the store: a concurrent run's attempt is waited for.
        with self.population.claim_proof(h, TOOLCHAIN, on_wait=self.progress) as claim:
            if not claim.owned:
                # Same contract, same toolchain: the stored verdict stands; the verifier is not called.
                self.proofs_reused += claim.status == "proved"
                note = {"proved": "", "refuted": "counterexample (stored): " + " | ".join(
                    f"{x['obligation']}: witness {x['witness']}" for x in self.population.counterexamples(h))
                        }.get(claim.status, f"{claim.status} (attempt stored by a concurrent run)")
                out = (claim.status, "reused", time.perf_counter() - start, note)
            else:
                self.progress(f"proving {c.template.name} ({h})")
                self.verifier_calls += 1
                try:
                    status, note, seconds = admit(self.population, c, self.prover, self.settings.prove_timeout_s)
                except Exception as exc:  # noqa: BLE001 - one broken template must not end the run
                    # Nothing is stored: without a certificate the template stays out of the population.
                    status, seconds = "unresolved", time.perf_counter() - start
                    note = f"the verifier raised {type(exc).__name__}: {exc}"
                self.proofs_new += status == "proved"
                out = (status, "new", seconds, note)
        self.proved[h] = out
        return out

    # -- steps 3-6 for one (workload, template) --------------------------------------------------
    def run_one(self, w: WorkloadSpec, c: Candidate) -> LoopRow:
        t = c.template
        status, source, proof_s, note = self.prove(c)
        row = LoopRow(w.label, t.name, t.content_hash, status, source, proof_s, note=note)
        if status != "proved":
            return row
        clock = time.perf_counter()
        try:
            sol = solve_milp(t.formulate(w.params, self.chip), time_limit=self.settings.solver_time_limit_s)
        except FormloopError as exc:  # infeasible or a solver failure: reported, never dropped
            row.note = f"solve: {exc}"
            return row
        row.seconds["solve"] = time.perf_counter() - clock
        row.design, row.predicted_us, row.bound_us = dict(sol.assignment), sol.objective, sol.bound
        clock = time.perf_counter()
        check = self.checker(t, sol.assignment, w.params, self.chip)
        row.seconds["check"] = time.perf_counter() - clock
        row.check = "ok" if check.ok else "; ".join(str(v) for v in check.violations)
        if not check.ok:
            return row
        fact, m = self._evaluate(w, t, sol.assignment, row)
        # The design and its measurement commit together: a run killed here leaves both or neither.
        row.design_id, _ = self.population.add_design_with_measurements(
            t.content_hash, workload=w.key, chip=self.chip_name, assignment=sol.assignment,
            predicted=sol.objective, unit=sol.unit, solver=sol.solver, bound=sol.bound, gap=sol.gap,
            measurements=[fact])
        if learnable(t) and m.tier == "gpu" and m.ok:
            learned = learn_from(self.population, t, m, dtype=w.dtype, chip=self.chip_name, chip_obj=self.chip,
                                 workload=w.params, source="formloop run (loop)")
            self.learned.append(f"{w.label} {t.name}: {learned['note']}")
        self._speed_of_light(w, row)
        return row

    def _evaluate(self, w: WorkloadSpec, t: Template, assignment, row: LoopRow):
        clock = time.perf_counter()
        m = self.evaluator.evaluate(t, assignment, w.params, self.chip)
        row.seconds["evaluate"] = time.perf_counter() - clock
        prov = m.provenance
        row.tier, row.device = str(m.tier), prov.device
        error = m.correctness.rel_error if m.correctness is not None else None
        if m.ok:
            row.measured_us = m.latency_us
            row.measured_eager_us = (m.details.get("eager") or {}).get("median_us")
        else:  # a failed instance keeps its failure class; its latency is not a number to report
            row.note = f"evaluate ({m.tier}): {m.failure or 'correctness check failed'}"
        return MeasurementFact(
            tier=row.tier, device=prov.device, latency_s=m.latency_us * 1e-6 if m.ok else None, error=error,
            versions=dict(prov.versions), provenance=_as_dict(prov),
            failure="" if m.ok else (m.failure or "correctness check failed")), m

    def _speed_of_light(self, w: WorkloadSpec, row: LoopRow) -> None:
        try:
            rep = self.sol(w.op, dict(w.shape), w.dtype, self.chip)
        except FormloopError as exc:  # no SOL model for this operator: say so, do not invent one
            row.note = (row.note + "; " if row.note else "") + f"sol: {exc}"
            return
        row.sol_floor_us = rep.time_floor_s * 1e6
        if row.measured_us:
            row.sol_fraction = row.sol_floor_us / row.measured_us

    # -- the whole loop ----------------------------------------------------------------------
    def run(self, workloads: Sequence[WorkloadSpec], extra: Sequence[Candidate] = ()) -> LoopReport:
        start = time.perf_counter()
        rows: list[LoopRow] = []
        passed: list[dict[str, str]] = []
        for w in workloads:
            self.progress(f"drawing templates for {w.label}")
            drawn, skipped = self.draw(w, extra)
            passed += skipped
            if not drawn:
                rows.append(LoopRow(w.label, "", "", "none", "", note="no template covers this workload"))
            for c in drawn:
                self.progress(f"{w.label}: {c.template.name}")
                rows.append(self.run_one(w, c))
        return LoopReport(self.chip_name, str(self.population.path), rows, self.proofs_new, self.proofs_reused,
                          time.perf_counter() - start, self.verifier_calls, passed, dict(self.calibrations),
                          list(self.learned))


def run_loop(workloads: Sequence[WorkloadSpec], *, chip: str = "illustrative", templates: Sequence[Candidate] = (),
             store: str | None = None, settings: Settings | None = None, progress: Progress | None = None,
             **components) -> LoopReport:
    """Run the loop over `workloads` on `chip` against the store (default: settings.store_path)."""
    settings = settings or load_settings()
    with Population(store or settings.store_path, busy_timeout_ms=settings.busy_timeout_ms) as pop:
        return Loop(pop, chip=chip, settings=settings, progress=progress, **components).run(workloads, templates)


def run(workload: str, shapes: Sequence[str] = (), *, dtype: str = "fp32", chip: str = "illustrative",
        templates: Sequence[str] = (), settings: Settings | None = None, progress: Progress | None = None) -> dict:
    """The loop as a user action: operator `workload` at each of `shapes` (the shape grammar), or a
    suite (tiling-study); `templates` are user templates path/to/file.py:NAME drawn beside the
    library's and the population's."""
    if isinstance(shapes, str) or isinstance(templates, str):
        raise InvalidInput("shapes/templates", shapes if isinstance(shapes, str) else templates,
                           "a list of strings (one shape or one template spec each)")
    user = [template_from(spec) if is_user_spec(spec) else _not_user(spec) for spec in templates]
    known = [c.template for c in (*user, *library_candidates(dtype))]  # they say the extents of their operators
    workloads = workloads_from(workload, list(shapes), dtype, known)
    return plain(run_loop(workloads, chip=chip, templates=user, settings=settings_from(settings),
                          progress=progress).as_dict())


def _not_user(spec: str):
    raise InvalidInput("template", spec, "a user template path/to/file.py:NAME (library templates are drawn anyway)")


def _as_dict(obj) -> dict:
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return {"value": str(obj)}
