"""The qwen3-layer fusion template: the MILP's choice equals brute force over the choices, the
parts each choice launches, the planner's part shapes."""
import random

import pytest

from formloop.library import get_template
from formloop.library.qwen3_layer import MODELS, get_model, parse_scenario
from formloop.library.qwen3_layer_plan import AttentionPart, GemmPart, layer_floor, part_specs
from formloop.library.qwen3_layer_template import PARTS, Fusion, all_fusions
from formloop.solve import enumerate_designs, solve_milp


PLAIN = {"add1", "silu_mul", "add2", "relayout", "attn"}  # launched plainly (prefill attention too)


def _handovers(fu, prefill=True):
    """Hand-overs between two PDL kernels, counted by walking the launch order (and into the next layer)."""
    seq = list(fu.parts(prefill=prefill)) + ["norm1"]
    plain = PLAIN if prefill else PLAIN - {"attn"}
    return sum(1 for a, b in zip(seq, seq[1:]) if a not in plain and b not in plain)


def _brute(times, t_pdl=0.5):
    """Each choice's time as the sum of the parts it launches (prefill: the relayout included), less
    t_pdl per PDL hand-over with PD = 1."""
    return {fu: sum(times[p] for p in fu.parts(prefill=True)) - fu.PD * t_pdl * _handovers(fu)
            for fu in all_fusions((0, 1))}


def _wl(times, t_pdl=0.5, prefill=True):
    return {**{f"t_{p}": v for p, v in times.items()}, "t_pdl": t_pdl, "n_pdl_fixed": 2 if prefill else 4}


def test_handover_count_matches_the_launch_order():
    for fu in all_fusions((1,)):
        for prefill in (True, False):
            assert fu.handovers(prefill) == _handovers(fu, prefill), (fu, prefill)
    assert Fusion(1, 1, 1, 1).handovers(False) == 8


@pytest.mark.parametrize("t_pdl", [0.5, -0.3])
def test_pdl_decision_follows_its_saving(t_pdl):
    times = {p: 3.0 for p in PARTS}
    s = solve_milp(get_template("qwen3-layer").formulate(_wl(times, t_pdl)))
    assert s.assignment["PD"] == (1 if t_pdl > 0 else 0)


@pytest.mark.parametrize("seed", range(6))
def test_milp_matches_brute_force(seed):
    rng = random.Random(seed)
    times = {p: rng.uniform(0.5, 50.0) for p in PARTS}
    t = get_template("qwen3-layer")
    f = t.formulate(_wl(times))
    s = solve_milp(f)
    brute = _brute(times)
    best = min(brute.values())
    assert s.objective == pytest.approx(best, rel=1e-9, abs=1e-9)
    assert brute[Fusion.of(s.assignment)] == pytest.approx(best, rel=1e-9)
    assert enumerate_designs(f).objective == pytest.approx(best, rel=1e-9)


def test_choice_flips_with_the_times():
    times = {p: 10.0 for p in PARTS}
    times["add2"] = 0.0
    times["down"] = 1.0           # down + add2 = 1 < down_add = 10: the add stays a kernel
    t = get_template("qwen3-layer")
    s = solve_milp(t.formulate(_wl(times, 0.0)))
    assert s.assignment["R2"] == 0
    times["down_add"] = 0.5
    s = solve_milp(t.formulate(_wl(times, 0.0)))
    assert s.assignment["R2"] == 1


def test_twelve_choices_and_their_parts():
    fus = all_fusions()
    assert len(set(fus)) == 12 and len(set(all_fusions((0, 1)))) == 24
    assert Fusion(1, 1, 1).parts(False) == ("norm1", "qkv", "rope", "attn", "oproj_add", "norm2", "gateup_glu",
                                            "down_add")
    assert Fusion(0, 0, 0).parts(True) == ("norm1", "qkv", "rope", "attn", "relayout", "oproj", "add1", "norm2",
                                           "gateup", "silu_mul", "down", "add2")
    assert "addnorm2" in Fusion(2, 1, 1).parts() and "norm2" not in Fusion(2, 1, 1).parts()


def test_part_shapes_real_config():
    cfg = get_model("qwen3-8b")
    s = part_specs(cfg, parse_scenario("prefill:2048"))
    assert s["qkv"] == GemmPart(2048, 6144, 4096)
    assert s["gateup_glu"] == GemmPart(2048, 24576, 4096, "glu(act=silu)")
    assert s["down_add"] == GemmPart(2048, 4096, 12288, "add(name=residual)")
    assert s["attn"] == AttentionPart("attention-prefill", "1,32,8,128,2048")
    d = part_specs(cfg, parse_scenario("decode:4096"))
    assert d["attn"] == AttentionPart("attention-decode", "1,32,8,128,4097")
    assert d["relayout"].bytes == 0


def test_layer_floor_decode_is_the_weights_and_cache():
    cfg = get_model("qwen3-8b")
    f = layer_floor(cfg, parse_scenario("decode:4096"))
    weights = 2 * (6144 * 4096 + 4096 * 4096 + 3 * 12288 * 4096)
    assert f["bytes"] >= weights + 2 * 2 * 8 * 128 * 4097
    assert f["memory_us"] > f["compute_us"]
    assert MODELS["tiny"].hidden == 256
