"""Proof graph and proof store: content keys, cycles, cache safety, node and query reuse, the
constraint-strengthening corollary, and agreement of classifications across modes."""
from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import z3

from formloop.library.chain import double_buffer
from formloop.library.chain.compose import ChainConfig, prove_chain
from formloop.verify.local import Revision
from formloop.errors import StructureError
from formloop.verify.outcome import ObligationResult, Verdict
from formloop.verify.proofgraph import CycleError, Node, ProofGraph, QueryLedger, check_graph
from formloop.verify.proofstore import ProofStore

ROOT = Path(__file__).resolve().parents[1]


def small_graph(text_a="a = 1", version="v1", solver="z3 x") -> ProofGraph:
    g = ProofGraph(solver=solver, checker_version=version)
    g.add(Node("def.a", "definition", text_a))
    g.add(Node("def.b", "definition", "b = 2"))
    g.add(Node("stmt.a", "statement", "a > 0", ("def.a",)))
    g.add(Node("stmt.b", "statement", "b > 0", ("def.b",)))
    g.add(Node("proof.a", "proof", "check", ("stmt.a",)))
    g.add(Node("proof.b", "proof", "check", ("stmt.b",)))
    g.add(Node("stmt.ab", "statement", "a + b > 0", ("proof.a", "proof.b")))
    g.add(Node("proof.ab", "proof", "check", ("stmt.ab",)))
    return g


def test_keys_change_exactly_for_a_changed_premise_and_its_dependents():
    base = small_graph().keys()
    edited = small_graph(text_a="a = 3")
    assert edited.changed_since(base) == {"def.a", "stmt.a", "proof.a", "stmt.ab", "proof.ab"}
    assert edited.changed_since(base) == {"def.a"} | edited.dependents(["def.a"])
    assert small_graph(version="v2").changed_since(base) == set(base)
    assert small_graph(solver="z3 y").changed_since(base) == set(base)


def test_cycles_and_dangling_premises_are_refused():
    g = small_graph()
    g.add(Node("stmt.loop", "statement", "x", ("proof.loop",)))
    g.add(Node("proof.loop", "proof", "check", ("stmt.loop",)))
    with pytest.raises(CycleError) as err:
        g.keys()
    assert "stmt.loop" in str(err.value) and "proof.loop" in str(err.value)
    h = small_graph()
    h.add(Node("stmt.x", "statement", "x", ("def.missing",)))
    with pytest.raises(StructureError):
        h.topological_order()
    k = small_graph()
    k.add(Node("proof.bare", "proof", "check", ("def.a",)))
    with pytest.raises(StructureError):
        k.topological_order()
    with pytest.raises(StructureError):
        small_graph().add(Node("def.a", "definition", "a = 9"))


def _tasks(verdicts: dict, calls: list):
    def make(name):
        def task(ledger):
            calls.append(name)
            return ObligationResult(name, verdicts.get(name, Verdict.PROVED), 0.0)
        return task
    return {n: make(n) for n in ("proof.a", "proof.b", "proof.ab")}


def test_unresolved_is_never_reused_and_blocks_its_dependents(tmp_path):
    store = ProofStore(tmp_path / "s.sqlite")
    calls: list = []
    run = check_graph(small_graph(), _tasks({"proof.b": Verdict.UNRESOLVED}, calls), mode="node", store=store)
    assert run.outcomes["proof.ab"].result.verdict is Verdict.UNRESOLVED
    assert "proof.ab" not in calls  # a proof is accepted only on accepted premises
    calls.clear()
    run = check_graph(small_graph(), _tasks({}, calls), mode="node", store=store)
    assert calls == ["proof.b", "proof.ab"]  # proof.a reused; the unresolved proof.b rechecked
    assert run.reused_nodes == ["proof.a"]
    assert store.proved(run.outcomes["proof.ab"].key) is not None
    calls.clear()
    check_graph(small_graph(), _tasks({}, calls), mode="full", store=store)
    assert calls == ["proof.a", "proof.b", "proof.ab"]


def _solver():
    x = z3.Int("x")
    s = z3.Solver()
    s.add(x > 2, x < 1)
    return s


def test_query_reuse_is_keyed_by_text_solver_context_and_checker_version(tmp_path):
    store = ProofStore(tmp_path / "q.sqlite")
    ledger = QueryLedger(store=store, solver_context="ctx", checker_version="v1", reuse=True)
    assert ledger.check(_solver()) == (z3.unsat, False)
    assert ledger.check(_solver()) == (z3.unsat, True)
    assert (ledger.queries, ledger.reused) == (1, 1)
    for ctx, ver in (("ctx2", "v1"), ("ctx", "v2")):
        other = QueryLedger(store=store, solver_context=ctx, checker_version=ver, reuse=True)
        assert other.check(_solver()) == (z3.unsat, False)
    sat = z3.Solver()
    sat.add(z3.Int("x") > 2)
    ledger.check(sat)
    assert ledger.check(sat) == (z3.sat, False)  # only UNSAT answers are ever stored


def test_progressive_depth_five_issues_at_least_three_times_fewer_queries(tmp_path):
    full = prove_chain(ChainConfig(depth=5))
    with ProofStore(tmp_path / "p.sqlite") as store:
        prove_chain(ChainConfig(depth=4), mode="node", store=store)
        progressive = prove_chain(ChainConfig(depth=5), mode="node", store=store)
    assert full.verdict is progressive.verdict is Verdict.PROVED
    assert full.run.queries >= 3 * progressive.run.queries
    assert progressive.classification() == full.classification()


def test_checker_version_solver_context_and_premises_invalidate_cached_results(tmp_path):
    cfg = ChainConfig(depth=3, shapes=(3,))
    with ProofStore(tmp_path / "c.sqlite") as store:
        first = prove_chain(cfg, mode="query", store=store)
        assert prove_chain(cfg, mode="node", store=store).run.queries == 0
        bumped = prove_chain(cfg, mode="node", store=store, checker_version="formloop.chain/2")
        assert bumped.run.reused_nodes == [] and bumped.run.queries == first.run.queries
        # A program edit that leaves the step-3 queries unchanged: node reuse rechecks the step,
        # query reuse finds its UNSAT answers, unless the solver context differs.
        edited = replace(cfg, revisions={3: Revision(program="wait_all")})
        other_ctx = prove_chain(edited, mode="query", store=store, solver_context="z3 other; timeout_ms=1")
        assert other_ctx.run.reused_queries == 0 and other_ctx.run.queries > 0
    with ProofStore(tmp_path / "d.sqlite") as fresh:
        prove_chain(cfg, mode="query", store=fresh)
        same_ctx = prove_chain(edited, mode="query", store=fresh)
        assert same_ctx.run.reused_queries > 0 and same_ctx.run.queries < other_ctx.run.queries
        assert same_ctx.classification() == other_ctx.classification()
    with ProofStore(tmp_path / "c.sqlite") as store:
        # A changed premise (step 2's declared separation) invalidates every node resting on it.
        weak = replace(cfg, revisions={2: Revision(fault="early_overwrite")})
        changed = prove_chain(weak, mode="node", store=store)
        rechecked = set(changed.run.checked_nodes)
        assert any(n.startswith("proof:step2.step_matching") for n in rechecked)
        assert any(n.startswith("proof:side.step3.scope") for n in rechecked)
        assert not any(n.startswith("proof:step1.") for n in rechecked)


def test_adding_a_constraint_keeps_soundness_without_reproving_unchanged_nodes(tmp_path):
    base = ChainConfig(depth=5, shapes=(3, 4))
    strong = replace(base, revisions={4: Revision(premise="strong")})
    old_t, new_t = double_buffer.template(Revision()), double_buffer.template(Revision(premise="strong"))
    # C_new => C_old syntactically: every old constraint is still there, one is added.
    assert all(any(c.expr is d.expr for d in new_t.constraints) for c in old_t.constraints)
    assert len(new_t.constraints) == len(old_t.constraints) + 1
    with ProofStore(tmp_path / "k.sqlite") as store:
        prove_chain(base, mode="node", store=store)
        after = prove_chain(strong, mode="node", store=store)
    assert after.verdict is Verdict.PROVED
    step4 = after.build.step_proofs[4]
    rechecked = [p for p in step4 if after.run.outcomes[p].reused != "node"]
    reused = [p for p in step4 if after.run.outcomes[p].reused == "node"]
    # Only non-emptiness (K3) reads the new group; K1, K2 and the backward map are kept.
    assert sorted(after.build.obligations[p].name for p in rechecked) == ["K3", "K3"]
    assert {after.build.obligations[p].name for p in reused} >= {"K1", "step_matching.compute", "feasibility"}
    assert after.run.queries == 2


def test_store_persists_across_processes_worth_of_reopening(tmp_path):
    path = tmp_path / "persist.sqlite"
    with ProofStore(path) as store:
        prove_chain(ChainConfig(depth=2, shapes=(3,)), mode="node", store=store)
    with ProofStore(path) as store:
        again = prove_chain(ChainConfig(depth=2, shapes=(3,)), mode="node", store=store)
        assert again.run.queries == 0 and again.verdict is Verdict.PROVED
        assert store.counts()["proofs"] > 0


def _replay_module():
    spec = importlib.util.spec_from_file_location("revision_replay", ROOT / "studies" / "revision_replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_classifications_agree_across_full_node_and_query_reuse(tmp_path):
    mod = _replay_module()
    versions = mod.history((3,))
    assert len(versions) >= 17 and sum(kind == "fault" for _, kind, _ in versions) == 3
    runs = {m: mod.replay(m, versions[:11], tmp_path) for m in ("full", "node", "query")}
    for a, b, c in zip(runs["full"]["rows"], runs["node"]["rows"], runs["query"]["rows"]):
        assert a["classification"] == b["classification"] == c["classification"], a["label"]
    verdicts = [r["verdict"] for r in runs["full"]["rows"]]
    assert verdicts.count("counterexample") == 2 and verdicts[0] == "proved"
    assert sum(r["queries"] for r in runs["node"]["rows"]) < sum(r["queries"] for r in runs["full"]["rows"])
