"""The one loop: draw covering templates, prove or reuse, solve, check, evaluate, store, report.

For each workload the loop draws every template whose scope covers it (from the library, from the
templates the caller brings, and from the population's proved templates), proves each template
once (or reuses a stored proof with the same toolchain), solves the covering ones, checks the
chosen instance against the template, evaluates it on the best tier available, and stores the
design and the measurement with their chip and workload. Nothing unproved is solved: a refuted
template is reported with its counterexample, an unresolved one with the verifier's reason."""
from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import z3

import formloop
from formloop.errors import FormloopError, InvalidInput
from formloop.hw.chips import get_chip
from formloop.library import template_factory, template_names
from formloop.population import NearDuplicate, Population, scope_miss
from formloop.population.certify import missing_kinds, obligation_failures
from formloop.settings import Settings, load_settings
from formloop.solve import solve_milp
from formloop.template import Template
from formloop.library.user import library_origin, source_text

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
OP_AXES = {"gemm": ("M", "N", "K")}
TOOLCHAIN = f"formloop {formloop.__version__}; z3 {z3.get_version_string()}"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload: an operator, its named extents and an element type. Its parameters are the
    extents plus `e` (bytes per element), the names templates read."""

    op: str
    shape: Mapping[str, int]
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise InvalidInput("dtype", self.dtype, sorted(DTYPE_BYTES))
        for k, v in self.shape.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(f"shape {k}", v, "a positive integer")

    @property
    def params(self) -> dict[str, int]:
        return {**self.shape, "e": DTYPE_BYTES[self.dtype]}

    @property
    def key(self) -> str:
        """The workload as the population stores it: 'gemm fp32 M=64 N=4096 K=4096'."""
        return f"{self.op} {self.dtype} " + " ".join(f"{k}={v}" for k, v in self.shape.items())

    @property
    def label(self) -> str:
        return f"{self.op} {'x'.join(str(v) for v in self.shape.values())} {self.dtype}"


def gemm(m: int, n: int, k: int, dtype: str = "fp32") -> WorkloadSpec:
    return WorkloadSpec("gemm", {"M": m, "N": n, "K": k}, dtype)


TILING_STUDY = (gemm(4096, 4096, 4096), gemm(64, 4096, 4096), gemm(1000, 1000, 1000))
"""The GEMM workload of the tiling study (seed 000, Appendix A): three shapes, FP32."""


SUITES = {"tiling-study": TILING_STUDY}


def workload_axes(op: str, templates: Sequence[Template] = ()) -> tuple[str, ...] | None:
    """Names of the extents of `op`, in order: known operators first, else a template for `op`."""
    if op in OP_AXES:
        return OP_AXES[op]
    for t in (*templates, *(c.template for c in library_candidates("fp32"))):
        if t.descriptor.get("algorithm") == op:
            return tuple(p.name for p in t.params if p.payload.kind == "workload" and p.name != "e")
    return None


def parse_workload(op: str, text: str, dtype: str = "fp32", templates: Sequence[Template] = ()) -> WorkloadSpec:
    """'4096,4096,4096' (extents in the operator's order) or 'R=4096,C=1024' (named)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    axes = workload_axes(op, templates)
    if parts and all("=" in p for p in parts):
        pairs = [p.split("=", 1) for p in parts]
        if axes is not None and {k.strip() for k, _ in pairs} != set(axes):
            raise InvalidInput(f"shape of {op}", text, f"one value for each of {', '.join(axes)}")
        raw = {k.strip(): v.strip() for k, v in pairs}
        if axes is not None:  # one workload, one key: extents in the operator's order
            raw = {k: raw[k] for k in axes}
    else:
        if axes is None:
            raise InvalidInput(f"shape of {op}", text, "named extents such as R=4096,C=1024 "
                               "(no template for this operator says its extents)")
        if len(parts) != len(axes):
            raise InvalidInput(f"shape of {op}", text, f"{len(axes)} positive integers ({','.join(axes)})")
        raw = dict(zip(axes, parts))
    shape = {}
    for k, v in raw.items():
        try:
            shape[k] = int(v)
        except ValueError:
            raise InvalidInput(f"shape {k}", v, "a positive integer") from None
    return WorkloadSpec(op, shape, dtype)


def workloads_from(name: str, shapes: Sequence[str] = (), dtype: str = "fp32",
                   templates: Sequence[Template] = ()) -> list[WorkloadSpec]:
    """A named suite (e.g. tiling-study), or operator `name` at each of `shapes`."""
    if name in SUITES:
        if shapes:
            raise InvalidInput("shape", list(shapes), f"none: suite {name} fixes its own shapes")
        return list(SUITES[name])
    if not shapes:
        raise InvalidInput("shape", None, f"at least one --shape for operator {name} (or a suite: {', '.join(SUITES)})")
    return [parse_workload(name, s, dtype, templates) for s in shapes]


@dataclass(frozen=True)
class Candidate:
    template: Template
    origin: str


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

    def as_dict(self) -> dict:
        return {"chip": self.chip, "store": self.store, "proofs_new": self.proofs_new,
                "proofs_reused": self.proofs_reused, "verifier_calls": self.verifier_calls, "seconds": self.seconds,
                "rows": [asdict(r) for r in self.rows], "passed_over": self.passed_over,
                "units": {"predicted_us": "us (model)", "bound_us": "us (solver)", "measured_us": "us (tier column)",
                          "sol_floor_us": "us (sol)", "seconds": "s (wall)"}}


def library_candidates(dtype: str) -> list[Candidate]:
    """Every library template with its default options, its dtype option set when it has one."""
    out = []
    for name in template_names():
        factory = template_factory(name)
        kwargs = {"dtype": dtype} if "dtype" in inspect.signature(factory).parameters else {}
        try:
            t = factory(**kwargs)
        except FormloopError:
            continue  # this template does not offer the dtype; it cannot cover the workload
        out.append(Candidate(t, library_origin(name, dict(t.options))))
    return out


class Loop:
    """One run of the loop against one population and one chip."""

    def __init__(self, population: Population, *, chip: str = "illustrative", settings: Settings | None = None,
                 prover: Callable[..., Any] | None = None, checker: Callable[..., Any] | None = None,
                 evaluator: Any = None, sol: Callable[..., Any] | None = None, progress: Progress | None = None):
        # Imported at call time: the evaluator may probe for a GPU, which `formloop --help` need not do.
        from formloop.sol import sol_report
        from formloop.verify import check_instance

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

    # -- step 1: draw --------------------------------------------------------------------------
    def draw(self, w: WorkloadSpec, extra: Sequence[Candidate]) -> tuple[list[Candidate], list[dict[str, str]]]:
        pool: dict[str, Candidate] = {}
        for c in (*extra, *library_candidates(w.dtype)):
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

    # -- step 2: prove or reuse ----------------------------------------------------------------
    def prove(self, c: Candidate) -> tuple[str, str, float, str]:
        h = c.template.content_hash
        if h in self.proved:
            return self.proved[h]
        start = time.perf_counter()
        rec, last = self.population.find(h), self.population.latest_certificate(h, TOOLCHAIN)
        if rec is not None and last is not None and (rec.status, last[0]) in (("proved", "proved"),
                                                                              ("refuted", "counterexample")):
            # Same contract, same toolchain: the stored verdict stands; the verifier is not called.
            self.proofs_reused += rec.status == "proved"
            note = "" if rec.status == "proved" else "counterexample (stored): " + " | ".join(
                f"{x['obligation']}: witness {x['witness']}" for x in self.population.counterexamples(h))
            out = (rec.status, "reused", time.perf_counter() - start, note)
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
        row.design_id = self.population.add_design(
            t.content_hash, workload=w.key, chip=self.chip_name, assignment=sol.assignment,
            predicted=sol.objective, unit=sol.unit, solver=sol.solver, bound=sol.bound, gap=sol.gap)
        self._evaluate(w, t, sol.assignment, row)
        self._speed_of_light(w, row)
        return row

    def _evaluate(self, w: WorkloadSpec, t: Template, assignment, row: LoopRow) -> None:
        clock = time.perf_counter()
        m = self.evaluator.evaluate(t, assignment, w.params, self.chip)
        row.seconds["evaluate"] = time.perf_counter() - clock
        prov = m.provenance
        row.tier, row.device = str(m.tier), prov.device
        error = m.correctness.rel_error if m.correctness is not None else None
        if m.ok:
            row.measured_us = m.latency_us
        else:  # a failed instance keeps its failure class; its latency is not a number to report
            row.note = f"evaluate ({m.tier}): {m.failure or 'correctness check failed'}"
        self.population.add_measurement(
            row.design_id, workload=w.key, chip=self.chip_name, tier=row.tier, device=prov.device,
            latency_s=m.latency_us * 1e-6 if m.ok else None, error=error, versions=dict(prov.versions),
            provenance=_as_dict(prov), failure="" if m.ok else (m.failure or "correctness check failed"))

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
                          time.perf_counter() - start, self.verifier_calls, passed)


def run_loop(workloads: Sequence[WorkloadSpec], *, chip: str = "illustrative", templates: Sequence[Candidate] = (),
             store: str | None = None, settings: Settings | None = None, progress: Progress | None = None,
             **components) -> LoopReport:
    """Run the loop over `workloads` on `chip` against the store (default: settings.store_path)."""
    settings = settings or load_settings()
    with Population(store or settings.store_path, busy_timeout_ms=settings.busy_timeout_ms) as pop:
        return Loop(pop, chip=chip, settings=settings, progress=progress, **components).run(workloads, templates)


def evaluator_for(tier: str):
    """The evaluator for a tier setting: auto (gpu when a CUDA device is present, else model),
    model, or gpu (refused where there is no CUDA device: never silently replaced by the model)."""
    from formloop import evaluate

    if tier == "auto":
        return evaluate.best_available()
    if tier == "model":
        return evaluate.ModelEvaluator()
    if tier == "gpu":
        if not evaluate.gpu_available():
            raise InvalidInput("tier", tier, "auto or model (no CUDA device is visible here)")
        from formloop.evaluate.gpu import GpuEvaluator

        return GpuEvaluator()
    raise InvalidInput("tier", tier, ("auto", "model", "gpu"))


def default_prover() -> Callable[..., Any]:
    from formloop.verify import prove_template

    return prove_template


def admit(population: Population, c: Candidate, prover: Callable[..., Any], timeout_s: float
          ) -> tuple[str, str, float]:
    """Prove a template and store it with its certificate: (status, note, prove seconds).

    status is proved, refuted (note: the counterexample), unresolved (note: why) or refused
    (note: the near-duplicate it repeats)."""
    start = time.perf_counter()
    cert = prover(c.template, timeout_s=timeout_s)
    seconds = time.perf_counter() - start
    try:
        rec = population.add_template(c.template, origin=c.origin, certificate=cert,
                                      source=source_text(c.template, c.origin), toolchain=TOOLCHAIN)
    except NearDuplicate as exc:
        return "refused", str(exc), seconds
    return rec.status, _proof_note(rec.status, cert), seconds


def _proof_note(status: str, cert) -> str:
    if status == "refuted":
        parts = []
        for o in obligation_failures(cert):
            parts.append(f"{o.obligation}: witness {dict(o.witness or {})}" + (f"; replay: {o.replay}" if o.replay else ""))
        return "counterexample: " + " | ".join(parts)
    if status == "unresolved":
        reasons = [f"{o.obligation}: {o.reason}" for o in cert.obligations if o.reason and not o.proved]
        missing = missing_kinds(cert)
        return "unresolved: " + "; ".join(reasons + ([f"no proof of {', '.join(missing)}"] if missing else []))
    return ""


def _as_dict(obj) -> dict:
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return {"value": str(obj)}

