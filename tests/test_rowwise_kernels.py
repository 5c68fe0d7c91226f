"""The rowwise Triton kernels in the interpreter against the float64 reference: random, zero, scaled
and tail inputs, one-tile and looped paths, several rows per program, strided rows; outputs poisoned."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.rowwise import ROW_OPS  # noqa: E402
from formloop.library.rowwise_kernel import RowConfig, RowwiseProgram  # noqa: E402
from formloop.library.rowwise_reference import reference  # noqa: E402

CONFIGS = [  # (config, R, C): one tile with tail, several rows per program, looped with a tail
    (RowConfig(BC=64, RP=1, W=1), 3, 50),
    (RowConfig(BC=32, RP=4, W=1), 7, 32),
    (RowConfig(BC=16, RP=2, W=1, S=2), 5, 45),
    (RowConfig(BC=32, RP=4, W=2, S=2), 6, 200),  # looped, rows masked in the last program
]
KINDS = ("random", "zero", "scaled", "tail")
TOL = {"fp32": 2e-5, "bf16": 2e-2}


def _input(kind: str, R: int, C: int, gen, dtype):
    x = torch.randn(R, C, generator=gen, dtype=torch.float64)
    if kind == "zero":
        x = torch.zeros_like(x)
    elif kind == "scaled":
        x = x * 1e3 + 50.0
    elif kind == "tail":
        x[:, -1] += 20.0  # the extreme value sits in the last (masked-tile) column
    return x.to(dtype)


def _run(op: str, cfg: RowConfig, R: int, C: int, kind: str, dtype=torch.float32, strided=False):
    gen = torch.Generator().manual_seed(hash((op, R, C, kind)) % 1000)
    x = _input(kind, R, C, gen, dtype)
    if strided:
        x = torch.cat([x, torch.zeros(R, 3, dtype=dtype)], 1)[:, :C]
    w = (torch.rand(C, generator=gen, dtype=torch.float64) + 0.5).to(dtype)
    b = torch.randn(C, generator=gen, dtype=torch.float64).to(dtype)
    res = torch.randn(R, C, generator=gen, dtype=torch.float64).to(dtype)
    prog = RowwiseProgram(op, cfg)
    if op in ("argmax", "argmin"):
        out = torch.full((R,), -7, dtype=torch.int64)
    elif op in ("sum", "mean", "max", "min", "logsumexp"):
        out = torch.full((R,), float("nan"), dtype=dtype)
    else:
        out = torch.full((R, C), float("nan"), dtype=dtype)
    got = prog(x, weight=w, bias=b, residual=res, eps=1e-6, out=out)
    want = reference(op, x, w, b, res, eps=1e-6)
    return got, want


@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("ci", range(len(CONFIGS)))
def test_kernels_match_reference(op, ci):
    cfg, R, C = CONFIGS[ci]
    for kind in KINDS:
        if kind == "zero" and op in ("argmax", "argmin"):
            continue  # every index ties: checked separately
        got, want = _run(op, cfg, R, C, kind)
        if op == "rmsnorm-residual":
            assert torch.equal(got[1], want[1]), kind
            got, want = got[0], want[0]
        if op in ("argmax", "argmin"):
            assert torch.equal(got, want), kind
            continue
        scale = 1.0 if op not in ("sum", "mean", "max", "min", "logsumexp") or kind != "scaled" else 1e3
        tol = TOL["fp32"] * scale * (C if op == "sum" else 1)
        assert torch.allclose(got.double(), want, atol=tol, rtol=2e-5), (kind, (got.double() - want).abs().max())


def test_arg_ties_take_first_index():
    x = torch.zeros(3, 40)
    x[1, 5] = x[1, 30] = 2.0
    for cfg in (RowConfig(BC=64), RowConfig(BC=16, RP=2)):
        assert RowwiseProgram("argmax", cfg)(x).tolist() == [0, 5, 0]
        assert RowwiseProgram("argmin", cfg)(-x).tolist() == [0, 5, 0]


@pytest.mark.parametrize("op", ("rmsnorm", "rmsnorm-residual", "layernorm", "softmax", "logsumexp"))
def test_bf16_and_strided_rows(op):
    got, want = _run(op, RowConfig(BC=16, RP=2, W=1, S=2), 3, 40, "random", torch.bfloat16, strided=True)
    if op == "rmsnorm-residual":
        got, want = got[0], want[0]
    assert torch.allclose(got.double(), want, atol=3e-2, rtol=3e-2)


def test_named_errors():
    prog = RowwiseProgram("rmsnorm", RowConfig(BC=16))
    with pytest.raises(InvalidInput, match="layout"):
        prog(torch.zeros(4, 8).t(), weight=torch.ones(4))
    with pytest.raises(InvalidInput, match="weight"):
        prog(torch.zeros(4, 8), weight=torch.ones(7))
    with pytest.raises(InvalidInput, match="dtype"):
        prog(torch.zeros(4, 8, dtype=torch.int32), weight=torch.ones(8))
    with pytest.raises(InvalidInput, match="rowwise op"):
        RowwiseProgram("median", RowConfig(BC=16))
    with pytest.raises(InvalidInput, match="BC"):
        RowConfig(BC=48)


def test_solved_design_runs():
    from formloop.library.rowwise_kernel import rowwise
    x = torch.randn(6, 300)
    w = torch.rand(300) + 0.5
    got = rowwise("rmsnorm", x, weight=w)
    assert torch.allclose(got.double(), reference("rmsnorm", x, w), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 3), 3), ((3, 4, 7), 4), ((1, 8, 20, 20), 2)])
def test_group_and_instance_norm(shape, groups):
    from formloop.library.rowwise_kernel import group_norm
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen) * 3 + 1
    c = shape[1]
    w, b = torch.rand(c, generator=gen) + 0.5, torch.randn(c, generator=gen)
    for cfg in (RowConfig(BC=512, RP=2, W=1), RowConfig(BC=16, RP=1, W=1, S=2)):
        if cfg.BC >= 512 and x[0].numel() // groups > 512:
            continue
        got = group_norm(x, groups, w, b, eps=1e-5, config=cfg)
        want = torch.nn.functional.group_norm(x.double(), groups, w.double(), b.double(), 1e-5)
        assert torch.allclose(got.double(), want, atol=3e-5, rtol=3e-5)
    got = group_norm(x, c, config=RowConfig(BC=16, RP=2, W=1, S=2))  # instance norm, no affine
    assert torch.allclose(got.double(), torch.nn.functional.instance_norm(x.double(), eps=1e-5), atol=3e-5)


@pytest.mark.parametrize("cfg", [RowConfig(BC=64, RP=2, W=1), RowConfig(BC=16, RP=2, W=1, S=2)])
def test_residual_updated_in_place(cfg):
    """residual_out may be the residual itself (the layer's residual stream updated in place)."""
    gen = torch.Generator().manual_seed(5)
    x, r = torch.randn(5, 45, generator=gen), torch.randn(5, 45, generator=gen)
    w = torch.rand(45, generator=gen) + 0.5
    want_y, want_r = reference("rmsnorm-residual", x, w, None, r)
    buf = r.clone()
    y, ro = RowwiseProgram("rmsnorm-residual", cfg)(x, weight=w, residual=buf, residual_out=buf)
    assert ro.data_ptr() == buf.data_ptr() and torch.equal(buf, want_r)
    assert torch.allclose(y.double(), want_y, atol=2e-5, rtol=2e-5)
