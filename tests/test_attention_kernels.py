"""The attention kernels in Triton's interpreter at tiny sizes, against the fp32/fp64 reference on
random, zero, scaled and tail-dominant inputs; outputs poisoned with NaN first, so an element no
program writes fails."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.attention_cases import INPUT_KINDS, check_block_table, paged, qkv, reference  # noqa: E402
from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan, TritonDecode  # noqa: E402
from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan, TritonPrefill  # noqa: E402

DECODE = [  # (config, (B, Hq, Hkv, D, L), page)
    (DecodeConfig(Bn=16, KS=1, QP=4, S=1, W=4, MG=1), (1, 8, 2, 32, 37), 0),
    (DecodeConfig(Bn=16, KS=3, QP=2, S=2, W=4, MG=1), (2, 8, 2, 32, 70), 0),
    (DecodeConfig(Bn=32, KS=2, QP=4, S=2, W=4, MG=0), (1, 8, 2, 32, 100), 0),
    (DecodeConfig(Bn=16, KS=4, QP=1, S=2, W=4, MG=1), (1, 4, 4, 16, 63), 16),
    (DecodeConfig(Bn=16, KS=2, QP=4, S=3, W=4, MG=1), (1, 8, 2, 32, 50), 8),
    (DecodeConfig(Bn=16, KS=3, QP=2, S=2, W=4, MG=1, TM=1), (2, 8, 2, 32, 70), 0),
    (DecodeConfig(Bn=32, KS=2, QP=4, S=2, W=4, MG=0, TM=1), (1, 8, 2, 32, 100), 0),
    (DecodeConfig(Bn=16, KS=4, QP=1, S=2, W=4, MG=1, TM=1), (1, 4, 4, 16, 63), 32),
    (DecodeConfig(Bn=16, KS=5, QP=4, S=2, W=4, MG=1), (1, 8, 2, 32, 80), 0),  # one-load fold (QP·KSP = 32)
    (DecodeConfig(Bn=16, KS=9, QP=8, S=2, W=4, MG=0), (1, 16, 2, 32, 140), 0),  # row-by-row fold (QP·KSP = 128)
    (DecodeConfig(Bn=16, KS=3, QP=2, S=6, W=4, MG=2), (2, 8, 2, 32, 70), 0),  # dependent merge (plain here), 6 stages
    (DecodeConfig(Bn=16, KS=2, QP=4, S=2, W=4, MG=2, TM=1), (1, 8, 2, 32, 100), 16),
    # trailing empty splits (C4 admits them): 7 tiles in 8 splits, 5 in 6, 11 in 12 (one tile each, the last empty)
    (DecodeConfig(Bn=16, KS=8, QP=4, S=2, W=4, MG=1), (1, 8, 2, 32, 97), 0),
    (DecodeConfig(Bn=16, KS=6, QP=2, S=2, W=4, MG=0, TM=1), (2, 8, 2, 32, 65), 0),
    (DecodeConfig(Bn=16, KS=12, QP=4, S=2, W=4, MG=2), (1, 8, 2, 32, 161), 16),
]
PREFILL = [  # (config, (B, Hq, Hkv, D, L), causal)
    (PrefillConfig(Br=32, Bc=16, S=2, W=4, GQ=1, TM=0), (1, 4, 2, 32, 45), 1),
    (PrefillConfig(Br=16, Bc=16, S=2, W=4, GQ=0, TM=0), (2, 4, 1, 16, 37), 1),
    (PrefillConfig(Br=32, Bc=16, S=2, W=4, GQ=1, TM=1), (1, 4, 2, 32, 45), 1),
    (PrefillConfig(Br=32, Bc=16, S=2, W=4, GQ=0, TM=1), (1, 2, 2, 16, 50), 0),
]


def _check(inst, seed: int):
    case = inst.new_case("cpu", torch.Generator().manual_seed(seed))
    inst.poison(case)
    assert torch.isnan(inst.output(case)).all()
    inst.launch(case)
    out = inst.output(case).double()
    ref = inst.reference(case).double()
    assert torch.isfinite(out).all(), "an output element was never written"
    rel = ((out - ref).norm() / ref.norm()).item()
    worst = (out - ref).abs().max().item() / (ref.norm().item() / ref.numel() ** 0.5)
    assert rel <= inst.tolerance and worst <= 10 * inst.tolerance, (inst.name, inst.kind, rel, worst)
    return case


@pytest.mark.parametrize("cfg,shape,page", DECODE,
                         ids=[f"{c.Bn}x{c.KS}qp{c.QP}mg{c.MG}tm{c.TM}p{p}" for c, _, p in DECODE])
@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_decode_matches_reference(cfg, shape, page, kind):
    _check(TritonDecode(DecodePlan(cfg, *shape, "bf16", page), kind), seed=hash((kind, page)) % 1000)


@pytest.mark.parametrize("cfg,shape,causal", PREFILL, ids=[f"{c.Br}x{c.Bc}gq{c.GQ}tm{c.TM}c{k}" for c, _, k in PREFILL])
@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_prefill_matches_reference(cfg, shape, causal, kind):
    _check(TritonPrefill(PrefillPlan(cfg, *shape, "bf16", causal), kind), seed=len(kind))


def test_in_launch_merge_relaunches_and_resets_its_counters():
    plan = DecodePlan(DecodeConfig(Bn=16, KS=3, QP=4, S=2, W=4, MG=1), 1, 8, 2, 32, 45)
    inst = TritonDecode(plan)
    case = _check(inst, seed=5)
    counters = case.workspace[-plan.grid[0]:].view(torch.int32)
    assert (counters == 0).all()
    first = case.out.clone()
    inst.poison(case)
    inst.launch(case)  # the same launch again: the counters were left at zero
    assert torch.equal(case.out, first)


def test_zero_query_averages_exactly_the_keys_read():
    """q = 0 makes every weight equal: the output is the mean of V over the keys the walk read, so a
    dropped or doubled key moves it by ~1/L of a value row."""
    plan = DecodePlan(DecodeConfig(Bn=16, KS=4, QP=2, S=2, W=4, MG=1), 1, 4, 2, 32, 53)
    inst = TritonDecode(plan, "zero")
    case = inst.new_case("cpu", torch.Generator().manual_seed(1))
    inst.launch(case)
    mean = case.v.double().mean(dim=2).repeat_interleave(2, dim=1)
    assert torch.allclose(case.out.double(), mean, atol=2e-2, rtol=2e-2)
    drop_one = case.v[:, :, :-1].double().mean(dim=2).repeat_interleave(2, dim=1)
    assert (case.out.double() - mean).abs().max() < (drop_one - mean).abs().max()


def test_paged_cache_reads_through_the_block_table():
    gen = torch.Generator().manual_seed(2)
    q, k, v = qkv(2, 4, 2, 1, 40, 16, "bf16", "cpu", gen)
    kc, vc, table = paged(k, v, 16, gen)
    assert table.shape == (2, 3) and len(set(table.view(-1).tolist())) == 6
    for b in range(2):
        for pos in (0, 17, 39):
            page, off = table[b, pos // 16].item(), pos % 16
            assert torch.equal(kc[page, :, off], k[b, :, pos])


def test_block_table_outside_the_cache_is_a_named_error():
    plan = DecodePlan(DecodeConfig(Bn=16, KS=2, QP=2, S=2, W=4, MG=1), 1, 4, 2, 16, 40, "bf16", 16)
    inst = TritonDecode(plan)
    case = inst.new_case("cpu", torch.Generator().manual_seed(3))
    case.table[0, 1] = case.k.shape[0]  # one past the last page
    with pytest.raises(InvalidInput, match="block table entry.*outside the KV cache"):
        inst.launch(case)
    with pytest.raises(InvalidInput, match="block table shape"):
        check_block_table(case.table[:, :1], case.k.shape[0], 3)


@pytest.mark.parametrize("bad,match", [
    (dict(D=96), "head dim D"), (dict(Hq=6, Hkv=4), "query heads Hq"), (dict(L=0), "KV length L"),
])
def test_unsupported_shapes_are_named_errors(bad, match):
    shape = {"B": 1, "Hq": 8, "Hkv": 2, "D": 32, "L": 40, **bad}
    with pytest.raises(InvalidInput, match=match):
        DecodePlan(DecodeConfig(), *shape.values())
    with pytest.raises(InvalidInput, match=match):
        PrefillPlan(PrefillConfig(), *shape.values())


def test_plan_refuses_configs_outside_the_contract():
    with pytest.raises(InvalidInput, match="QP"):
        DecodePlan(DecodeConfig(QP=8), 1, 8, 2, 32, 40)  # 8 does not divide the group of 4
    with pytest.raises(InvalidInput, match="KS"):
        DecodePlan(DecodeConfig(Bn=16, KS=8), 1, 8, 2, 32, 40)  # 3 tiles fill 3 of 8 splits: fewer than half
    with pytest.raises(InvalidInput, match="Bc"):
        PrefillConfig(Br=64, Bc=128)
    with pytest.raises(InvalidInput, match="page size"):
        DecodePlan(DecodeConfig(Bn=32, KS=1, TM=1), 1, 8, 2, 32, 40, "bf16", 16)  # a 32-key tile spans two pages


def test_reference_is_causal_and_grouped():
    gen = torch.Generator().manual_seed(4)
    q, k, v = qkv(1, 4, 2, 5, 5, 16, "bf16", "cpu", gen)
    out = reference(q, k, v, causal=True, dtype=torch.float64)
    assert torch.allclose(out[0, 3, 0], v[0, 1, 0].double())  # query 0 sees key 0 only; head 3 reads KV head 1
    full = reference(q, k, v, causal=False, dtype=torch.float64)
    assert torch.allclose(out[:, :, -1], full[:, :, -1])  # the last query sees every key


def test_instances_launch_through_the_plans_launcher_which_names_why_it_is_not_thin():
    """Under the interpreter the bound (thin) launch is not possible: every run goes through the plan's
    own launch, counted, with the reason named; a bad operand is still refused with a named error."""
    for inst in (TritonDecode(DecodePlan(DecodeConfig(Bn=16, KS=2, QP=4, S=2, W=4, MG=0), 1, 8, 2, 32, 40)),
                 TritonPrefill(PrefillPlan(PrefillConfig(Br=16, Bc=16, S=2, W=4, GQ=0, TM=0), 1, 4, 2, 16, 20))):
        case = _check(inst, seed=2)
        inst.launch(case)
        thin = inst.plan.thin_launcher("cpu")
        assert thin.path == "jit" and thin.fallback.startswith("interpreter") and thin.jit_calls == 2
        with pytest.raises(InvalidInput):
            inst.plan.run(case.q[:, :1], case.k, case.v, case.out)


def test_a_register_cap_reaches_every_kernel_of_a_decode_launch():
    """An emulated chip's register wall (maxnreg) is a launch option of the split kernel and of the merge kernel;
    a plan without a cap launches without one. The capped plan still computes attention."""
    from dataclasses import replace

    plan = DecodePlan(DecodeConfig(Bn=16, KS=3, QP=2, S=2, W=4, MG=0), 1, 8, 2, 32, 45)
    inst = TritonDecode(replace(plan, maxnreg=96))
    case = _check(inst, seed=3)
    operands = inst.plan._operands(case.q, case.k, case.v, case.out, case.workspace, case.table)
    calls = inst.plan._calls(inst.plan.grid, *operands)
    assert len(calls) == 2 and all(meta.get("maxnreg") == 96 for _, _, _, meta in calls)
    assert all("maxnreg" not in meta for _, _, _, meta in plan._calls(plan.grid, *operands))
