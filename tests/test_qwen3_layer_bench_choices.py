"""The layer's GEMM choices by measurement (qwen3_layer_tune, as benchmarks/qwen3_layer.py and `formloop layer
--tune` use them) and the benchmark's norm-fusion A/B, with the timings faked (the selection logic, not the GPU):
a GEMM part takes a candidate only when it is at least 3 % faster and correct, a failed candidate is never
chosen, tensor-core candidates come from the family's menu at the part's own rows; the norm-fusion A/B keeps the
faster checked variant and never one that failed."""
from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest  # noqa: E402

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import qwen3_layer as bench  # noqa: E402
from formloop.library import qwen3_layer_measure, qwen3_layer_tune as tune  # noqa: E402
from formloop.library.qwen3_layer import get_model, parse_scenario  # noqa: E402
from formloop.library.qwen3_layer_plan import plan_many  # noqa: E402
from formloop.library.qwen3_layer_template import Fusion  # noqa: E402


@pytest.fixture(scope="module")
def plans():
    cfg = get_model("tiny")
    scs = [parse_scenario(s) for s in ("prefill:32", "decode:40")]
    return dict(zip(("prefill", "decode"), plan_many(cfg, scs, workers=1, norm_fusion=True)))


def _fake_timings(monkeypatch, times):
    """qwen3_layer_tune's measurement replaced: a design's time is times(part shape, design), None = it failed."""
    seen = []
    monkeypatch.setattr(tune, "operand_sets", lambda N, K, device, l2, M=1: [(M, N, K)])
    monkeypatch.setattr(tune, "family_launcher", lambda N, K, chain, d, device, M=1: (M, N, K, dict(d)))
    def measure(launch, sets, chain, width, device):
        seen.append(launch)
        us = times(launch[:3], launch[3])
        return {"ok": False} if us is None else {"ok": True, "graph_us": us, "eager_us": us}
    monkeypatch.setattr(tune, "measure", measure)
    bench.GEMM_TIMES.clear()
    return seen


def test_a_tensor_core_part_takes_only_a_correct_design_at_least_3_percent_faster(plans, monkeypatch):
    p = plans["prefill"]
    gemms = [n for n in p.launched if p.parts[n].kind == "gemm"]
    assert gemms and all(p.parts[n].design["Tm"] > 1 for n in gemms)
    first = gemms[0]
    plan_design = p.parts[first].design

    def times(shape, d):
        if d == plan_design:
            return 100.0
        if d["KS"] > 1:
            return None          # the fastest would be a failed one: never chosen
        return 98.0 if shape[1] != p.parts[first].detail["N"] else 90.0

    seen = _fake_timings(monkeypatch, times)
    q, rec = bench.choose_gemms(p, "cpu", 4, None)
    assert {launch[0] for launch in seen} == {p.parts[n].detail["M"] for n in gemms} == {32}  # the parts' own rows
    e = rec[first]
    assert e["chosen"] == "measured best" and e["best_us"] == 90.0 and q.parts[first].design["KS"] == 1
    menu = tune.gemm_menu(p.parts[first].detail["chain"], p.parts[first].detail["M"],
                                     p.parts[first].detail["N"], p.parts[first].detail["K"], 5)[0]
    assert [r["design"] for r in e["rows"]][1:] == [d for d in menu if d != plan_design][:4]
    slower = [n for n in gemms if p.parts[n].detail["N"] != p.parts[first].detail["N"]]
    assert slower
    for name in slower:   # 2 % faster only: the plan stays
        assert rec[name]["chosen"] == "plan" and q.parts[name].design == p.parts[name].design


@pytest.mark.parametrize("name", ["NF", "RA"])
def test_a_fusion_decision_ab_keeps_the_faster_checked_variant(plans, monkeypatch, name):
    p = plans["decode"].with_fusion(Fusion(1, 1, 1, 0, 1, 1))
    ok = lambda us: {"check": {"ok": True}, "graph_us": us, "eager_us": 2 * us}  # noqa: E731
    other = "RA" if name == "NF" else "NF"
    for apart, fused, want in ((ok(10.0), ok(12.0), 0), (ok(12.0), ok(10.0), 1),
                               ({"check": {"ok": False}}, ok(12.0), 1), ("raise", ok(12.0), 1)):
        def measure(q, device, weights, apart=apart):
            assert getattr(q.fusion, name) == 0 and getattr(q.fusion, other) == 1
            assert q.fusion.PD == p.fusion.PD and q.parts == p.parts
            if apart == "raise":
                raise RuntimeError("a failing variant")
            return apart
        monkeypatch.setattr(qwen3_layer_measure, "measure", measure)
        q, m, ab = bench.decision_ab(p, "cpu", None, fused, name)
        assert ab[f"chosen_{name.lower()}"] == want and getattr(q.fusion, name) == want
        assert m is (fused if want else apart)
        if apart == "raise":
            assert "a failing variant" in ab[f"{name}=0"]["error"]
        if isinstance(apart, dict) and apart["check"]["ok"]:
            assert ab["saving_graph_us"] == apart["graph_us"] - fused["graph_us"]


@pytest.mark.parametrize("kind", ["prefill", "decode"])
def test_attention_takes_a_measured_design_of_its_own_family_only_when_3_percent_faster(plans, monkeypatch, kind):
    p = plans[kind]
    plan_design = {k: int(v) for k, v in p.parts["attn"].design.items()}
    tile = ("Br", "Bc") if kind == "prefill" else ("Bn",)
    for faster, want in ((0.90, "measured best"), (0.98, "plan")):
        asked = []

        def in_context(q, designs, device, w, faster=faster):
            asked.extend(designs)
            rows = [{"design": plan_design, "gpu_us": 100.0}]
            for d in designs:  # the first other design is the fastest; the second fails
                rows.append({"design": d, "gpu_us": 100.0 * faster} if len(rows) == 1 else
                            {"design": d, "error": "RuntimeError: failed"} if len(rows) == 2 else
                            {"design": d, "gpu_us": 120.0})
            return rows

        monkeypatch.setattr(qwen3_layer_measure, "attention_in_context", in_context)
        q, rec = bench.choose_attention(p, "cpu", None, 4)
        assert len(asked) == 4 and plan_design not in asked
        assert all(set(d) == set(plan_design) for d in asked)  # the scenario's own family
        assert len({tuple(d[k] for k in tile) for d in asked + [plan_design]}) >= 2  # more than one tile measured
        assert rec["chosen"] == want and rec["plan_us"] == 100.0
        assert q.parts["attn"].design == (asked[0] if want == "measured best" else p.parts["attn"].design)
        if want == "measured best":
            assert q.parts["attn"].detail["plan_design"] == p.parts["attn"].design


def test_the_attention_menu_is_feasible_and_spans_tiles():
    from formloop.expr import evaluate
    from formloop.library import attention_service
    from formloop.solve import SOLVERS

    for template, shape, tile in (("attention-prefill", "1,32,8,128,4096", ("Br", "Bc")),
                                  ("attention-decode", "1,32,8,128,2048", ("Bn",))):
        menu = tune.attention_menu(template, shape, 6)
        t = attention_service.template(template)
        wl = attention_service.attention_workload(template, shape)
        f = t.formulate(wl, tune.get_chip("h200"))
        best = SOLVERS["enumerate"](f)  # an independent solver: the menu opens at the optimum
        assert abs(evaluate(f.cost, {**f.params, **menu[0]}) - best.objective) <= 1e-9 * best.objective
        assert len(menu) == 6 and len({tuple(sorted(d.items())) for d in menu}) == 6
        assert all(not t.check(d, wl, tune.get_chip("h200")) for d in menu)
        assert len({tuple(d[k] for k in tile) for d in menu}) >= 3
