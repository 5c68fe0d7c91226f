"""Every lowering of the expression layer agrees with exact numpy evaluation on bounded domains."""
import itertools
import random

import numpy as np
import pytest
import z3

from formloop.errors import Infeasible, NotTabulable, StructureError
from formloop.expr import ceildiv, decision, evaluate, floordiv, grid_env, param, render, substitute
from formloop.expr.linearize import Linearizer
from formloop.expr.to_z3 import domain_constraints, symbols, to_z3
from formloop.solve import enumerate_designs, solve_milp
from tests import randexpr


def affine_on_grid(lin, aff, decisions):
    shape = tuple(len(d.decision.menu) for d in decisions)
    total = np.full(shape, aff.const, dtype=float)
    names = [d.name for d in decisions]
    for key, table in aff.tables.items():
        expand = [slice(None) if n in key else np.newaxis for n in names]
        total = total + np.broadcast_to(table[tuple(expand)], shape)
    return total


@pytest.mark.parametrize("seed", range(60))
def test_linearization_equals_evaluation(seed):
    rng = random.Random(seed)
    ds = randexpr.decisions(rng, 3)
    e = randexpr.numeric(randexpr.expression(rng, ds))
    lin = Linearizer(ds)
    aff = lin.affine(e)
    shape = tuple(len(d.decision.menu) for d in ds)
    expected = np.broadcast_to(evaluate(e, grid_env(ds)), shape).astype(float)
    assert np.allclose(affine_on_grid(lin, aff, ds), expected), render(e)


@pytest.mark.parametrize("seed", range(60))
def test_z3_lowering_equals_evaluation(seed):
    rng = random.Random(1000 + seed)
    ds = randexpr.decisions(rng, 2)
    e = randexpr.numeric(randexpr.expression(rng, ds))
    syms = symbols(e)
    term = to_z3(e, syms)
    for values in itertools.product(*(d.decision.menu for d in ds)):
        env = {d.name: v for d, v in zip(ds, values)}
        got = z3.simplify(z3.substitute(term, *[(syms[k], z3.IntVal(v)) for k, v in env.items() if k in syms]))
        want = evaluate(e, env)
        got_value = got.as_fraction() if z3.is_rational_value(got) else got.as_long()
        assert float(got_value) == pytest.approx(float(want)), render(e)


def test_z3_integer_division_is_floor_and_ceil_for_negative_numerators():
    x = decision("x", (-7, -1, 0, 5))
    for e in (floordiv(x, 3), ceildiv(x, 3)):
        syms = symbols(e)
        for v in x.decision.menu:
            got = z3.simplify(z3.substitute(to_z3(e, syms), (syms["x"], z3.IntVal(v)))).as_long()
            assert got == int(evaluate(e, {"x": v}))


def test_domain_constraints_state_menus_and_param_bounds():
    x, n = decision("x", (2, 4)), param("n", lower=3)
    e = x * n
    syms = symbols(e)
    s = z3.Solver()
    s.add(domain_constraints((e,), syms))
    s.add(z3.Or(syms["x"] == 3, syms["n"] < 3))
    assert s.check() == z3.unsat


@pytest.mark.parametrize("seed", range(80))
def test_milp_equals_enumeration_on_random_templates(seed):
    rng = random.Random(5000 + seed)
    t = randexpr.template(rng, seed)
    f = t.formulate({})
    try:
        enum = enumerate_designs(f)
    except Infeasible as exc:
        with pytest.raises(Infeasible) as info:
            solve_milp(f)
        assert info.value.reasons == exc.reasons
        return
    milp = solve_milp(f)
    assert milp.objective == pytest.approx(enum.objective, rel=1e-9, abs=1e-9), t.canonical_text()
    assert dict(milp.assignment) in [dict(d) for d in enum.ties]
    assert dict(milp.assignment) == dict(enum.assignment)


def test_substitute_folds_constants():
    x, n = decision("x", (1, 2)), param("n")
    folded = substitute(ceildiv(n, 4) * x + n, {"n": 10})
    assert render(folded) == "3 * x + 10"


def test_large_tables_are_refused_with_a_fix():
    ds = [decision(f"v{i}", range(10)) for i in range(4)]
    with pytest.raises(NotTabulable) as info:
        Linearizer(ds).affine(ds[0] * ds[1] * ds[2] * ds[3])
    assert "10000" in str(info.value) and "split" in str(info.value)


def test_expressions_have_no_truth_value():
    x = decision("x", (1, 2))
    with pytest.raises(TypeError):
        bool(x <= 1)


def test_hash_consing_makes_equal_trees_identical():
    x = decision("x", (1, 2))
    assert (x + 1) * 2 is (x + 1) * 2
    assert decision("x", (1, 2)) is x
    with pytest.raises(StructureError):
        randexpr.Template("bad", "", (x, decision("x", (1, 3))), (), (), (), (), cost=x)
