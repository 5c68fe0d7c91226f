"""The five-step GEMM chain: exact chain proved, faults caught at their step, and each step's
solver-side rules checked against independent brute force (replay interpreters, hand counts)."""
from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from formloop.library.chain import double_buffer, partition, resources, storage
from formloop.library.chain.compose import STEPS, ChainConfig, parse_fault, prove_chain, recheck_certificate, with_fault
from formloop.verify.local import Revision
from formloop.cli import app
from formloop.errors import InvalidInput
from formloop.expr import evaluate
from formloop.solve import enumerate_designs, solve_milp

SHAPES = (3,)
FAULTS = [f"{k}:{name}" for k, s in STEPS.items() for name in s.faults]


@pytest.fixture(scope="module")
def exact():
    return prove_chain(ChainConfig(depth=5, shapes=SHAPES))


def test_every_local_obligation_of_the_exact_chain_is_proved(exact):
    assert exact.verdict.value == "proved"
    for k, proofs in exact.build.step_proofs.items():
        conditions = {exact.build.obligations[p].condition for p in proofs}
        assert {"initialization", "step_matching", "progress", "completion", "rank"} <= conditions, k
        assert all(exact.run.outcomes[p].result.proved for p in proofs)
    assert all(exact.run.outcomes[p].result.proved for p in exact.build.side_proofs)


def test_composed_certificate_rechecks_and_detects_tampering(exact):
    cert = json.loads(json.dumps(exact.certificate()))
    assert recheck_certificate(cert) == []
    forged = json.loads(json.dumps(cert))
    forged["local"]["4"][0]["verdict"] = "unresolved"
    assert any("is unresolved" in p for p in recheck_certificate(forged))
    stale = json.loads(json.dumps(cert))
    stale["config"]["revisions"] = {"4": {"program": "default", "cost": "default", "premise": "default",
                                          "fault": "weak_lifetime"}}
    assert any("key mismatch" in p for p in recheck_certificate(stale))


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_caught_at_its_step_with_a_replayable_witness(fault):
    k, name = parse_fault(fault)
    report = prove_chain(with_fault(ChainConfig(depth=5, shapes=SHAPES), fault))
    verdicts = {s: report.step_verdict(s).value for s in STEPS}
    assert verdicts[k] == "counterexample"
    assert all(v == "proved" for s, v in verdicts.items() if s != k), verdicts
    caught = [report.run.outcomes[p].result for p in report.build.step_proofs[k]
              if report.build.obligations[p].name == STEPS[k].faults[name].caught_by]
    refuted = [r for r in caught if r.verdict.value == "counterexample"]
    assert refuted, f"{fault} not refuted by {STEPS[k].faults[name].caught_by}"
    r = refuted[0]
    assert r.trace and r.replay
    # Replay again, outside the checker: the step's interpreter must show the defect.
    ob = report.build.obligations[f"proof:{r.obligation}"]
    again = ob.replay(dict(r.witness))
    assert STEPS[k].faults[name].caught_by in again.defects


def test_faults_cannot_be_named_outside_the_catalogue():
    with pytest.raises(InvalidInput):
        parse_fault("4:no_such_fault")
    with pytest.raises(InvalidInput):
        parse_fault("six:x")
    with pytest.raises(InvalidInput):
        with_fault(ChainConfig(depth=2), "4:wrong_generation")


def test_slot_rotation_is_safe_exactly_when_P_le_S_minus_2_plus_beta():
    # Independent of Z3: run the epoch interpreter on all 24 combinations of S, P (0..3), beta.
    for S, P, beta in itertools.product((1, 2, 3), (0, 1, 2, 3), (0, 1)):
        tl = double_buffer.simulate({"S": S, "P": P, "beta": beta}, 6, Revision())
        safe = not ({"step_matching.compute", "step_matching.load", "initialization"} & set(tl.defects))
        assert safe == (P <= S - 2 + beta), (S, P, beta, tl.defects)


def test_reduction_partition_is_exact_once_exactly_when_the_tail_precondition_holds():
    t = partition.template()
    for K in (1, 7, 64, 100, 129):
        for R, Tk, guard in itertools.product(partition.R.decision.menu, partition.Tk.decision.menu, (0, 1)):
            for program in ("default", "blocked"):
                w = {"R": R, "Tk": Tk, "guard": guard, "K": K}
                tl = partition.simulate(w, Revision(program=program))
                pre = all(bool(evaluate(c.expr, w)) for c in t.preconditions)
                assert (not tl.defects) == pre, (w, program, tl.defects)


def test_separation_inequalities_are_one_expression_for_solver_and_verifier():
    t = storage.template(3)
    sep_c = [c.expr for c in t.constraints if c.group == "separation"]
    sep_p = [c.expr for c in t.preconditions if c.group == "separation"]
    assert sep_c and all(a is b for a, b in zip(sep_c, sep_p))


@pytest.mark.parametrize("nbuf, finish", [(1, 5), (2, 3), (3, 3)])
def test_storage_milp_meets_hand_counted_optimum_and_passes_the_verifier(nbuf, finish):
    # n = 3 tiles read in order: one buffer serializes write/read pairs (2n - 1), two suffice for n.
    t = storage.template(3)
    sol = solve_milp(t.formulate({"nbuf": nbuf}))
    assert sol.objective == finish
    assert t.check(sol.assignment, {"nbuf": nbuf}) == []
    assert storage.simulate({**sol.assignment, "nbuf": nbuf}, 3).defects == {}


@pytest.mark.parametrize("nbuf", [1, 2])
def test_storage_milp_equals_exhaustive_enumeration(nbuf):
    f = storage.template(2).formulate({"nbuf": nbuf})
    assert solve_milp(f).objective == enumerate_designs(f).objective


def test_resource_precondition_excludes_every_reachable_deadlock():
    n, t = 3, resources.template(3)
    deadlocks_without_pre, faulty_deadlocks = 0, 0
    menus = [d.decision.menu for d in t.decisions]
    for values in itertools.product(*menus):
        for stride in (1, 2, 3):
            w = dict(zip(t.decision_names, values), stride=stride, A=1, qcap=64)
            pre = all(bool(evaluate(c.expr, w)) for c in t.preconditions)
            stuck = "progress" in resources.simulate(w, n, Revision()).defects
            assert not (pre and stuck), w
            deadlocks_without_pre += stuck
            if pre:
                faulty_deadlocks += "progress" in resources.simulate(w, n, Revision(fault="deadlock_queue")).defects
            assert "step_matching.serve" not in resources.simulate(w, n, Revision()).defects
    assert deadlocks_without_pre > 0 and faulty_deadlocks > 0


def test_cli_prove_chain_json_and_errors(tmp_path):
    runner = CliRunner()
    out = runner.invoke(app, ["prove-chain", "gemm", "--depth", "2", "--shapes", "3", "--json",
                              "--store", str(tmp_path / "p.sqlite")])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["verdict"] == "proved" and report["queries"] > 0 and report["seconds"] > 0
    assert [s["verdict"] for s in report["steps"]] == ["proved", "proved"]
    again = json.loads(runner.invoke(app, ["prove-chain", "gemm", "--depth", "2", "--shapes", "3", "--json",
                                           "--mode", "node", "--store", str(tmp_path / "p.sqlite")]).stdout)
    assert again["queries"] == 0 and again["verdict"] == "proved"
    for bad in (["--fault", "2:nope"], ["--depth", "7"], ["--mode", "fast"], ["--shapes", "x"]):
        res = runner.invoke(app, ["prove-chain", "gemm", *bad, "--store", str(tmp_path / "q.sqlite")])
        assert res.exit_code == 2, (bad, res.output)
        assert "Traceback" not in res.output


def test_every_step_is_a_solvable_template_whose_optimum_passes_its_preconditions():
    from formloop.library.chain import transfer

    cases = [(partition.template(), {"K": 1000, "t_mac": 1, "t_guard": 1, "t_comb": 20}),
             (double_buffer.template(), {"tile_bytes": 16384, "Ms": 98304, "t_load": 300, "t_comp": 200, "t_bar": 40}),
             (resources.template(4), {"stride": 8, "A": 2, "qcap": 16})]
    coarse = solve_milp(storage.template(3).formulate({"nbuf": 2})).assignment
    cases.append((transfer.template(3), {**coarse, "nbuf": 2}))  # step 2's choice carried as parameters
    for t, params in cases:
        sol = solve_milp(t.formulate(params))
        assert t.check(sol.assignment, params) == [], t.name
    # Step 4 on a 96 KiB chip keeps the barrier-free three-slot pipeline the lifetime line allows.
    s4 = solve_milp(cases[1][0].formulate(cases[1][1])).assignment
    assert s4["P"] <= s4["S"] - 2 + s4["beta"]
