"""The cheap instance check and the contract ablation: solver picks checked against the obligations."""
import numpy as np
import pytest

from formloop.expr import evaluate
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import workload
from formloop.library.gemm_tiling_program import check_design
from formloop.solve import solve_milp
from formloop.solve.enumerate import assignment_at, grid_shape
from formloop.verify import Verdict, check_instance, prove_template
from formloop.verify.instance import encoding_violations

CHIP = get_chip("illustrative")
SHAPES = [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000)]


def pick(pre, shape):
    t = get_template("gemm-tiling", pre=pre)
    return t, solve_milp(t.formulate(workload(shape), CHIP)).assignment


def test_encoding_agrees_with_the_constraints_on_every_design():
    t = get_template("gemm-tiling", pre="weak")
    f = t.formulate(workload((1000, 1000, 1000)), CHIP)
    params = t.bind(workload((1000, 1000, 1000)), CHIP)
    accepted = 0
    for flat in range(int(np.prod(grid_shape(f)))):
        a = assignment_at(f, flat)
        bad, rows = encoding_violations(t, params, a)
        assert not bad and rows >= 3
        accepted += all(bool(evaluate(c.expr, {**params, **a})) for c in f.constraints)
    assert accepted > 722  # the weak contract admits more than the exact one


def test_encoding_check_catches_a_wrong_row(monkeypatch):
    from formloop.expr.linearize import Linearizer, Row
    t, a = pick("exact", (1000, 1000, 1000))
    real = Linearizer.constraint

    def broken(self, name, node):  # an encoder that shifts every row by one
        return [Row(p.name, p.lhs, p.lower, p.upper - 10**9) if isinstance(p, Row) else p
                for p in real(self, name, node)]

    monkeypatch.setattr(Linearizer, "constraint", broken)
    check = check_instance(t, a, workload((1000, 1000, 1000)), CHIP)
    assert not check.ok and any(v.kind == "encoding" for v in check.violations)


@pytest.mark.parametrize("shape", SHAPES)
def test_exact_and_strong_picks_pass_the_instance_check_and_all_obligations(shape):
    for pre in ("exact", "strong"):
        t, a = pick(pre, shape)
        check = check_instance(t, a, workload(shape), CHIP)
        assert check.ok and check.seconds < 5, check.violations
        assert all(r.proved for r in check_design(a, shape)), (pre, shape, a)


@pytest.mark.parametrize("shape", SHAPES)
def test_weak_pick_is_rejected_with_a_replayed_race(shape):
    t, a = pick("weak", shape)
    assert (a["S"], a["P"], a["beta"]) == (2, 1, 0)
    check = check_instance(t, a, workload(shape), CHIP)
    assert [v.name for v in check.violations] == ["lifetime"]
    lifetime = {r.obligation: r for r in check_design(a, shape)}["lifetime"]
    assert lifetime.verdict is Verdict.COUNTEREXAMPLE
    assert "instead of" in lifetime.replay  # names the foreign term and the one it displaced
    assert "one term missing (A[" in lifetime.replay and "one foreign term added (A[" in lifetime.replay


def test_weak_pick_on_ragged_shape_is_the_seed_design():
    _, a = pick("weak", (1000, 1000, 1000))
    assert a == {"Tm": 128, "Tn": 128, "Tk": 32, "S": 2, "P": 1, "beta": 0}


def test_certificate_gates_the_instance_check():
    t, a = pick("exact", (1000, 1000, 1000))
    weak_cert = prove_template(get_template("gemm-tiling", pre="weak"))
    check = check_instance(t, a, workload((1000, 1000, 1000)), CHIP, certificate=weak_cert)
    assert not check.ok and check.violations[0].kind == "certificate"


def test_out_of_scope_workload_is_named():
    t, a = pick("exact", (1000, 1000, 1000))
    with pytest.raises(Exception, match="M"):
        check_instance(t, a, {"M": 0, "N": 10, "K": 10, "e": 4}, CHIP)
