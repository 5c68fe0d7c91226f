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
