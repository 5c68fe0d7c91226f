"""Template reuse (issue 18 part 2; seed 000, appendix B, Tables 20-21): a family solved for some
workloads, then asked about held-out ones. Two ways to answer a held-out workload:

  copy      take the assignment solved for the nearest solved workload (distance: the sum over the
            workload's parameters of |log2 new - log2 old|; ties go to the first listed) and run it
            unchanged (it may break a wall of the new workload: then its time is inf and the reason
            is kept);
  re-solve  solve the family's program for the held-out workload (MILP or enumeration).

Both are scored by the family's cost model (source: model, unit: the template's) on the same chip
and calibration; the benchmark (benchmarks/template_reuse.py) measures both on the GPU. A study
file (TOML) names the template and its options, the chip, the solver, an optional calibration
(term = value; default: the template's priors), the solved workloads and the held-out ones:

    name = "..."            template = "gemm-tiling-gpu"        chip = "h200"
    solver = "milp"         [options] dtype = "bf16"            [calibration] eta_mma = 0.85
    [solved] qwen3-8b.qkv.m128 = { M = 128, N = 6144, K = 4096 }
    [held_out] llama3-70b.qkv.m64 = { M = 64, N = 10240, K = 8192 }

GEMM workloads give M, N, K; attention-decode workloads give B, Hq, Hkv, D, L (and page)."""
from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from formloop.codesign.study import read_toml
from formloop.errors import Infeasible, InvalidInput
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.solve import SOLVERS
from formloop.template import Template

FAMILIES = ("gemm-tiling-gpu", "attention-decode")
KEYS = ("name", "template", "chip", "solver", "options", "calibration", "solved", "held_out")
GEMM_FIELDS = ("M", "N", "K")
ATTENTION_FIELDS = ("B", "Hq", "Hkv", "D", "L", "page")


@dataclass
class ReuseStudy:
    name: str
    template: str
    chip: str
    solver: str
    options: dict
    calibration: dict
    solved: dict[str, dict[str, int]]       # name -> workload parameters (the template's)
    held_out: dict[str, dict[str, int]]
    path: str = ""

    def family(self, calibration: Mapping[str, float] | None = None) -> Template:
        cal = {**self.calibration, **(calibration or {})}
        kw = {"calibration": cal, "calibration_id": "study" if cal else "priors"} if cal else {}
        return get_template(self.template, **self.options, **kw)


@dataclass
class Row:
    """One held-out workload: the copied assignment and the re-solved one, scored by the model."""

    workload: str
    params: dict
    nearest: str
    distance: float
    copied: dict
    copied_us: float
    copied_violations: list[str]
    resolved: dict
    resolved_us: float
    solve_s: float
    same: bool
    unit: str = "us"
    terms: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """copied / re-solved model time (> 1: re-solving wins; inf: the copy breaks a wall)."""
        return self.copied_us / self.resolved_us if self.resolved_us > 0 else math.nan


def load_reuse_study(path: str | Path) -> ReuseStudy:
    study = parse_reuse_study(read_toml(path, "reuse study file"))
    study.path = str(path)
    return study


def parse_reuse_study(data: Mapping) -> ReuseStudy:
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise InvalidInput("reuse study key", unknown[0], KEYS)
    name = _str(data, "name", None)
    template = _str(data, "template", None)
    if template not in FAMILIES:
        raise InvalidInput("template", template, FAMILIES)
    chip = _str(data, "chip", "h200")
    get_chip(chip)  # a named error for an unknown chip
    solver = _str(data, "solver", "milp")
    if solver not in SOLVERS:
        raise InvalidInput("solver", solver, sorted(SOLVERS))
    options = _table(data, "options", {"dtype": "bf16"})
    calibration = _table(data, "calibration", {})
    for k, v in calibration.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InvalidInput(f"calibration.{k}", v, "a finite number")
    study = ReuseStudy(name, template, chip, solver, dict(options), {k: float(v) for k, v in calibration.items()},
                       {}, {})
    dtype = options.get("dtype", "bf16")
    for part in ("solved", "held_out"):
        table = _table(data, part, None)
        if not table:
            raise InvalidInput(part, table, "a table of at least one workload (name = { ... })")
        setattr(study, part, {str(k): workload_params(template, v, dtype, f"{part}.{k}") for k, v in table.items()})
    study.family()  # named errors for bad options or calibration terms, before any solve
    return study


def workload_params(template: str, entry, dtype: str, where: str) -> dict[str, int]:
    """The template's workload parameters for one study entry (checked by the family's own workload)."""
    fields = GEMM_FIELDS if template == "gemm-tiling-gpu" else ATTENTION_FIELDS
    if not isinstance(entry, Mapping):
        raise InvalidInput(where, entry, f"a table of {', '.join(fields)}")
    unknown = sorted(set(entry) - set(fields))
    if unknown:
        raise InvalidInput(f"{where} field", unknown[0], fields)
    required = [f for f in fields if f != "page"]
    missing = [f for f in required if f not in entry]
    if missing:
        raise InvalidInput(f"{where}.{missing[0]}", None, "an integer >= 1")
    for k, v in entry.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if k == "page" else 1):
            raise InvalidInput(f"{where}.{k}", v, "an integer >= 0" if k == "page" else "an integer >= 1")
    if template == "gemm-tiling-gpu":
        from formloop.library.gemm_tiling import workload

        return workload((entry["M"], entry["N"], entry["K"]), dtype)
    from formloop.library.attention_workload import workload

    return workload({f: entry[f] for f in required}, dtype, page=int(entry.get("page", 0)))


def nearest(params: Mapping[str, int], solved: Mapping[str, Mapping[str, int]]) -> tuple[str, float]:
    """The solved workload closest to `params`: least sum of |log2 a - log2 b| (log2(1 + v) for a
    parameter that may be 0), first listed on ties."""
    def dist(other):
        return sum(abs(math.log2(1 + params[k]) - math.log2(1 + other[k])) for k in params)
    best = min(solved, key=lambda n: dist(solved[n]))   # min keeps the first of equal distances
    return best, dist(solved[best])


def solve_one(template: Template, params: Mapping[str, int], chip, solver: str) -> tuple[dict, float, float]:
    """(assignment, model cost, solve seconds on this machine) for one workload."""
    f = template.formulate(params, chip)
    t0 = time.perf_counter()
    try:
        sol = SOLVERS[solver](f)
    except Infeasible as exc:
        raise InvalidInput("workload", dict(params),
                           f"a workload the family can serve ({'; '.join(exc.reasons)})") from None
    return {k: int(v) for k, v in sol.assignment.items()}, float(sol.objective), time.perf_counter() - t0


def model_cost(template: Template, assignment: Mapping[str, int], params: Mapping[str, int], chip
               ) -> tuple[float, list[str]]:
    """The model's time of `assignment` on `params` (inf with the broken rules when it is not admitted)."""
    broken = template.check(assignment, params, chip)
    if broken:
        return math.inf, [str(v) for v in broken]
    return template.evaluate_terms(assignment, template.bind(params, chip))["cost"], []


def run_reuse(study: ReuseStudy, *, solver: str | None = None, calibration: Mapping[str, float] | None = None,
              only: list[str] | None = None) -> tuple[dict, list[Row]]:
    """Solve the study's solved workloads, then copy vs re-solve every held-out one (or those in `only`)."""
    solver = solver or study.solver
    if solver not in SOLVERS:
        raise InvalidInput("solver", solver, sorted(SOLVERS))
    if only:
        missing = [n for n in only if n not in study.held_out]
        if missing:
            raise InvalidInput("held-out workload", missing[0], sorted(study.held_out))
    template, chip = study.family(calibration), get_chip(study.chip)
    solved = {}
    for name, params in study.solved.items():
        a, us, s = solve_one(template, params, chip, solver)
        solved[name] = {"params": params, "assignment": a, "model_us": us, "solve_s": s}
    rows = []
    for name, params in study.held_out.items():
        if only and name not in only:
            continue
        near, d = nearest(params, study.solved)
        copied = solved[near]["assignment"]
        copied_us, why = model_cost(template, copied, params, chip)
        a, us, s = solve_one(template, params, chip, solver)
        terms = template.evaluate_terms(a, template.bind(params, chip))
        rows.append(Row(name, dict(params), near, d, dict(copied), copied_us, why, a, us, s, a == copied,
                        template.unit, {k: v for k, v in terms.items() if k.endswith("_us")}))
    return solved, rows


def _str(data: Mapping, key: str, default: str | None) -> str:
    if key not in data:
        if default is None:
            raise InvalidInput(key, None, "a string", fix=f"add `{key} = \"...\"` to the study file")
        return default
    v = data[key]
    if not isinstance(v, str) or not v:
        raise InvalidInput(key, v, "a non-empty string")
    return v


def _table(data: Mapping, key: str, default: dict | None) -> dict:
    if key not in data:
        if default is None:
            raise InvalidInput(key, None, "a table", fix=f"add a [{key}] table to the study file")
        return dict(default)
    v = data[key]
    if not isinstance(v, Mapping):
        raise InvalidInput(key, v, "a table")
    if key == "options":
        unknown = sorted(set(v) - {"dtype"})
        if unknown:
            raise InvalidInput("options key", unknown[0], ("dtype",))
    return dict(v)
