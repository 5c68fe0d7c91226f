"""Z3's `unknown` is never a proof, and a timeout below a millisecond is still a timeout.

Each test poses a query Z3 cannot settle (a sum of two positive cubes equal to a third: no model
exists and Z3 cannot prove it), so mapping `unknown` to proved anywhere on the path from the solver
to the certificate makes one of these tests fail."""
import math

import pytest
import z3

from formloop.errors import InvalidInput
from formloop.expr import decision, param
from formloop.template import Constraint, Template
from formloop.verify import (
    Schedule, Verdict, check_k1, check_k3, check_schedule_obligation, prove_template, verdict_of_validity,
)
from formloop.verify.local import check_obligation, local_obligation
from formloop.verify.proofgraph import QueryLedger
from formloop.verify.solver import Replay, new_solver, timeout_ms

a, b, c = param("a"), param("b"), param("c")
x = decision("x", (0, 1))
CUBES = (a * a * a + b * b * b).eq(c * c * c)


def test_unknown_maps_to_unresolved():
    assert verdict_of_validity(z3.unknown) is Verdict.UNRESOLVED
    assert verdict_of_validity(z3.unsat) is Verdict.PROVED
    assert verdict_of_validity(z3.sat) is Verdict.COUNTEREXAMPLE


def test_an_undecided_k1_is_unresolved_and_so_is_the_certificate():
    # K1 asks for x = 1 with a^3 + b^3 = c^3; K3 holds (x = 0 fits every a, b, c).
    t = Template(name="cubes-k1", doc="", decisions=(x,), params=(a, b, c), scope=(),
                 constraints=(Constraint("C", x.eq(0) | CUBES),), preconditions=(Constraint("pre", x.eq(0)),), cost=x)
    r = check_k1(t, timeout_s=0.3)
    assert r.verdict is Verdict.UNRESOLVED and "unknown" in r.reason
    cert = prove_template(t, timeout_s=0.3)
    assert {o.obligation: o.verdict for o in cert.obligations} == {"K1": Verdict.UNRESOLVED, "K3": Verdict.PROVED}
    assert cert.verdict is Verdict.UNRESOLVED


def test_an_undecided_k3_search_is_unresolved():
    t = Template(name="cubes-k3", doc="", decisions=(x,), params=(a, b, c),
                 scope=(Constraint("cubes", CUBES, "scope"),), constraints=(Constraint("none", x <= -1),),
                 preconditions=(), cost=x)
    r = check_k3(t, timeout_s=0.3)
    assert r.verdict is Verdict.UNRESOLVED and "unknown" in r.reason


def test_an_undecided_chain_obligation_is_unresolved():
    t = Template(name="cubes-local", doc="", decisions=(x,), params=(a, b, c), scope=(), constraints=(),
                 preconditions=(), cost=x)
    ob = local_obligation(1, t, "never_cubes", "completion", "no three positive cubes add up", (),
                          lambda env: ~CUBES, lambda w: Replay(()), None)
    ledger = QueryLedger(store=None, solver_context="", checker_version="test", reuse=False)
    r = check_obligation(ob, ledger, timeout_ms=300)
    assert r.verdict is Verdict.UNRESOLVED and ledger.queries == 1


def test_timeouts_round_up_to_a_millisecond_and_nonsense_is_refused():
    assert timeout_ms(0.0004) == 1 and timeout_ms(0.0011) == 2 and timeout_ms(10) == 10_000
    for bad in (0, -1.0, math.nan, math.inf, True, "1"):
        with pytest.raises(InvalidInput, match="timeout_s"):
            timeout_ms(bad)
    assert new_solver(0.0004).check() == z3.sat  # an empty query is still answered


def test_a_sub_millisecond_schedule_timeout_is_not_unlimited():
    # Decided without a limit this schedule is refuted (P > S - 2 + beta); with a 0.4 ms limit
    # Z3 must give up, not run unbounded (Z3 reads a timeout of 0 as "no limit").
    racy = Schedule(3, 2, 0, warps=3, phases=6)
    assert check_schedule_obligation(racy, "lifetime").verdict is Verdict.COUNTEREXAMPLE
    r = check_schedule_obligation(racy, "lifetime", timeout_s=0.0004)
    assert r.verdict is Verdict.UNRESOLVED and "timeout" in r.reason
