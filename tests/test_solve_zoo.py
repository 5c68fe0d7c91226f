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
