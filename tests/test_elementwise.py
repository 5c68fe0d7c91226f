"""The elementwise family: template (model) and the emitted Triton kernel against gemm-epilogue's
float64 chain reference in the interpreter (random, zero, scaled and tail shapes; broadcast vectors)."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import get_template  # noqa: E402
from formloop.library.elementwise import solved_design, workload  # noqa: E402
from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig  # noqa: E402
from formloop.solve import enumerate_designs, solve_milp  # noqa: E402

CHAINS = [
    "relu",
    "gelu(approx=erf) >> scale(by=2.0)",
    "gelu(approx=tanh) >> bias(axis=row,name=b)",
    "silu >> mul(name=other)",
    "sigmoid >> add(name=residual) >> tanh",
    "leaky_relu(slope=0.2) >> hardtanh(lo=-0.5,hi=0.5)",
    "clamp(lo=-1.0) >> softplus(beta=2.0,threshold=5.0) >> mish",
    "scale(by=col,name=s) >> cast(dtype=bf16)",
]
SHAPES = [((3, 50), EwConfig(BN=16, BM=2, W=1)), ((2, 3, 33), EwConfig(BN=64, BM=4, W=1)), ((70,), EwConfig(BN=32))]


@pytest.mark.parametrize("chain", CHAINS)
def test_chain_matches_reference(chain):
    for i, (shape, cfg) in enumerate(SHAPES):
        for kind in ("random", "zero", "scaled"):
            gen = torch.Generator().manual_seed(i)
            x = torch.randn(shape, generator=gen)
            x = torch.zeros_like(x) if kind == "zero" else x * 30.0 if kind == "scaled" else x
            prog = ElementwiseProgram(chain, cfg, "fp32")
            ins = prog.new_inputs(x, gen)
            out = torch.full(shape, float("nan"))
            got = prog(x, ins, out=out)
            want = prog.reference(x, ins)
            tol = 1e-2 if "cast" in chain else 2e-5
            assert torch.allclose(got.double(), want, atol=tol * max(1.0, want.abs().max().item()), rtol=tol), \
                (chain, shape, kind, (got.double() - want).abs().max())


def test_bf16_in_out():
    prog = ElementwiseProgram("silu >> scale(by=0.5)", EwConfig(BN=32, BM=2, W=1), "bf16")
    x = torch.randn(5, 40).bfloat16()
    got = prog(x)
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.double(), prog.reference(x), atol=2e-2, rtol=2e-2)


def test_template_solves_like_enumeration_and_design_runs():
    t = get_template("elementwise", chain="gelu(approx=tanh) >> bias(axis=row,name=b)", dtype="bf16")
    f = t.formulate(workload(8192, 4096, "bf16"), get_chip("h200"))
    assert solve_milp(f).objective == pytest.approx(enumerate_designs(f).objective, rel=1e-6)
    d = solved_design("relu", 7, 100, "fp32")
    x = torch.randn(7, 100)
    assert torch.equal(ElementwiseProgram("relu", EwConfig.from_assignment(d), "fp32")(x), torch.relu(x))


def test_named_errors():
    with pytest.raises(InvalidInput, match="elementwise operation"):
        ElementwiseProgram("softmax", EwConfig(BN=16), "fp32")
    with pytest.raises(InvalidInput, match="epilogue operation"):
        get_template("elementwise", chain="cube")
    prog = ElementwiseProgram("bias(axis=row,name=b)", EwConfig(BN=16), "fp32")
    with pytest.raises(InvalidInput, match="input b shape"):
        prog(torch.zeros(3, 8), {"b": torch.zeros(3)})
    with pytest.raises(InvalidInput, match="elementwise input"):
        prog(torch.zeros(3, 8), {})
    with pytest.raises(InvalidInput, match="x dtype"):
        prog(torch.zeros(3, 8, dtype=torch.float16), {"b": torch.zeros(8)})
    with pytest.raises(InvalidInput, match="x layout"):
        prog(torch.zeros(8, 3).t(), {"b": torch.zeros(8)})


def test_run_chain_solved_design():
    from formloop.library.elementwise_kernel import run_chain
    x = torch.randn(3, 5, 20)
    b = torch.full((20,), 0.75)  # a scalar add as a filled row vector
    got = run_chain("bias(axis=row,name=b) >> relu", x, {"b": b})
    assert torch.allclose(got, torch.relu(x + 0.75))


# --- the flat walk (F=1) ---------------------------------------------------------------------------

FLAT = [((3, 50), 64, 0), ((4, 32), 32, 1), ((7,), 16, 0), ((2, 3, 33), 128, 1), ((5, 64), 64, 0)]


@pytest.mark.parametrize("chain", [c for c in CHAINS if "axis=" not in c and "by=col" not in c])
def test_flat_walk_matches_reference(chain):
    """Tails (sizes not a multiple of BF: masked body) and exact multiples (EVEN: unmasked body), with and
    without the evict_first hint, against the float64 reference; poisoned outputs."""
    from formloop.library.elementwise import flat_even
    seen = set()
    for i, (shape, bf, hint) in enumerate(FLAT):
        gen = torch.Generator().manual_seed(i)
        x = torch.randn(shape, generator=gen) * 4.0
        prog = ElementwiseProgram(chain, EwConfig(BN=16, BM=1, W=1, F=1, BF=bf, H=hint), "fp32")
        ins = prog.new_inputs(x, gen)
        got = prog(x, ins, out=torch.full(shape, float("nan")))
        want = prog.reference(x, ins)
        tol = 1e-2 if "cast" in chain else 2e-5
        assert torch.allclose(got.double(), want, atol=tol * max(1.0, want.abs().max().item()), rtol=tol), \
            (chain, shape, bf, (got.double() - want).abs().max())
        seen.add(flat_even(x.numel(), bf))
    assert seen == {True, False}  # both bodies ran


def test_flat_design_on_strided_rows_runs_the_2d_walk():
    x = torch.randn(6, 40)[:, :33]  # rows of one stride, not one contiguous span
    prog = ElementwiseProgram("relu >> scale(by=3.0)", EwConfig(BN=16, BM=1, W=1, F=1, BF=64), "fp32")
    assert EwConfig(BN=16, BM=1, W=1, F=1, BF=64).tile_2d(33) == EwConfig(BN=64, BM=1, W=1)
    assert torch.equal(prog(x), torch.relu(x) * 3.0)


def test_flat_refuses_vectors_and_model_chooses_layouts():
    with pytest.raises(InvalidInput, match="elementwise F"):
        ElementwiseProgram("bias(axis=row,name=b)", EwConfig(BN=16, F=1), "fp32")
    with pytest.raises(InvalidInput, match="elementwise H"):
        EwConfig(BN=16, H=2)
    # a broadcast vector keeps the 2D walk (C5); a contiguous chain over a large span takes the flat walk
    assert solved_design("bias(axis=row,name=b) >> relu", 4096, 4096, "fp32")["F"] == 0
    d = solved_design("gelu", 4096, 393216, "fp32")
    assert d["F"] == 1 and d["BF"] >= 2048
    t = get_template("elementwise", chain="relu", dtype="fp32")
    f = t.formulate(workload(4096, 393216, "fp32"), get_chip("h200"))
    assert solve_milp(f).objective == pytest.approx(enumerate_designs(f).objective, rel=1e-6)


def test_flat_index_proof_holds_and_a_wrong_even_condition_is_caught():
    """The EVEN (unmasked) body is proved only for spans that are a multiple of BF: an EVEN condition of
    BF/2 makes no-phantom fail with a replayed witness."""
    from formloop.expr import floordiv, mod
    from formloop.library.elementwise import BF, L, flat_axis, flat_even
    from formloop.library.rowwise import replay_axis
    from formloop.verify.index import check_index
    from formloop.verify.outcome import Verdict

    def replay(ob, name, tile, extent, index):
        kinds, text = replay_axis(tile, extent, index)
        unmasked = flat_even(extent, tile, wrong)
        if unmasked and -(-extent // tile) * tile > extent:
            kinds = kinds | {"outside"}
        return kinds, text

    wrong = mod(L, floordiv(BF, 2)).eq(0)
    for bf in (1024, 4096):
        for ob in ("coverage", "exact-once", "no-phantom"):
            assert check_index(flat_axis(), ob, bf).verdict is Verdict.PROVED
    bad = check_index(flat_axis(wrong), "no-phantom", 1024, replay=replay)
    assert bad.verdict is Verdict.COUNTEREXAMPLE and bad.witness["L"] % 1024 != 0


def test_ranked_designs_menu_spans_both_layouts():
    """The measurement menu: the cheapest design is the enumeration's optimum; `group` keeps k of each
    layout, every one feasible (no wall violated) and ordered by model cost."""
    from formloop.solve import ranked_designs
    t = get_template("elementwise", chain="gelu", dtype="fp32")
    wl, chip = workload(4096, 393216, "fp32"), get_chip("h200")
    f = t.formulate(wl, chip)
    menu = ranked_designs(f, 3, group="F", distinct=("F", "BF", "BM", "BN", "W"))
    assert menu[0][1] == pytest.approx(enumerate_designs(f).objective, rel=1e-9)
    assert sorted(a["F"] for a, _ in menu) == [0, 0, 0, 1, 1, 1]
    assert [c for _, c in menu] == sorted(c for _, c in menu)
    assert all(not t.check(a, wl, chip) for a, _ in menu)
    assert len({tuple(sorted(a.items())) for a, _ in menu}) == len(menu)
