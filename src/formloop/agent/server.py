"""The MCP server: formloop's loop as tools, one tool per library call, over stdio.

Every tool returns a JSON object with `ok`. On bad input or a failed step it returns
`{"ok": false, "error": {"type", "message", "field", "allowed", "fix"}}`; the server itself never
raises out of a tool, so one bad call does not end the session. The tool functions are plain
Python (callable and testable without the SDK); only `build_server` imports `mcp`."""
from __future__ import annotations

import functools
import inspect
import json
import traceback
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any

from formloop.errors import FormloopError, InvalidInput
from formloop.settings import Settings, load_settings

TOOL_NAMES = ("list_templates", "show_template", "prove", "solve", "check", "sol_report", "evaluate", "wall_relax",
              "population_query", "add_template")
QUERY_KINDS = ("templates", "template", "designs", "measurements")


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=_default))


def _default(o):
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "value"):
        return o.value
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def structured(fn: Callable[..., dict]) -> Callable[..., dict]:
    """Turn any failure into a structured result; formloop errors keep their field and fix."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> dict[str, Any]:
        try:
            return _jsonable({"ok": True, **fn(*args, **kwargs)})
        except FormloopError as exc:
            return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc),
                                           "field": getattr(exc, "field", None),
                                           "allowed": getattr(exc, "allowed", None), "fix": exc.fix}}
        except Exception as exc:  # a bug, reported as data so the session survives it
            return {"ok": False, "error": {"type": "InternalError", "message": f"{type(exc).__name__}: {exc}",
                                           "field": None, "allowed": None, "fix": None,
                                           "traceback": traceback.format_exc(limit=6)}}
    # The SDK derives the output schema from the return annotation: an object with any keys.
    wrapper.__signature__ = inspect.signature(fn).replace(return_annotation=dict[str, Any])
    return wrapper


class Tools:
    """The tool implementations, bound to one store."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or load_settings()

    # -- helpers ---------------------------------------------------------------------------------
    def _population(self):
        from formloop.population import Population

        return Population(self.settings.store_path, busy_timeout_ms=self.settings.busy_timeout_ms)

    @staticmethod
    def _template(template: str, options: dict[str, str] | None):
        """A library name (with factory options) or a user template path/to/file.py:NAME."""
        from formloop.flow import Candidate
        from formloop.library import get_template
        from formloop.library.user import file_origin, library_origin, load_user_template

        if not isinstance(template, str) or not template:
            raise InvalidInput("template", template, "a library template name or path/to/file.py:NAME")
        if template.endswith(".py") or ".py:" in template:
            if options:
                raise InvalidInput("options", options, "none for a user template (its file fixes them)")
            return Candidate(load_user_template(template), file_origin(template))
        t = get_template(template, **(options or {}))
        return Candidate(t, library_origin(template, dict(t.options)))

    @staticmethod
    def _workload(op: str, shape: dict[str, int], dtype: str):
        from formloop.flow import WorkloadSpec

        if not isinstance(shape, dict) or not shape:
            raise InvalidInput("shape", shape, "an object of named extents, e.g. {\"M\": 64, \"N\": 64, \"K\": 64}")
        return WorkloadSpec(op, dict(shape), dtype)

    @staticmethod
    def _chip(chip: str):
        from formloop.hw.chips import get_chip

        return get_chip(chip)

    # -- tools -----------------------------------------------------------------------------------
    def list_templates(self) -> dict:
        """The library's templates and the population's stored templates with their proof status."""
        from formloop.library import get_template, template_names

        lib = [{"name": n, "hash": get_template(n).content_hash, "descriptor": dict(get_template(n).descriptor)}
               for n in template_names()]
        with self._population() as pop:
            stored = [r.as_dict() for r in pop.templates()]
        return {"library": lib, "population": stored}

    def show_template(self, template: str, options: dict[str, str] | None = None) -> dict:
        """One template's contract: decisions with menus, parameters, rules, cost, descriptor, hash."""
        t = self._template(template, options).template
        return {"name": t.name, "hash": t.content_hash, "doc": t.doc, "unit": t.unit, "options": dict(t.options),
                "decisions": [{"name": d.name, "menu": list(d.decision.menu), "side": d.decision.side,
                               "doc": d.decision.doc} for d in t.decisions],
                "params": [{"name": p.name, "kind": p.payload.kind, "doc": p.payload.doc} for p in t.params],
                "descriptor": dict(t.descriptor), "contract": t.canonical_text()}

    def prove(self, template: str, options: dict[str, str] | None = None) -> dict:
        """Prove K1-K3 for a template and store it with its certificate (proved, refuted or unresolved)."""
        from formloop.flow import admit, default_prover

        c = self._template(template, options)
        with self._population() as pop:
            status, note, seconds = admit(pop, c, default_prover(), self.settings.prove_timeout_s)
            cxs = pop.counterexamples(c.template.content_hash)
        return {"template": c.template.name, "hash": c.template.content_hash, "status": status, "note": note,
                "prove_seconds": seconds, "counterexamples": cxs}

    def solve(self, template: str, op: str, shape: dict[str, int], dtype: str = "fp32", chip: str = "illustrative",
              options: dict[str, str] | None = None, solver: str = "milp") -> dict:
        """Solve a template for one workload on one chip: the optimal design, its bound and gap."""
        from formloop.solve import SOLVERS

        if solver not in SOLVERS:
            raise InvalidInput("solver", solver, sorted(SOLVERS))
        t, w = self._template(template, options).template, self._workload(op, shape, dtype)
        sol = SOLVERS[solver](t.formulate(w.params, self._chip(chip)),
                              **({"time_limit": self.settings.solver_time_limit_s} if solver == "milp" else {}))
        return {"template": t.name, "workload": w.key, "chip": chip, "design": dict(sol.assignment),
                "objective": sol.objective, "unit": sol.unit, "source": "model", "bound": sol.bound, "gap": sol.gap,
                "status": sol.status.value, "solver": sol.solver, "seconds": sol.seconds, "terms": dict(sol.terms),
                "ties": sol.tie_count, "feasible": sol.feasible_count}

    def check(self, template: str, assignment: dict[str, float], op: str, shape: dict[str, int], dtype: str = "fp32",
              chip: str = "illustrative", options: dict[str, str] | None = None) -> dict:
        """Check one assignment against the template's scope, menus, constraints and preconditions."""
        from formloop.verify import check_instance

        t, w = self._template(template, options).template, self._workload(op, shape, dtype)
        r = check_instance(t, assignment, w.params, self._chip(chip))
        return {"template": t.name, "workload": w.key, "chip": chip, "valid": r.ok,
                "violations": [str(v) for v in r.violations], "seconds": r.seconds}

    def sol_report(self, op: str, shape: dict[str, int], dtype: str = "fp32", chip: str = "illustrative") -> dict:
        """Speed-of-light bound of an operator: FLOPs, minimum bytes, intensity, time floor."""
        from formloop.sol import sol_report

        return {"report": sol_report(op, shape, dtype, chip).as_dict(), "source": "sol"}

    def evaluate(self, template: str, assignment: dict[str, float], op: str, shape: dict[str, int],
                 dtype: str = "fp32", chip: str = "illustrative", options: dict[str, str] | None = None) -> dict:
        """Evaluate one design on the best tier available (model, emulated or gpu), labelled with it."""
        """Evaluate one design on the best tier available (model, emulated or gpu), labelled with it."""
        from formloop.flow import evaluator_for

        t, w = self._template(template, options).template, self._workload(op, shape, dtype)
        m = evaluator_for(self.settings.tier).evaluate(t, assignment, w.params, self._chip(chip))
        return {"template": t.name, "workload": w.key, "chip": chip, "measurement": m}

    def wall_relax(self, study: str, objective: str, start: str | None = None, coupled: bool = False,
                   k: int | None = None, rounds: int | None = None) -> dict:
        """Wall relaxation on a co-design study file: screen and price the walls that bind the best
        software, buy the best latency drop per mm2 under the area ceiling, repeat."""
        from formloop.codesign.study import load_study
        from formloop.codesign.walls import relax_walls

        s = load_study(study)
        if start is None:
            start = next(iter(s.starts))
        if start not in s.starts:
            raise InvalidInput("start", start, sorted(s.starts))
        if objective not in s.starts[start]:
            raise InvalidInput("objective", objective, sorted(s.starts[start]))
        lib = s.problem.library
        names = lib.open_components()
        r = relax_walls(s.problem, objective, s.starts[start][objective], k=k or s.k, rounds=rounds or s.rounds,
                        coupled=coupled, band=s.band)
        return {"study": s.name, "objective": objective, "start": r.start.label(names), "chip": r.chip.label(names),
                "chip_values": dict(r.chip.values), "area_mm2": r.chip.area, "ceiling_mm2": lib.ceiling_mm2,
                "L_model": r.L, "L_evaluated": r.evaluated,
                "units": {"L_model": "worst-scenario cycle ratio to the reference (model)",
                          "L_evaluated": "the same ratio on the study's evaluator (evaluated)"},
                "software": r.software,
                "purchases": [{"move": p.move, "before": p.before.label(names), "after": p.after.label(names),
                               "predicted_drop": p.predicted_drop, "evaluated_drop": p.evaluated_drop,
                               "added_mm2": p.added_mm2, "mechanism": list(p.mechanism)} for p in r.purchases],
                "calls": r.calls, "bound": r.bound, "inner_problems": r.inner_problems, "events": r.events}

    def population_query(self, kind: str = "templates", chip: str | None = None, workload: str | None = None,
                         template: str | None = None, status: str | None = None, tier: str | None = None) -> dict:
        """Query the population: templates, one template (with proofs), designs or measurements."""
        if kind not in QUERY_KINDS:
            raise InvalidInput("kind", kind, QUERY_KINDS)
        with self._population() as pop:
            if kind == "templates":
                rows = [r.as_dict() for r in pop.templates(name=template, status=status)]
            elif kind == "template":
                if not template:
                    raise InvalidInput("template", template, "a stored template hash or prefix")
                rec = pop.template(template)
                rows = [{**rec.as_dict(), "certificates": pop.certificates(rec.hash),
                         "counterexamples": pop.counterexamples(rec.hash)}]
            elif kind == "designs":
                rows = pop.designs(chip=chip, workload=workload, template=template)
            else:
                rows = pop.measurements(chip=chip, workload=workload, template=template, tier=tier)
            path = str(pop.path)
        return {"kind": kind, "store": path, "count": len(rows), "rows": rows}

    def add_template(self, spec: str) -> dict:
        """Prove a user template (path/to/file.py:NAME) and admit it to the population when K1-K3 hold."""
        if not isinstance(spec, str) or ".py:" not in spec:
            raise InvalidInput("spec", spec, "path/to/file.py:NAME")
        out = self.prove(spec)
        out["admitted"] = out["status"] == "proved"
        return out


def build_server(settings: Settings | None = None):
    """An MCP server exposing every tool of `Tools` (imports the SDK)."""
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x names the same server FastMCP
        from mcp.server.fastmcp import FastMCP as Server

    tools = Tools(settings)
    server = Server("formloop", instructions="Prove, solve, check and measure kernel templates; "
                    "every number names its unit and source (model, sol, solver, emulated, gpu).")
    for name in TOOL_NAMES:
        method = getattr(tools, name)
        server.add_tool(structured(method), name=name, structured_output=True, description=(method.__doc__ or name).strip().splitlines()[0])
    return server


def serve(settings: Settings | None = None) -> None:
    build_server(settings).run("stdio")
