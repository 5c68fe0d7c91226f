"""A tie-break stage that HiGHS finds infeasible under the values held from the stages before it (seen on the
elementwise template: add over 1 x 256) keeps the previous stage's design: still the cost optimum, checked here
against exhaustive enumeration, with the unbroken ties said in the solution's reason."""
from __future__ import annotations

import math

from formloop.hw.chips import get_chip
from formloop.library import elementwise, get_template
from formloop.solve import SOLVERS
from formloop.solve.highs import solve_milp


def test_the_elementwise_add_that_tripped_a_tie_stage_solves_to_the_enumerated_optimum():
    chip = get_chip("h200")
    f = get_template("elementwise", chain="add(name=residual)", dtype="bf16").formulate(
        elementwise.workload(1, 256), chip)
    milp = solve_milp(f)
    brute = SOLVERS["enumerate"](f)
    assert math.isclose(milp.objective, brute.objective, rel_tol=1e-9)
    assert not f.template.check(milp.assignment, f.params, chip)
