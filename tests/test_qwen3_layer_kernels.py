"""Every fusion choice of the Qwen3 layer computes the layer: Triton interpreter at the tiny config
vs the fp32 reference (output and KV cache), and a planted wiring fault is caught."""
import os

import pytest

os.environ["TRITON_INTERPRET"] = "1"  # noqa: E402 (before triton kernels are imported)

torch = pytest.importorskip("torch")

from formloop.library.qwen3_layer import MODELS, new_weights, parse_scenario  # noqa: E402
from formloop.library.qwen3_layer_check import check_fusion, tiny_designs  # noqa: E402
from formloop.library.qwen3_layer_kernels import LayerKernels  # noqa: E402
from formloop.library.qwen3_layer_template import Fusion, all_fusions  # noqa: E402

TINY = MODELS["tiny"]


@pytest.mark.parametrize("scenario", ["prefill:8", "decode:40"])
@pytest.mark.parametrize("fusion", all_fusions(), ids=lambda f: f.text)
def test_every_fusion_computes_the_layer(fusion, scenario):
    sc = parse_scenario(scenario)
    r = check_fusion(TINY, sc, fusion, tiny_designs(sc), seed=3)
    assert r["ok"], r
    assert r["history_kept"] and not r["nan"]


def test_steps_are_the_fusions_parts():
    for scenario in ("prefill:8", "decode:40"):
        sc = parse_scenario(scenario)
        for fu in (Fusion(1, 1, 1), Fusion(0, 0, 0), Fusion(2, 0, 1)):
            layer = LayerKernels(TINY, sc, fu, tiny_designs(sc), new_weights(TINY), "cpu")
            x = torch.zeros(sc.tokens, TINY.hidden, dtype=torch.bfloat16)
            names = [n for n, _ in layer.steps(x, None, None, x)]
            assert tuple(names) == fu.parts(sc.kind == "prefill")


def test_a_wiring_fault_is_caught():
    """The glu epilogue given gate and up rows not interleaved: the check must refuse it."""
    sc = parse_scenario("decode:40")
    fu = Fusion(1, 1, 1)
    w = new_weights(TINY, seed=0)
    layer = LayerKernels(TINY, sc, fu, tiny_designs(sc), w, "cpu")
    layer.w_gu = torch.cat([w["w_gate"], w["w_up"]]).contiguous()
    r = check_fusion(TINY, sc, fu, tiny_designs(sc), seed=0, kernels=layer)
    assert not r["ok"] and r["out_rel_err"] > 0.05


def test_a_missing_residual_is_caught():
    sc = parse_scenario("prefill:8")
    fu = Fusion(0, 1, 1)
    w = new_weights(TINY, seed=0)
    layer = LayerKernels(TINY, sc, fu, tiny_designs(sc), w, "cpu")
    layer.add1 = lambda t, inputs, out: out.copy_(t)  # drops the residual
    r = check_fusion(TINY, sc, fu, tiny_designs(sc), seed=0, kernels=layer)
    assert not r["ok"]


def test_cache_capacity_is_checked():
    sc = parse_scenario("decode:40")
    layer = LayerKernels(TINY, sc, Fusion(), tiny_designs(sc), new_weights(TINY), "cpu")
    bad = torch.zeros(1, TINY.kv_heads, 64, TINY.head_dim, dtype=torch.bfloat16)
    with pytest.raises(Exception) as e:
        layer.check_cache(bad, bad)
    assert "capacity" in str(e.value)
