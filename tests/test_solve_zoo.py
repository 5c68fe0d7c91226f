"""Every solver back end on the zoo's known optima and known violations."""
import pytest

from formloop.errors import Infeasible
from formloop.solve import enumerate_designs, solve_milp
from tests import zoo

SOLVERS = [solve_milp, enumerate_designs]


@pytest.mark.parametrize("make", zoo.ALL, ids=lambda m: m.__name__)
@pytest.mark.parametrize("solve", SOLVERS, ids=lambda s: s.__name__)
def test_known_optimum(make, solve):
    known = make()
    f = known.template.formulate(known.workload)
    if known.optimum is None:
        with pytest.raises(Infeasible) as info:
            solve(f)
        assert info.value.reasons == known.conflict
        return
    sol = solve(f)
    assert sol.objective == pytest.approx(known.optimum, abs=1e-9)
    assert dict(sol.assignment) in [dict(d) for d in known.designs]
    assert sol.gap <= 1e-9


@pytest.mark.parametrize("make", [m for m in zoo.ALL if m is not zoo.infeasible], ids=lambda m: m.__name__)
def test_enumeration_lists_every_tie(make):
    known = make()
    sol = enumerate_designs(known.template.formulate(known.workload))
    assert sorted(map(lambda d: sorted(d.items()), sol.ties)) == sorted(map(lambda d: sorted(d.items()), known.designs))


def test_tie_break_is_lexicographic_when_no_terms():
    known = zoo.ties()
    f = known.template.formulate(known.workload)
    # no tie-break terms: the smallest menu position wins, in both back ends
    assert solve_milp(f).assignment == {"x": 2, "y": 1}
    assert enumerate_designs(f).assignment == {"x": 2, "y": 1}


def test_tiny_cost_scales_keep_the_optimum_through_tie_breaking():
    # Costs around 1e-10 used to fall under HiGHS's small_matrix_value in the row that holds the
    # optimum during tie-breaking, which let a worse design through.
    from formloop.expr import decision
    from formloop.template import Template

    x, y = decision("x", (1, 2, 3, 4)), decision("y", (1, 2, 3))
    cost = 6e-10 * (x - 3) * (x - 3) + 1e-10 * y * x
    t = Template("zoo-tiny", "", (x, y), (), (), (), (), cost=cost, terms={"y_term": 1e-10 * y}, tie_break=("y_term",))
    f = t.formulate({})
    enum, milp = enumerate_designs(f), solve_milp(f)
    # by hand: y = 1 always; x = 3 costs 3e-10, x = 2 costs 6e-10 + 2e-10: unique optimum (3, 1)
    assert enum.assignment == milp.assignment == {"x": 3, "y": 1}
    assert milp.objective == pytest.approx(3e-10, rel=1e-9)


def test_where_over_constants_folds():
    from formloop.expr import decision, param, substitute, where

    n = param("n")
    folded = substitute(where(n <= 3, 1, 2) + decision("x", (1, 2)), {"n": 2})
    assert str(folded) == "1 + x"
