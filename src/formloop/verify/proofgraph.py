"""The proof dependency graph: definitions, assumptions, statements and checked proofs.

Each node's key is a content hash over its kind, name and text, its premises' keys, the solver
and the checker version. A change anywhere upstream therefore changes the key of every node that
depends on it, directly or through others, and nothing else: incremental rechecking is a key
lookup. `check_graph` visits proof nodes in topological order, keeps a proof whose key is stored
as proved (node reuse), otherwise runs its task, which may in turn find its solver query stored as
UNSAT (query reuse). A proof is accepted only if every proof it rests on was accepted; unresolved
results are never reused as proofs; a cycle is refused with an error naming it.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import z3

from formloop.errors import InvalidInput, StructureError
from formloop.verify.outcome import ObligationResult, Verdict
from formloop.verify.proofstore import ProofStore, normalized_query, query_key

NODE_KINDS = ("definition", "assumption", "statement", "proof")
MODES = ("full", "node", "query")
_ROOTS = ("definition", "assumption")


class CycleError(StructureError):
    """The dependency graph has a cycle; `cycle` lists its node names in order."""

    def __init__(self, cycle: Iterable[str]):
        self.cycle = tuple(cycle)
        super().__init__(f"proof graph has a cycle: {' -> '.join(self.cycle)}",
                         fix="a node may not depend on itself, directly or through others")


@dataclass(frozen=True)
class Node:
    """One node. `text` is its canonical content; `premises` name the nodes it reads."""

    name: str
    kind: str
    text: str
    premises: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in NODE_KINDS:
            raise InvalidInput(f"kind of node {self.name}", self.kind, NODE_KINDS)
        if not self.name:
            raise StructureError("a proof-graph node needs a name")


class ProofGraph:
    """A DAG of nodes keyed by content; `solver` and `checker_version` enter every key."""

    def __init__(self, *, solver: str, checker_version: str):
        self.solver, self.checker_version = solver, checker_version
        self.nodes: dict[str, Node] = {}
        self._keys: dict[str, str] | None = None

    def add(self, node: Node) -> Node:
        prior = self.nodes.get(node.name)
        if prior is not None and prior != node:
            raise StructureError(f"proof-graph node {node.name} is declared twice with different content")
        self.nodes[node.name] = node
        self._keys = None
        return node

    def add_all(self, nodes: Iterable[Node]) -> None:
        for n in nodes:
            self.add(n)

    # -- order and keys -----------------------------------------------------------------------
    def topological_order(self) -> list[str]:
        """Names with every premise before its dependents; missing premises and cycles are errors."""
        for node in self.nodes.values():
            missing = [p for p in node.premises if p not in self.nodes]
            if missing:
                raise StructureError(f"node {node.name} rests on unknown nodes {missing}")
            kinds = {self.nodes[p].kind for p in node.premises}
            if node.kind in _ROOTS and kinds - set(_ROOTS):
                raise StructureError(f"{node.kind} {node.name} may rest only on definitions and assumptions")
            if node.kind == "proof" and "statement" not in kinds:
                raise StructureError(f"proof {node.name} names no statement it proves")
        order: list[str] = []
        state: dict[str, int] = {}  # 1 = on the stack, 2 = done
        for root in self.nodes:
            if state.get(root):
                continue
            stack: list[tuple[str, int]] = [(root, 0)]
            path: list[str] = []
            while stack:
                name, i = stack.pop()
                if i == 0:
                    state[name] = 1
                    path.append(name)
                premises = self.nodes[name].premises
                if i < len(premises):
                    stack.append((name, i + 1))
                    p = premises[i]
                    if state.get(p) == 1:
                        raise CycleError(path[path.index(p):] + [p])
                    if not state.get(p):
                        stack.append((p, 0))
                else:
                    state[name] = 2
                    path.pop()
                    order.append(name)
        return order

    def keys(self) -> dict[str, str]:
        if self._keys is None:
            keys: dict[str, str] = {}
            for name in self.topological_order():
                n = self.nodes[name]
                h = hashlib.sha256()
                for part in (n.kind, n.name, n.text, self.solver, self.checker_version, *(keys[p] for p in n.premises)):
                    h.update(part.encode())
                    h.update(b"\x00")
                keys[name] = h.hexdigest()
            self._keys = keys
        return self._keys

    def key(self, name: str) -> str:
        return self.keys()[name]

    def dependents(self, names: Iterable[str]) -> set[str]:
        """Every node that rests on any of `names`, directly or through others (names excluded)."""
        users: dict[str, list[str]] = {}
        for n in self.nodes.values():
            for p in n.premises:
                users.setdefault(p, []).append(n.name)
        seen: set[str] = set()
        todo = list(names)
        while todo:
            for u in users.get(todo.pop(), ()):
                if u not in seen:
                    seen.add(u)
                    todo.append(u)
        return seen

    def changed_since(self, old_keys: Mapping[str, str]) -> set[str]:
        """Nodes that are new or whose key differs from `old_keys` (a change and its dependents)."""
        return {name for name, k in self.keys().items() if old_keys.get(name) != k}

    def proof_premises(self, name: str) -> list[str]:
        """The proofs that proof node `name` rests on through its statement(s)."""
        out: list[str] = []
        for s in self.nodes[name].premises:
            for p in self.nodes[s].premises:
                if self.nodes[p].kind == "proof":
                    out.append(p)
        return out


class QueryLedger:
    """Counts solver queries (every `check()` is one) and, in query mode, serves stored UNSATs."""

    def __init__(self, *, store: ProofStore | None, solver_context: str, checker_version: str, reuse: bool):
        self.store, self.context, self.version, self.reuse = store, solver_context, checker_version, reuse
        self.queries = 0
        self.reused = 0

    def check(self, solver: z3.Solver) -> tuple[z3.CheckSatResult, bool]:
        """(result, whether it came from the store)."""
        key = None
        if self.reuse and self.store is not None:
            key = query_key(normalized_query(solver.assertions()), self.context, self.version)
            if self.store.has_unsat(key):
                self.reused += 1
                return z3.unsat, True
        self.queries += 1
        start = time.perf_counter()
        result = solver.check()
        if key is not None and result == z3.unsat:
            self.store.put_unsat(key, self.context, self.version, time.perf_counter() - start)
        return result, False


Task = Callable[[QueryLedger], ObligationResult]


@dataclass(frozen=True)
class NodeOutcome:
    name: str
    key: str
    result: ObligationResult
    reused: str = ""  # "", "node" or "query"


@dataclass
class GraphRun:
    mode: str
    outcomes: dict[str, NodeOutcome] = field(default_factory=dict)
    queries: int = 0
    reused_queries: int = 0
    seconds: float = 0.0

    @property
    def reused_nodes(self) -> list[str]:
        return [n for n, o in self.outcomes.items() if o.reused == "node"]

    @property
    def checked_nodes(self) -> list[str]:
        return [n for n, o in self.outcomes.items() if o.reused != "node"]


def check_graph(graph: ProofGraph, tasks: Mapping[str, Task], *, mode: str = "full",
                store: ProofStore | None = None, solver_context: str = "") -> GraphRun:
    """Check every proof node of `graph` in topological order under `mode` (full | node | query)."""
    if mode not in MODES:
        raise InvalidInput("mode", mode, MODES)
    if mode != "full" and store is None:
        raise InvalidInput("store", None, "a ProofStore", fix=f"mode {mode} reuses stored results")
    start = time.perf_counter()
    keys = graph.keys()
    order = graph.topological_order()
    missing = [n for n in order if graph.nodes[n].kind == "proof" and n not in tasks]
    if missing:
        raise StructureError(f"proof nodes without a checking task: {missing}")
    ledger = QueryLedger(store=store, solver_context=solver_context, checker_version=graph.checker_version,
                         reuse=mode == "query")
    run = GraphRun(mode)
    for name in order:
        if graph.nodes[name].kind != "proof":
            continue
        key = keys[name]
        blocked = [p for p in graph.proof_premises(name) if not run.outcomes[p].result.proved]
        if blocked:
            result = ObligationResult(name, Verdict.UNRESOLVED, 0.0, reason=f"rests on unproved {', '.join(blocked)}")
            run.outcomes[name] = NodeOutcome(name, key, result)
            continue
        if mode != "full":
            kept = store.proved(key)  # type: ignore[union-attr]
            if kept is not None:
                run.outcomes[name] = NodeOutcome(name, key, kept, "node")
                continue
        before = ledger.reused
        result = tasks[name](ledger)
        reused = "query" if ledger.reused > before and result.proved and result.details.get("queries", 1) == 0 else ""
        run.outcomes[name] = NodeOutcome(name, key, result, reused)
        if store is not None:
            store.put_result(key, name, result, graph.checker_version)
    if store is not None:
        store.put_nodes((keys[n.name], n.name, n.kind, n.text, tuple(keys[p] for p in n.premises))
                        for n in graph.nodes.values())
        store.commit()
    run.queries, run.reused_queries = ledger.queries, ledger.reused
    run.seconds = time.perf_counter() - start
    return run
