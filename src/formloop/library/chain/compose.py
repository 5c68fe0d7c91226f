"""The five-step GEMM chain composed (Theorem 1 of seed 000), checked through the proof graph.

A chain certificate is the list of local certificates (every obligation of every step, per shape)
plus the side conditions of the composition theorem: every step maps feasible designs to feasible
designs; every environment assumption a step makes is guaranteed by a step below it in the chain or
declared as an assumption of the whole result (arbitration is declared where it is assumed); and
the coarse execution (a finite sum) terminates. Checking runs through `formloop.verify.proofgraph`
in one of three modes: full (recheck everything), node (reuse stored proofs whose keys did not
change) and query (node reuse plus stored UNSAT queries).
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from formloop.library.chain import double_buffer, partition, resources, storage, transfer
from formloop.verify.local import Obligation, Revision, Step, check_obligation, scope_obligation
from formloop.errors import InvalidInput, UnknownName
from formloop.verify.outcome import ObligationResult, Verdict, z3_solver_name
from formloop.verify.proofgraph import GraphRun, Node, ProofGraph, check_graph
from formloop.verify.proofstore import ProofStore

CHAINS = ("gemm",)
STEPS: dict[int, Step] = {s.number: s for s in (partition.STEP, storage.STEP, transfer.STEP,
                                                 double_buffer.STEP, resources.STEP)}
CHECKER_VERSION = "formloop.chain/1"
DEFAULT_SHAPES = (3, 4)
SHAPE_RANGE = range(2, 13)
WORKLOAD = "Y[i,j] = sum over k < K of A[i,k]*B[k,j], for all i < M, j < N (exact arithmetic reference)"
ASSUMPTIONS = {
    "atomic_landing": "a copy engine makes a tile's words visible all at once, at its completion",
    "loads_land_before_barrier": "a leading barrier returns only after the loads issued before it have landed",
    "arbitration": "every non-empty bank queue is granted within A cycles (declared arbitration bound)",
}


@dataclass(frozen=True)
class ChainConfig:
    """What is checked: depth (steps 1..depth), bounded shapes, per-step revisions, and the
    environment assumptions declared for the whole result (None: every assumption that no lower
    step of the prefix guarantees)."""

    depth: int = 5
    shapes: tuple[int, ...] = DEFAULT_SHAPES
    revisions: Mapping[int, Revision] = field(default_factory=dict)
    declared: tuple[str, ...] | None = None
    assumption_text: Mapping[str, str] = field(default_factory=lambda: dict(ASSUMPTIONS))

    def __post_init__(self) -> None:
        if not isinstance(self.depth, int) or self.depth not in STEPS:
            raise InvalidInput("depth", self.depth, sorted(STEPS))
        if not self.shapes or any(not isinstance(n, int) or n not in SHAPE_RANGE for n in self.shapes):
            raise InvalidInput("shapes", self.shapes,
                               f"one or more whole numbers in {SHAPE_RANGE.start}..{SHAPE_RANGE.stop - 1}")
        if len(set(self.shapes)) != len(self.shapes):
            raise InvalidInput("shapes", self.shapes, "distinct values")
        for k, rev in self.revisions.items():
            if k not in STEPS:
                raise InvalidInput("revised step", k, sorted(STEPS))
            STEPS[k].check_revision(rev)
        for name in self.declared or ():
            if name not in self.assumption_text:
                raise UnknownName("declared assumption", name, sorted(self.assumption_text))

    def revision(self, k: int) -> Revision:
        return self.revisions.get(k, Revision())

    def declared_assumptions(self) -> tuple[str, ...]:
        if self.declared is not None:
            return tuple(self.declared)
        return tuple(a for k in range(1, self.depth + 1) for a in STEPS[k].assumes
                     if _guarantor(a, k, self.depth) is None)


def _guarantor(assumption: str, step: int, depth: int) -> int | None:
    return next((j for j in range(step + 1, depth + 1) if assumption in STEPS[j].guarantees), None)


def parse_fault(text: str) -> tuple[int, str]:
    """'STEP:NAME' (e.g. '4:wrong_generation') as (step, fault name), checked against the catalogue."""
    step_text, sep, name = text.partition(":")
    catalogue = [f"{k}:{f}" for k, s in STEPS.items() for f in s.faults]
    if not sep or not step_text.strip().isdigit() or int(step_text) not in STEPS:
        raise InvalidInput("fault", text, catalogue)
    k = int(step_text)
    if name not in STEPS[k].faults:
        raise UnknownName(f"fault of step {k}", name, catalogue)
    return k, name


def with_fault(config: ChainConfig, fault: str | None) -> ChainConfig:
    if fault is None:
        return config
    k, name = parse_fault(fault)
    if k > config.depth:
        raise InvalidInput("fault step", k, f"a step within the depth 1..{config.depth}")
    revs = dict(config.revisions)
    old = config.revision(k)
    revs[k] = Revision(old.program, old.cost, old.premise, name)
    return ChainConfig(config.depth, config.shapes, revs, config.declared, config.assumption_text)


# -- building the graph ------------------------------------------------------------------------------

@dataclass
class ChainBuild:
    config: ChainConfig
    graph: ProofGraph
    tasks: dict
    obligations: dict[str, Obligation]
    step_proofs: dict[int, list[str]]
    side_proofs: list[str]
    compose: str


def _prefix(k: int, n: int | None) -> str:
    return f"step{k}" if n is None else f"step{k}@n{n}"


def _structural(name: str, ok: bool, reason: str) -> ObligationResult:
    return ObligationResult(name, Verdict.PROVED if ok else Verdict.UNRESOLVED, 0.0, "structural",
                            reason="" if ok else reason, details={"queries": 0, "structural": reason if ok else ""})


def build_chain(config: ChainConfig, *, checker_version: str = CHECKER_VERSION, solver: str | None = None
                ) -> ChainBuild:
    g = ProofGraph(solver=solver or z3_solver_name(), checker_version=checker_version)
    g.add(Node("workload.contract", "definition", WORKLOAD))
    for a, text in config.assumption_text.items():
        g.add(Node(f"assume.{a}", "assumption", text))
    tasks: dict = {}
    obligations: dict[str, Obligation] = {}
    step_proofs: dict[int, list[str]] = {}
    revs = {k: config.revision(k) for k in STEPS}
    templates: dict[tuple[int, int | None], Any] = {}
    for k in range(1, config.depth + 1):
        step = STEPS[k]
        step_proofs[k] = []
        for n in (config.shapes if step.shaped else (None,)):
            lm = step.model(n if n is not None else 0, revs)
            templates[k, n] = lm.template
            g.add_all(lm.nodes)
            for ob in lm.obligations:
                g.add(Node(ob.node, "statement", f"[{ob.condition}] {ob.statement}", ob.premises))
                proof = f"proof:{ob.node}"
                g.add(Node(proof, "proof", "z3 validity check, witness replayed by the step interpreter", (ob.node,)))
                tasks[proof] = (lambda o: lambda ledger: check_obligation(o, ledger))(ob)
                obligations[proof] = ob
                step_proofs[k].append(proof)
    side: list[str] = []
    for k in range(2, config.depth + 1):
        name = f"side.step{k}.feasible"
        feas = [p for p in step_proofs[k] if obligations[p].condition == "feasibility"]
        fine = [templates[key] for key in templates if key[0] == k]
        coarse = [templates[key] for key in templates if key[0] == k - 1]
        if feas:
            g.add(Node(name, "statement", f"pi of step {k} maps feasible designs to feasible designs (per shape)",
                       tuple(feas)))
            tasks[f"proof:{name}"] = (lambda nm: lambda ledger: _structural(
                nm, True, "follows from the feasibility proofs"))(name)
        else:
            shared = {d for t in fine for d in t.decision_names} & {d for t in coarse for d in t.decision_names}
            prem = tuple(n.name for n in g.nodes.values() if n.name.endswith(".decisions")
                         and (n.name.startswith(f"step{k}") or n.name.startswith(f"step{k - 1}")))
            g.add(Node(name, "statement", f"step {k} adds decisions disjoint from level {k - 1}; the coarse design is "
                                          "carried unchanged, so feasibility is preserved", prem))
            tasks[f"proof:{name}"] = (lambda nm, s: lambda ledger: _structural(
                nm, not s, f"steps share decisions {sorted(s)} but give no backward map"))(name, shared)
        side.append(name)
    for k in range(2, config.depth + 1):
        for n in (config.shapes if STEPS[k].shaped else (None,)):
            fine, coarse = templates[k, n], templates.get((k - 1, n), templates.get((k - 1, None)))
            if not {p.name for p in fine.params} & set(coarse.decision_names):
                continue  # the fine step does not read the coarse design as parameters
            ob = scope_obligation(k, fine, coarse, _prefix(k - 1, n), _prefix(k, n), n)
            name = f"side.{ob.node}"
            g.add(Node(name, "statement", f"[side] {ob.statement}", ob.premises))
            tasks[f"proof:{name}"] = (lambda o: lambda ledger: check_obligation(o, ledger))(ob)
            side.append(name)
    declared = config.declared_assumptions()
    g.add(Node("chain.declared", "definition", f"assumptions of the whole result: {list(declared)}"))
    env_lines, missing = [], []
    for k in range(1, config.depth + 1):
        for a in STEPS[k].assumes:
            j = _guarantor(a, k, config.depth)
            env_lines.append(f"step {k} assumes {a}: " + (f"guaranteed by step {j}" if j else
                                                           "declared" if a in declared else "NEITHER"))
            if j is None and a not in declared:
                missing.append(f"step {k} assumes {a}, which no lower step guarantees and the result does not declare")
    g.add(Node("side.environment", "statement", "\n".join(env_lines) or "no environment assumptions",
               ("chain.declared", *(f"assume.{a}" for a in config.assumption_text))))
    tasks["proof:side.environment"] = lambda ledger: _structural("side.environment", not missing, "; ".join(missing))
    g.add(Node("side.termination", "statement", "every maximal coarse execution terminates (a finite sum)",
               ("workload.contract",)))
    tasks["proof:side.termination"] = lambda ledger: _structural("side.termination", True, "")
    side += ["side.environment", "side.termination"]
    for s in side:
        g.add(Node(f"proof:{s}", "proof", "structural check", (s,)))
    compose = f"chain.compose@d{config.depth}"
    premises = [p for k in step_proofs for p in step_proofs[k]] + [f"proof:{s}" for s in side]
    g.add(Node(compose, "statement", f"Theorem 1: every design allowed at level {config.depth} computes Y = AB "
                                     f"under {list(declared)}", tuple(premises)))
    g.add(Node(f"proof:{compose}", "proof", "composition of accepted local proofs and side conditions", (compose,)))
    tasks[f"proof:{compose}"] = lambda ledger: _structural(compose, True, "")
    return ChainBuild(config, g, tasks, obligations, step_proofs, [f"proof:{s}" for s in side], f"proof:{compose}")


# -- checking and reporting ----------------------------------------------------------------------------

@dataclass
class ChainReport:
    config: ChainConfig
    mode: str
    run: GraphRun
    build: ChainBuild
    seconds: float
    store: str | None

    def step_verdict(self, k: int) -> Verdict:
        return _fold([self.run.outcomes[p].result.verdict for p in self.build.step_proofs[k]])

    @property
    def verdict(self) -> Verdict:
        if self.run.outcomes[self.build.compose].result.proved:
            return Verdict.PROVED
        steps = [self.step_verdict(k) for k in self.build.step_proofs]
        return Verdict.COUNTEREXAMPLE if Verdict.COUNTEREXAMPLE in steps else Verdict.UNRESOLVED

    def classification(self) -> dict[str, str]:
        """Verdict per proof node (what must agree across modes)."""
        return {n: o.result.verdict.value for n, o in self.run.outcomes.items()}

    def certificate(self) -> dict:
        g = self.build.graph
        keys = g.keys()
        local = {str(k): [{"obligation": p.removeprefix("proof:"), "key": keys[p],
                           "verdict": self.run.outcomes[p].result.verdict.value} for p in ps]
                 for k, ps in self.build.step_proofs.items()}
        side = [{"condition": p.removeprefix("proof:"), "key": keys[p],
                 "verdict": self.run.outcomes[p].result.verdict.value,
                 "reason": self.run.outcomes[p].result.reason} for p in self.build.side_proofs]
        compose = self.run.outcomes[self.build.compose].result.verdict.value
        return {"chain": "gemm", "config": config_dict(self.config), "solver": g.solver,
                "checker_version": g.checker_version,
                "local": local, "side_conditions": side,
                "compose": {"key": keys[self.build.compose], "verdict": compose},
                "assumptions": list(self.config.declared_assumptions())}

    def as_dict(self) -> dict:
        steps = []
        for k, proofs in self.build.step_proofs.items():
            outs = [self.run.outcomes[p] for p in proofs]
            steps.append({
                "step": k, "name": STEPS[k].name, "verdict": self.step_verdict(k).value,
                "obligations": len(outs), "proved": sum(o.result.proved for o in outs),
                "queries": sum(o.result.details.get("queries", 0) for o in outs if o.reused != "node"),
                "reused_nodes": sum(o.reused == "node" for o in outs),
                "reused_queries": sum(o.reused == "query" for o in outs),
                "fault": self.config.revision(k).fault,
                "counterexamples": [{"obligation": o.name.removeprefix("proof:"), "witness": o.result.witness,
                                     "trace": list(o.result.trace), "replay": o.result.replay}
                                    for o in outs if o.result.verdict is Verdict.COUNTEREXAMPLE],
                "unresolved": [{"obligation": o.name.removeprefix("proof:"), "reason": o.result.reason}
                               for o in outs if o.result.verdict is Verdict.UNRESOLVED],
            })
        side = [{"condition": p.removeprefix("proof:"), "verdict": self.run.outcomes[p].result.verdict.value,
                 "reason": self.run.outcomes[p].result.reason} for p in self.build.side_proofs]
        return {
            "chain": "gemm", "depth": self.config.depth, "mode": self.mode, "shapes": list(self.config.shapes),
            "verdict": self.verdict.value, "queries": self.run.queries, "reused_queries": self.run.reused_queries,
            "seconds": self.seconds, "check_seconds": self.run.seconds,
            "nodes": {"total": len(self.build.graph.nodes), "proofs": len(self.run.outcomes),
                      "reused": len(self.run.reused_nodes), "checked": len(self.run.checked_nodes)},
            "steps": steps, "side_conditions": side, "assumptions": list(self.config.declared_assumptions()),
            "solver": self.build.graph.solver, "checker_version": self.build.graph.checker_version,
            "store": self.store, "source": "z3 on bounded models, counterexamples replayed by step interpreters",
        }


def _fold(verdicts: list[Verdict]) -> Verdict:
    if Verdict.COUNTEREXAMPLE in verdicts:
        return Verdict.COUNTEREXAMPLE
    return Verdict.PROVED if all(v is Verdict.PROVED for v in verdicts) else Verdict.UNRESOLVED


def config_dict(c: ChainConfig) -> dict:
    return {"depth": c.depth, "shapes": list(c.shapes),
            "revisions": {str(k): {"program": r.program, "cost": r.cost, "premise": r.premise, "fault": r.fault}
                          for k, r in sorted(c.revisions.items())},
            "declared": None if c.declared is None else list(c.declared),
            "assumption_text": dict(c.assumption_text)}


def config_from_dict(d: Mapping) -> ChainConfig:
    revs = {int(k): Revision(**v) for k, v in d.get("revisions", {}).items()}
    declared = d.get("declared")
    return ChainConfig(int(d["depth"]), tuple(d["shapes"]), revs, None if declared is None else tuple(declared),
                       dict(d.get("assumption_text", ASSUMPTIONS)))


def prove_chain(config: ChainConfig, *, mode: str = "full", store: ProofStore | None = None,
                checker_version: str = CHECKER_VERSION, solver_context: str | None = None) -> ChainReport:
    """Build the chain's proof graph and check it; `store` is read in node/query mode and written always."""
    start = time.perf_counter()
    build = build_chain(config, checker_version=checker_version)
    context = solver_context if solver_context is not None else f"{z3_solver_name()}; timeout_ms=20000"
    run = check_graph(build.graph, build.tasks, mode=mode, store=store, solver_context=context)
    return ChainReport(config, mode, run, build, time.perf_counter() - start,
                       None if store is None else str(store.path))


def recheck_certificate(cert: Mapping) -> list[str]:
    """Problems with a chain certificate: it must name the graph its config rebuilds (same keys for
    the same solver and checker version), every local obligation and side condition proved."""
    problems: list[str] = []
    build = build_chain(config_from_dict(cert["config"]), checker_version=cert["checker_version"],
                        solver=cert["solver"])
    keys = build.graph.keys()
    listed = {e["obligation"]: e for entries in cert["local"].values() for e in entries}
    for k, proofs in build.step_proofs.items():
        for p in proofs:
            entry = listed.get(p.removeprefix("proof:"))
            if entry is None:
                problems.append(f"step {k}: obligation {p} is missing from the certificate")
            elif entry["key"] != keys[p]:
                problems.append(f"step {k}: {p} was proved for different content (key mismatch)")
            elif entry["verdict"] != Verdict.PROVED.value:
                problems.append(f"step {k}: {p} is {entry['verdict']}")
    for s in cert["side_conditions"]:
        if s["verdict"] != Verdict.PROVED.value:
            problems.append(f"side condition {s['condition']} is {s['verdict']}: {s['reason']}")
        elif keys.get(f"proof:{s['condition']}") != s["key"]:
            problems.append(f"side condition {s['condition']}: key mismatch")
    if cert["compose"]["key"] != keys[build.compose] or cert["compose"]["verdict"] != Verdict.PROVED.value:
        problems.append("the composition node does not match or is not proved")
    return problems

