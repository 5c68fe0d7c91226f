"""Expression nodes: operators are an enum, the intern table frees dead nodes, and rendering (so
every content hash) is what it was when operators were strings."""
import gc
import weakref

import numpy as np
import pytest
import z3

from formloop.errors import InvalidInput
from formloop.expr import Expr, Op, any_of, decision, evaluate, mod, param, render, substitute, total
from formloop.expr.to_z3 import symbols, to_z3
from formloop.library import get_template

# Content hashes of the library's gemm templates as computed at commit 15e0809, before operators
# became an enum and the intern table became weak: stored proofs and populations key on them.
PINNED = {
    ("gemm-tiling", "exact", "fp32"): "aff4ef8061518663", ("gemm-tiling", "exact", "tf32"): "c5a88e8df7a5b3ce",
    ("gemm-tiling", "exact", "bf16"): "d18c068c608003c1", ("gemm-tiling", "exact", "fp16"): "6e2ae67306495db8",
    ("gemm-tiling", "strong", "fp32"): "59f56200964b8634", ("gemm-tiling", "strong", "tf32"): "55303f6c1a2243f7",
    ("gemm-tiling", "strong", "bf16"): "e869f9175cc83c41", ("gemm-tiling", "strong", "fp16"): "1e3b8a1d3d80020f",
    ("gemm-tiling", "weak", "fp32"): "2006e1e9046b2f41", ("gemm-tiling", "weak", "tf32"): "290a7dfe0a6db81d",
    ("gemm-tiling", "weak", "bf16"): "37e87eb7cdb3c1ca", ("gemm-tiling", "weak", "fp16"): "fd6a3849357d9344",
    ("gemm-tiling-gpu", None, "bf16"): "2e4bb7040c0be18f", ("gemm-tiling-gpu", None, "fp16"): "187d2d6dbbd2cb33",
    ("gemm-tiling-gpu", None, "tf32"): "689f4c7aa6889a6c", ("gemm-tiling-gpu", None, "fp32"): "0d8e0586c24acc6c",
}


@pytest.mark.parametrize("key", sorted(PINNED, key=str), ids=lambda k: "-".join(str(x) for x in k))
def test_content_hashes_of_gemm_templates_are_unchanged(key):
    name, pre, dtype = key
    t = get_template(name, dtype=dtype) if pre is None else get_template(name, pre=pre, dtype=dtype)
    assert t.content_hash == PINNED[key]


def test_operators_are_enum_members_and_unknown_ones_are_refused():
    x = decision("x", (1, 2))
    assert (x + 1).op is Op.ADD and (x <= 1).op is Op.LE and x.op is Op.VAR
    assert (x + 1).op == "add"  # a string enum: code comparing to the canonical name keeps working
    with pytest.raises(InvalidInput, match="expression operator"):
        Expr("addd", (x, x))


def test_dead_nodes_leave_the_intern_table():
    x = decision("x_weak", (1, 2, 3))
    before = len(Expr._interned)
    big = total(*[x * i + i for i in range(500)])
    probe = weakref.ref(big)
    assert len(Expr._interned) >= before + 1000
    del big
    gc.collect()
    assert probe() is None
    assert len(Expr._interned) <= before + 5  # what remains: at most a few constants still referenced
    # and an equal tree built again is still one object while it lives
    assert x * 3 + 3 is x * 3 + 3


def test_modulo_agrees_across_numpy_z3_and_folding():
    a, b = decision("a", (-7, -1, 0, 5, 12)), decision("b", (1, 3, 4))
    e = mod(a, b) + a % 2
    syms = symbols(e)
    for av in a.decision.menu:
        for bv in b.decision.menu:
            want = av % bv + av % 2
            assert int(evaluate(e, {"a": av, "b": bv})) == want
            got = z3.simplify(z3.substitute(to_z3(e, syms), (syms["a"], z3.IntVal(av)), (syms["b"], z3.IntVal(bv))))
            assert got.as_long() == want
            assert substitute(e, {"a": av, "b": bv}).payload == want
    assert render(e) == "a % b + a % 2"


def test_any_of_and_total_fold_to_their_units():
    x = decision("x", (0, 1))
    assert render(any_of()) == "False" and render(total()) == "0"
    assert bool(evaluate(any_of(x.eq(0), x.eq(1)), {"x": 1}))
    assert np.array_equal(evaluate(total(x, x, 1), {"x": np.array([0, 1])}), [1, 3])


def test_params_stay_distinct_from_decisions_of_the_same_name():
    assert param("n").op is Op.PARAM and render(param("n") * 2) == "n * 2"
