"""qk-norm-rope-kv: template (model) and the fused Triton kernel in the interpreter against HF Qwen3's
math in float64 (q/k RMSNorm, rotate_half RoPE with theta 1e6, KV-cache write at the slots); caches
poisoned so a row written at the wrong slot or a missing head fails."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import get_template  # noqa: E402
from formloop.library.qk_rope import solved_design, workload  # noqa: E402
from formloop.library.qk_rope_kernel import QkRopeConfig, QkRopeProgram, reference_hf, rope_tables  # noqa: E402
from formloop.solve import enumerate_designs, solve_milp  # noqa: E402


def _case(T, Hq, Hkv, D, L, kind, gen, dtype=torch.float32, B=1):
    qkv = torch.randn(T, (Hq + 2 * Hkv) * D, generator=gen)
    if kind == "zero":
        qkv.zero_()
    elif kind == "scaled":
        qkv *= 1e3
    qkv = qkv.to(dtype)
    q = qkv[:, : Hq * D].view(T, Hq, D)
    k = qkv[:, Hq * D: (Hq + Hkv) * D].view(T, Hkv, D)
    v = qkv[:, (Hq + Hkv) * D:].view(T, Hkv, D)
    qw = (torch.rand(D, generator=gen) + 0.5).to(dtype)
    kw = (torch.rand(D, generator=gen) + 0.5).to(dtype)
    pos = torch.randperm(L, generator=gen)[:T] + (L if kind == "tail" else 0)  # tail: positions past L
    b = torch.randint(0, B, (T,), generator=gen)
    slots = b * L + torch.randperm(L, generator=gen)[:T]
    return q, k, v, qw, kw, pos, slots


@pytest.mark.parametrize("shape,cfg", [((5, 4, 2, 32, 16), QkRopeConfig(HP=2, W=1)),
                                       ((3, 6, 2, 64, 8), QkRopeConfig(HP=8, W=1)),
                                       ((2, 8, 8, 128, 4), QkRopeConfig(HP=4, W=2))])
@pytest.mark.parametrize("kind", ["random", "zero", "scaled", "tail"])
def test_matches_hf_math(shape, cfg, kind):
    T, Hq, Hkv, D, L = shape
    gen = torch.Generator().manual_seed(T * 7 + D)
    B = 2
    q, k, v, qw, kw, pos, slots = _case(T, Hq, Hkv, D, L, kind, gen, B=B)
    cos, sin = rope_tables(2 * L, D, 1e6)
    kc = torch.full((B, L, Hkv, D), float("nan"))
    vc = torch.full((B, L, Hkv, D), float("nan"))
    out = torch.full((T, Hq, D), float("nan"))
    got = QkRopeProgram(cfg, "fp32")(q, k, v, qw, kw, cos, sin, pos, slots, kc, vc, q_out=out)
    rq, rk, rv = reference_hf(q, k, v, qw, kw, pos)
    assert torch.allclose(got.double(), rq, atol=1e-4, rtol=1e-4)
    flat_k, flat_v = kc.view(B * L, Hkv, D), vc.view(B * L, Hkv, D)
    assert torch.allclose(flat_k[slots].double(), rk, atol=1e-4, rtol=1e-4)
    assert torch.equal(flat_v[slots], v)
    untouched = torch.ones(B * L, dtype=torch.bool)
    untouched[slots] = False
    assert flat_k[untouched].isnan().all() and flat_v[untouched].isnan().all()


def test_bf16_heads_first_cache():
    gen = torch.Generator().manual_seed(3)
    T, Hq, Hkv, D, L = 3, 4, 2, 128, 8
    q, k, v, qw, kw, pos, slots = _case(T, Hq, Hkv, D, L, "random", gen, torch.bfloat16)
    cos, sin = rope_tables(L, D, 1e6)
    kc = torch.zeros(1, Hkv, L, D, dtype=torch.bfloat16)
    vc = torch.zeros(1, Hkv, L, D, dtype=torch.bfloat16)
    got = QkRopeProgram(QkRopeConfig(HP=2, W=1), "bf16")(q, k, v, qw, kw, cos, sin, pos, slots, kc, vc,
                                                         heads_first=True)
    rq, rk, _ = reference_hf(q, k, v, qw, kw, pos)
    assert torch.allclose(got.double(), rq, atol=3e-2, rtol=3e-2)
    assert torch.allclose(kc[0].transpose(0, 1)[slots].double(), rk, atol=3e-2, rtol=3e-2)
    assert torch.equal(vc[0].transpose(0, 1)[slots], v)


def test_template_and_named_errors():
    t = get_template("qk-norm-rope-kv")
    f = t.formulate(workload(2048, 32, 8, 128), get_chip("h200"))
    assert solve_milp(f).objective == pytest.approx(enumerate_designs(f).objective, rel=1e-6)
    assert set(solved_design(1, 32, 8, 128)) == {"HP", "W"}
    with pytest.raises(InvalidInput, match="head dim"):
        workload(1, 32, 8, 96)
    prog = QkRopeProgram(QkRopeConfig(), "fp32")
    q = torch.zeros(1, 2, 32)
    k = torch.zeros(1, 1, 32)
    cos, sin = rope_tables(4, 32)
    idx = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(InvalidInput, match="k_cache shape"):
        prog(q, k, k, torch.ones(32), torch.ones(32), cos, sin, idx, idx, torch.zeros(4, 2, 32), torch.zeros(4, 2, 32))
    with pytest.raises(InvalidInput, match="cos table"):
        prog(q, k, k, torch.ones(32), torch.ones(32), cos.double(), sin, idx, idx, torch.zeros(4, 1, 32),
             torch.zeros(4, 1, 32))
    with pytest.raises(InvalidInput, match="q dtype"):
        QkRopeProgram(QkRopeConfig(), "bf16")(q, k, k, torch.ones(32), torch.ones(32), cos, sin, idx, idx,
                                              torch.zeros(4, 1, 32), torch.zeros(4, 1, 32))
