"""The MILP's schedule split (formloop.solve.split): gemm-tiling-gpu with schedules is solved one SC value at
a time, with C6 pinning KS and L in the persistent and stream-K branches. Same optimum and same design
(ties included) as exhaustive enumeration of the whole joint menu, on shapes where each schedule wins."""
from __future__ import annotations

import pytest

from formloop.errors import Infeasible
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.library.gemm_tiling import workload
from formloop.solve import enumerate_designs, solve_milp
from formloop.solve.split import restrict, split_solve
from formloop.template import Constraint


def _f(shape, **cal):
    t = get_template("gemm-tiling-gpu", dtype="bf16", schedules=True, calibration=cal or None)
    return t.formulate(workload(shape, "bf16"), get_chip("h200"))


def test_presolve_pins_the_decisions_c6_leaves_one_value():
    f = _f((200, 200, 200))
    assert restrict(f, {"SC": 0}).template.fixed == {"SC": 0}
    for sc in (1, 2):
        g = restrict(f, {"SC": sc})
        assert g.template.fixed == {"SC": sc, "KS": 1, "L": 1}
        assert [d.name for d in g.decisions] == ["Tm", "Tn", "Tk", "S", "W", "G"]


def test_a_branch_no_design_satisfies_is_dropped():
    # N·e = 2·201 bytes is no multiple of 16: the copy engine (L = 1) is out, so SC = 1, 2 are infeasible.
    f = _f((256, 201, 256))
    assert restrict(f, {"SC": 1}) is None and restrict(f, {"SC": 2}) is None
    s = solve_milp(f)
    assert s.assignment["SC"] == 0 and s.assignment == enumerate_designs(f).assignment


@pytest.mark.parametrize("shape, sc", [((2304, 2048, 4096), 2), ((8192, 8192, 8192), 1), ((64, 1024, 2048), 0)])
def test_split_milp_matches_enumeration(shape, sc):
    f = _f(shape)
    milp, brute = solve_milp(f), enumerate_designs(f)
    assert brute.assignment["SC"] == sc  # each schedule wins one of these shapes
    assert dict(milp.assignment) == dict(brute.assignment)
    assert milp.objective == pytest.approx(brute.objective, rel=1e-9)
    assert milp.status.value == "optimal" and milp.terms["cost"] == pytest.approx(brute.objective, rel=1e-9)


def test_ties_across_branches_follow_the_menu_order():
    # A cost that ties every schedule: the first menu position (SC = 0) must win, as one solve orders ties.
    f = _f((64, 1024, 2048))
    from formloop.expr import const
    from formloop.template import Formulation

    flat = Formulation(template=f.template, params=f.params, constraints=f.constraints, cost=const(1.0),
                       terms={k: const(1.0) for k in f.terms})
    calls = []

    def fake(g):
        calls.append(dict(g.template.fixed))
        return enumerate_designs(g)
    s = split_solve(flat, "SC", fake)
    assert [c["SC"] for c in calls] == [0, 1, 2]
    assert s.assignment == enumerate_designs(flat).assignment


def test_every_branch_infeasible_raises():
    f = _f((200, 200, 200))
    from formloop.template import Formulation

    never = Formulation(template=f.template, params=f.params,
                        constraints=f.constraints + (Constraint("no", f.decisions[0] < 0, "capacity", "never"),),
                        cost=f.cost, terms=f.terms)
    with pytest.raises(Infeasible):
        split_solve(never, "SC", enumerate_designs)
