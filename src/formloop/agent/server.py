"""The MCP server: formloop's user actions as tools, one tool per `formloop.api` function, over stdio.

Every tool returns the api function's JSON object with `ok` added; the CLI twin of each tool
(`CLI_TWINS`) prints the same object with --json. On bad input or a failed step a tool returns
`{"ok": false, "error": {"type", "message", "field", "allowed", "fix"}}`; the server itself never
raises out of a tool, so one bad call does not end the session. The server wraps each tool with
`formloop.agent.guard.guarded`: file arguments only from the configured roots, the call in a child
process under a time limit, strict JSON (see that module). The tool functions are plain
Python (callable and testable without the SDK); only `build_server` imports `mcp`."""
from __future__ import annotations

import functools
import inspect
import traceback
from collections.abc import Callable
from typing import Any

from formloop import api
from formloop.api import population as api_population
from formloop.errors import FormloopError
from formloop.settings import Settings, load_settings

TOOL_NAMES = ("list_templates", "show_template", "prove", "solve", "check", "sol_report", "evaluate", "measure",
              "run", "prove_chain", "wall_relax", "population_query", "add_template", "dsl_check", "dsl_run",
              "optimize_status", "optimize_submit")
CLI_TWINS = {
    "list_templates": "templates --json", "show_template": "show TEMPLATE --json",
    "prove": "population add TEMPLATE --json", "solve": "solve TEMPLATE --shape ... --json",
    "check": "check TEMPLATE --design ... --shape ... --json", "sol_report": "sol OP --shape ... --json",
    "evaluate": "evaluate TEMPLATE --design ... --shape ... --json", "measure": "measure TEMPLATE --shape ... --json",
    "run": "run WORKLOAD --shape ... --json", "prove_chain": "prove-chain CHAIN --json",
    "wall_relax": "wall-relax STUDY --objective ... --json", "population_query": "population query --kind ...",
    "add_template": "population add SPEC --json", "dsl_check": "dsl check FILE --json",
    "dsl_run": "dsl run FILE --json",
    "optimize_status": "optimize-status PROBLEM --out DIR --json",
    "optimize_submit": "optimize-submit PROBLEM --candidate FILE|--spec FILE --out DIR --json",
}
"""The CLI command that answers as each tool does (the parity test runs both)."""
QUERY_KINDS = api_population.QUERY_KINDS


def structured(fn: Callable[..., dict]) -> Callable[..., dict]:
    """Turn any failure into a structured result; formloop errors keep their field and fix."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs) -> dict[str, Any]:
        try:
            return {"ok": True, **fn(*args, **kwargs)}
        except FormloopError as exc:
            return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc),
                                           "field": getattr(exc, "field", None),
                                           "allowed": getattr(exc, "allowed", None), "fix": exc.fix}}
        except BaseException as exc:  # noqa: BLE001 - a bug, exit or interrupt, reported as data
            return {"ok": False, "error": {"type": "InternalError", "message": f"{type(exc).__name__}: {exc}",
                                           "field": None, "allowed": None, "fix": None,
                                           "traceback": traceback.format_exc(limit=6)}}
    # The SDK derives the output schema from the return annotation: an object with any keys.
    wrapper.__signature__ = inspect.signature(fn).replace(return_annotation=dict[str, Any])
    return wrapper


class Tools:
    """The tools, bound to one store and one set of settings (tier, time limits)."""

    def __init__(self, settings: Settings | None = None):
        self.settings = settings or load_settings()

    def list_templates(self) -> dict:
        """The library's templates and the population's stored templates with their proof status."""
        return api.list_templates(settings=self.settings)

    def show_template(self, template: str, options: dict[str, str] | None = None) -> dict:
        """One template's contract: decisions with menus, parameters, rules, cost, descriptor, hash."""
        return api.show_template(template, options)

    def prove(self, template: str, options: dict[str, str] | None = None) -> dict:
        """Prove K1-K3 for a template and store it with its certificate (proved, refuted or unresolved)."""
        return api.admit_template(template, options, settings=self.settings)

    def solve(self, template: str, shape: dict[str, int] | str, op: str | None = None, dtype: str | None = None,
              chip: str | None = None, options: dict[str, str] | None = None, solver: str = "milp",
              calibration: str | None = None) -> dict:
        """Solve a template for one workload on one chip: the optimal design, its bound and gap
        (gemm-tiling on h200/h100 is solved under the Triton family's contract; attention-decode and
        attention-prefill take the shape B,Hq,Hkv,D,L[,page=P][,causal=0|1]). dtype and chip default
        to the template's own (fp32 on the illustrative chip; bf16 on h200 for the Triton families)."""
        return api.solve(template, shape, op=op, dtype=dtype, chip=chip, options=options, solver=solver,
                         calibration=calibration, settings=self.settings)

    def check(self, template: str, assignment: dict[str, float] | str, shape: dict[str, int] | str,
              op: str | None = None, dtype: str | None = None, chip: str | None = None,
              options: dict[str, str] | None = None) -> dict:
        """Check one assignment against the template's scope, menus, constraints and preconditions."""
        return api.check(template, assignment, shape, op=op, dtype=dtype, chip=chip, options=options)

    def sol_report(self, op: str | None = None, shape: dict[str, Any] | str | None = None, dtype: str | None = None,
                   chip: str = "h100", clock_mhz: float | None = None, precision: str | None = None,
                   problem: str | None = None) -> dict:
        """Speed-of-light bound of an operator (or a problem file): FLOPs, minimum bytes, intensity, time floor."""
        return api.sol_report(op, shape, dtype=dtype, chip=chip, clock_mhz=clock_mhz, precision=precision,
                              problem=problem)

    def evaluate(self, template: str, assignment: dict[str, float] | str, shape: dict[str, int] | str,
                 op: str | None = None, dtype: str | None = None, chip: str | None = None,
                 options: dict[str, str] | None = None, tier: str | None = None) -> dict:
        """Evaluate one design on a tier (default: the server's; auto is the best available), labelled with it."""
        return api.evaluate(template, assignment, shape, op=op, dtype=dtype, chip=chip, options=options, tier=tier,
                            settings=self.settings)

    def measure(self, template: str, shape: dict[str, int] | str, chip: str | None = None, dtype: str | None = None,
                solver: str = "milp", calibration: str | None = None) -> dict:
        """Solve a Triton family's contract (gemm-tiling, attention-decode, attention-prefill) and measure the
        pick (gpu tier on a CUDA device, else model); dtype and chip default to the family's (bf16, h200)."""
        return api.measure(template, shape, chip=chip, dtype=dtype, solver=solver, calibration=calibration,
                           settings=self.settings)

    def run(self, workload: str, shapes: list[str] | None = None, dtype: str = "fp32", chip: str = "illustrative",
            templates: list[str] | None = None) -> dict:
        """The loop: draw covering templates, prove or reuse, solve, check, evaluate, store and report."""
        return api.run(workload, shapes or (), dtype=dtype, chip=chip, templates=templates or (),
                       settings=self.settings)

    def prove_chain(self, chain: str = "gemm", depth: int = 5, mode: str = "full", fault: str | None = None,
                    shapes: str = "3,4", store: str | None = None) -> dict:
        """Prove the five-step GEMM refinement chain and compose the local proofs (node/query modes reuse them)."""
        return api.prove_chain(chain, depth=depth, mode=mode, fault=fault, shapes=shapes, store=store)

    def wall_relax(self, study: str, objective: str, start: str | None = None, coupled: bool = False,
                   k: int | None = None, rounds: int | None = None) -> dict:
        """Wall relaxation on a co-design study file: screen and price the walls that bind the best
        software, buy the best latency drop per mm2 under the area ceiling, repeat."""
        return api.wall_relax(study, objective, start=start, coupled=coupled, k=k, rounds=rounds)

    def population_query(self, kind: str = "templates", chip: str | None = None, workload: str | None = None,
                         template: str | None = None, status: str | None = None, tier: str | None = None) -> dict:
        """Query the population: templates, one template (with proofs), designs or measurements."""
        return api.population_query(kind, chip=chip, workload=workload, template=template, status=status, tier=tier,
                                    settings=self.settings)

    def add_template(self, spec: str) -> dict:
        """Prove a user template (path/to/file.py:NAME) and admit it to the population when K1-K3 hold."""
        return api.add_template(spec, settings=self.settings)

    def dsl_check(self, spec: str | None = None, path: str | None = None, shape: str | None = None,
                  solver: str = "milp", calibration: str | None = None) -> dict:
        """Validate a kernel spec (its text, or a file); with a shape, solve its open fields (MILP) and
        check the instance against the proved template. A refused spec lists every broken rule."""
        return api.dsl_check(spec, path=path, shape=shape, calibration=calibration, solver=solver)

    def dsl_run(self, spec: str | None = None, path: str | None = None, shape: str | None = None,
                solver: str = "milp", calibration: str | None = None, timing: bool = True) -> dict:
        """Run a kernel spec: correctness against the torch reference, then timing on a GPU (else the
        Triton interpreter at a reduced shape, labelled)."""
        return api.dsl_run(spec, path=path, shape=shape, calibration=calibration, solver=solver, timing=timing)

    def optimize_status(self, problem: str, out: str, chip: str = "h200", store: str | None = None,
                        dtype: str = "fp32", small: bool = False) -> dict:
        """A problem file's SOL report (model) and its optimize campaign record (in the population
        `store`, campaign of `dtype` and sizes): the best verified candidate and every attempt's verdict."""
        return api.optimize_status(problem, out=out, chip=chip, store=store or str(self.settings.store_path),
                                   dtype=dtype, small=small)

    def optimize_submit(self, problem: str, out: str, source: str | None = None, spec: str | None = None,
                        small: bool = False, tier: str = "auto", store: str | None = None, dtype: str = "fp32") -> dict:
        """Submit a candidate for a problem file: a Triton ModelNew (`source`) or a kernel spec (`spec`)
        for its GEMM regions. Checked, measured and stored exactly as formloop's own (same harness,
        same integrity battery, sandboxed); it counts only if correct and integrity-accepted."""
        return api.optimize_submit(problem, out=out, source=source, spec=spec, small=small, tier=tier,
                                   store=store or str(self.settings.store_path), dtype=dtype)


def build_server(settings: Settings | None = None):
    """An MCP server exposing every tool of `Tools` (imports the SDK)."""
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x names the same server FastMCP
        from mcp.server.fastmcp import FastMCP as Server

    from formloop.agent.guard import guarded
    from formloop.measure import sandbox

    if "formloop.agent.server" not in sandbox.PRELOAD:  # tool children start with formloop.api imported
        sandbox.PRELOAD.append("formloop.agent.server")
    tools = Tools(settings)
    server = Server("formloop", instructions="Prove, solve, check and measure kernel templates; "
                    "every number names its unit and source (model, sol, solver, emulated, gpu).")
    for name in TOOL_NAMES:
        method = getattr(tools, name)
        server.add_tool(guarded(tools.settings, name, method), name=name, structured_output=True,
                        description=(method.__doc__ or name).strip().splitlines()[0])
    return server


def serve(settings: Settings | None = None) -> None:
    build_server(settings).run("stdio")
