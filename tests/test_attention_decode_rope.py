"""attention-decode with RoPE inside (the Qwen3 layer's RA) in the Triton interpreter, against HF Qwen3's
math in float64: q and the new key RMS-normalized per head and rotated (qk_rope_kernel.reference_hf), the
new key and value written into the cache at L − 1, attention over the cache's L − 1 keys and the new one.
The cache row L − 1 starts as NaN (a stale row): any read of it, or a missing write, fails the check."""
from __future__ import annotations

import math
import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan, kv_split  # noqa: E402
from formloop.library.attention_decode_newtoken import NewToken  # noqa: E402
from formloop.library.qk_rope_kernel import reference_hf, rope_tables  # noqa: E402


def _case(B, Hq, Hkv, D, L, gen, page=0):
    """Raw q, new k, v as slices of one QKV row per batch, caches with the history and a NaN row at L − 1."""
    qkv = torch.randn(B, (Hq + 2 * Hkv) * D, generator=gen).to(torch.bfloat16)
    q = qkv[:, : Hq * D].view(B, Hq, D)
    k_new = qkv[:, Hq * D: (Hq + Hkv) * D].view(B, Hkv, D)
    v_new = qkv[:, (Hq + Hkv) * D:].view(B, Hkv, D)
    qw = (torch.rand(D, generator=gen) + 0.5).to(torch.bfloat16)
    kw = (torch.rand(D, generator=gen) + 0.5).to(torch.bfloat16)
    kc = torch.randn(B, Hkv, L, D, generator=gen).to(torch.bfloat16)
    vc = torch.randn(B, Hkv, L, D, generator=gen).to(torch.bfloat16)
    kc[:, :, L - 1] = float("nan")
    vc[:, :, L - 1] = float("nan")
    return q, k_new, v_new, qw, kw, kc, vc


def _reference(q, k_new, v_new, qw, kw, kc, vc, L):
    """fp64: (output [B, Hq, D], rotated new k [B, Hkv, D])."""
    B, Hq, D = q.shape
    Hkv = k_new.shape[1]
    pos = torch.full((B,), L - 1)
    rq, rk, _ = reference_hf(q, k_new, v_new, qw, kw, pos)  # per token: [B, H, D]
    keys = torch.cat([kc[:, :, : L - 1].double(), rk[:, :, None, :]], dim=2)
    vals = torch.cat([vc[:, :, : L - 1].double(), v_new.double()[:, :, None, :]], dim=2)
    g = Hq // Hkv
    keys, vals = keys.repeat_interleave(g, 1), vals.repeat_interleave(g, 1)
    w = torch.softmax(torch.einsum("bhd,bhld->bhl", rq, keys) / math.sqrt(D), -1)
    return torch.einsum("bhl,bhld->bhd", w, vals), rk


def _run(plan, q, k_new, v_new, qw, kw, kc, vc, table=None):
    cos, sin = rope_tables(plan.L + 3, plan.D, 1e6)
    out = torch.full(q.shape, float("nan"), dtype=q.dtype)
    plan.run(q, kc, vc, out, plan.new_workspace("cpu"), table, new=NewToken(k_new, v_new, qw, kw, cos, sin))
    return out


CASES = [  # (B, Hq, Hkv, D, L, config): one split; splits with the new key inside a tile, first in its split,
    # alone in its split (the split's cache range empty), behind empty trailing splits; each merge
    (1, 4, 2, 64, 40, DecodeConfig(Bn=16, KS=1, QP=2, W=4)),
    (2, 4, 2, 64, 40, DecodeConfig(Bn=16, KS=3, QP=2, W=4, MG=1)),
    (1, 8, 2, 64, 33, DecodeConfig(Bn=16, KS=2, QP=4, W=4, MG=0)),
    (1, 4, 2, 64, 17, DecodeConfig(Bn=16, KS=2, QP=2, W=4, MG=1)),
    (1, 4, 1, 64, 49, DecodeConfig(Bn=16, KS=6, QP=4, W=4, MG=0)),
    (1, 4, 2, 128, 2, DecodeConfig(Bn=16, KS=1, QP=1, W=4)),
    # the copy engine (TM = 1): descriptors [B·Hkv, L − 1, D], the partial tile in the loop, the NaN row zero-filled
    (2, 4, 2, 64, 40, DecodeConfig(Bn=16, KS=3, QP=2, W=4, MG=1, TM=1)),
    (1, 8, 2, 64, 33, DecodeConfig(Bn=16, KS=2, QP=4, W=4, MG=0, TM=1)),
    (1, 4, 1, 64, 49, DecodeConfig(Bn=16, KS=6, QP=4, W=4, MG=0, TM=1)),
    (1, 4, 2, 128, 2, DecodeConfig(Bn=16, KS=1, QP=1, W=4, TM=1)),
]


@pytest.mark.parametrize("B,Hq,Hkv,D,L,cfg", CASES)
def test_matches_hf_math_and_writes_the_new_row(B, Hq, Hkv, D, L, cfg):
    gen = torch.Generator().manual_seed(L * 31 + cfg.KS)
    q, k_new, v_new, qw, kw, kc, vc = _case(B, Hq, Hkv, D, L, gen)
    history_k, history_v = kc[:, :, : L - 1].clone(), vc[:, :, : L - 1].clone()
    plan = DecodePlan(cfg, B, Hq, Hkv, D, L, "bf16", rope=True)
    out = _run(plan, q, k_new, v_new, qw, kw, kc, vc)
    want, rk = _reference(q, k_new, v_new, qw, kw, history_k, history_v, L)
    assert not torch.isnan(out).any()
    err = (out.double() - want).abs().max().item()
    assert err < 2e-2, f"max error {err}"
    assert torch.allclose(kc[:, :, L - 1].double(), rk, atol=2e-2, rtol=1e-2)  # the rotated key, once rounded
    assert torch.equal(vc[:, :, L - 1], v_new)
    assert torch.equal(kc[:, :, : L - 1], history_k) and torch.equal(vc[:, :, : L - 1], history_v)


def test_the_walk_places_the_new_key_where_the_cases_say():
    """The cases above cover the new key's places in the split walk (so the test can fail for each)."""
    places = set()
    for _, _, _, _, L, cfg in CASES:
        splits = kv_split(L, cfg.Bn, cfg.KS)
        j = next(i for i, (lo, hi) in enumerate(splits) if lo <= L - 1 < hi)
        lo, hi = splits[j]
        places.add("first" if lo == L - 1 else "inside")
        if any(a >= b for a, b in splits[j + 1:]):
            places.add("empty splits after")
        if cfg.KS > 1:
            places.add(f"MG{cfg.MG}")
    assert places >= {"first", "inside", "empty splits after", "MG0", "MG1"}


@pytest.mark.parametrize("tm", [0, 1])  # pointer loads (one masked loop); the copy engine (the partial tile peeled)
def test_paged_cache(tm):
    B, Hq, Hkv, D, L, page = 2, 4, 2, 64, 40, 16
    gen = torch.Generator().manual_seed(5)
    q, k_new, v_new, qw, kw, kc, vc = _case(B, Hq, Hkv, D, L, gen)
    history_k, history_v = kc[:, :, : L - 1].clone(), vc[:, :, : L - 1].clone()
    n_pages = -(-L // page)
    table = torch.randperm(B * n_pages, generator=gen).view(B, n_pages).to(torch.int32)
    pk = torch.full((B * n_pages, Hkv, page, D), float("nan"), dtype=torch.bfloat16)
    pv = pk.clone()
    for b in range(B):
        for i in range(n_pages):
            n = min(page, L - i * page)
            pk[table[b, i], :, :n] = kc[b, :, i * page: i * page + n]
            pv[table[b, i], :, :n] = vc[b, :, i * page: i * page + n]
    plan = DecodePlan(DecodeConfig(Bn=16, KS=2, QP=2, W=4, MG=1, TM=tm), B, Hq, Hkv, D, L, "bf16", page=page,
                      rope=True)
    out = _run(plan, q, k_new, v_new, qw, kw, pk, pv, table)
    want, rk = _reference(q, k_new, v_new, qw, kw, history_k, history_v, L)
    assert (out.double() - want).abs().max().item() < 2e-2
    last = table[:, (L - 1) // page].long()
    assert torch.allclose(pk[last, :, (L - 1) % page].double(), rk, atol=2e-2, rtol=1e-2)
    assert torch.equal(pv[last, :, (L - 1) % page], v_new)


def test_named_errors():
    B, Hq, Hkv, D, L = 1, 4, 2, 64, 40
    gen = torch.Generator().manual_seed(2)
    q, k_new, v_new, qw, kw, kc, vc = _case(B, Hq, Hkv, D, L, gen)
    cos, sin = rope_tables(L, D, 1e6)
    plan = DecodePlan(DecodeConfig(Bn=16, KS=1, QP=2), B, Hq, Hkv, D, L, "bf16", rope=True)
    out = torch.empty_like(q)
    with pytest.raises(InvalidInput, match="new token"):
        plan.run(q, kc, vc, out)
    with pytest.raises(InvalidInput, match="cos table rows"):
        plan.run(q, kc, vc, out, new=NewToken(k_new, v_new, qw, kw, cos[: L - 1], sin[: L - 1]))
    with pytest.raises(InvalidInput, match="new k"):
        plan.run(q, kc, vc, out, new=NewToken(k_new[:, :1], v_new, qw, kw, cos, sin))
    plain = DecodePlan(DecodeConfig(Bn=16, KS=1, QP=2), B, Hq, Hkv, D, L, "bf16")
    with pytest.raises(InvalidInput, match="new token"):
        plain.run(q, kc, vc, out, new=NewToken(k_new, v_new, qw, kw, cos, sin))


def test_the_rope_walk_replayed_by_brute_force():
    """The walk the proofs name (kv_cover.SplitWalk.rope_sources) replayed over small L, tile and split counts: no
    defect; and its faults show theirs (an independent check of what Z3 proves symbolically)."""
    from formloop.verify.attention_replay import replay_rope_walk
    from formloop.verify.kv_cover import SplitWalk

    for L in range(1, 41):
        for T in (1, 2, 3, 8, 16):
            for KS in range(1, 7):
                ok = replay_rope_walk(L, SplitWalk().rope_sources(L, T, KS))
                assert not ok.kinds, (L, T, KS, ok.text)
                assert [lo for lo, _ in kv_split(L, T, KS)] == [lo for lo, _ in SplitWalk().ranges(L, T, KS)]
    assert "stale" in replay_rope_walk(40, SplitWalk(rope_fault="uncut").rope_sources(40, 16, 2)).kinds
    assert "missing" in replay_rope_walk(40, SplitWalk(rope_fault="partial-dropped").rope_sources(
        40, 16, 2)).kinds
