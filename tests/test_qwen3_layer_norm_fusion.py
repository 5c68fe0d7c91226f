"""The layer template's option norm_fusion (NF): the two RMSNorms inside the decode GEMVs. Without the
option the template is the one before NF (same hash); with it the MILP agrees with enumeration, NF
needs nf_ok and excludes R1 = 2, the parts and hand-overs drop the norms, and the NF = 1 choices
compute the layer in the interpreter against the fp32 reference (decode)."""
import json
import os
import subprocess
import sys

import pytest

from formloop.errors import InvalidInput
from formloop.library import get_template
from formloop.library.qwen3_layer_template import NAME, NORM_PARTS, PARTS, Fusion, all_fusions
from formloop.solve import enumerate_designs, solve_milp

# distinct part times (us); the relayout is a prefill part: 0 at decode, as the plan binds it
TIMES = {**{f"t_{n}": float(3 + k) for k, n in enumerate([*PARTS, *NORM_PARTS])}, "t_relayout": 0.0}


def _formulate(nf_ok: int, **extra):
    t = get_template(NAME, norm_fusion=True)
    return t, t.formulate({**TIMES, **extra, "t_pdl": 0.5, "n_pdl_fixed": 4, "nf_ok": nf_ok})


def test_option_off_is_the_template_before_nf():
    off = get_template(NAME)
    assert "NF" not in [d.name for d in off.decisions] and "nf_ok" not in [p.name for p in off.params]
    assert get_template(NAME, norm_fusion=False).content_hash == off.content_hash
    assert get_template(NAME, norm_fusion=True).content_hash != off.content_hash
    with pytest.raises(InvalidInput, match="norm_fusion"):
        get_template(NAME, norm_fusion="yes")


def test_nf_needs_nf_ok_and_excludes_r1_2_and_milp_matches_enumeration():
    cheap = {"t_qkv_norm": 1.0, "t_gateup_glu_norm": 1.0, "t_gateup_norm": 1.0}
    for nf_ok in (0, 1):
        t, f = _formulate(nf_ok, **cheap)
        s, e = solve_milp(f), enumerate_designs(f)
        assert s.objective == pytest.approx(e.objective, rel=1e-9)
        assert s.assignment["NF"] == nf_ok   # cheap fused parts are taken exactly where they exist
        if nf_ok:
            assert s.assignment["R1"] != 2
    t, f = _formulate(1)
    bad = {"R1": 2, "GL": 1, "R2": 1, "PD": 1, "NF": 1}
    assert any(v.name == "NF2" for v in t.check(bad, f.params))


def test_cost_is_the_sum_of_the_launched_parts_less_the_pdl_saving():
    """Every choice's cost, from the template, against the parts it launches summed here."""
    t, f = _formulate(1)
    for fu in all_fusions((0, 1), (0, 1)):
        want = sum(TIMES[f"t_{p}"] for p in fu.parts(False)) - (0.5 * fu.handovers(False) if fu.PD else 0.0)
        got = t.evaluate_terms({**fu.as_dict(), "NF": fu.NF}, f.params)["cost"]
        assert got == pytest.approx(want), fu


def test_nf_parts_and_handovers():
    fu = Fusion(1, 1, 1, 1, 1)
    assert fu.parts(False) == ("qkv_norm", "rope", "attn", "oproj_add", "gateup_glu_norm", "down_add")
    assert Fusion(0, 0, 0, 1, 1).parts(False) == ("qkv_norm", "rope", "attn", "oproj", "add1", "gateup_norm",
                                                  "silu_mul", "down", "add2")
    assert fu.handovers(False) == Fusion(1, 1, 1, 1).handovers(False) - 2
    assert fu.as_dict()["NF"] == 1 and "NF" not in Fusion(1, 1, 1, 1).as_dict()
    assert all(not (f.NF and f.R1 == 2) for f in all_fusions((0,), (0, 1)))


def test_nf_and_ra_choices_compute_the_layer_in_the_interpreter():
    """NF = 1 choices (PD on and off), one with the rope inside attention too (RA = 1), and RA = 1 alone (one
    checker run for both options: test_qwen3_layer_rope_fusion has RA's template cases)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "formloop.library.qwen3_layer_check", "--norm-fusion", "--rope-fusion",
                           "1,1,1,1,1", "0,0,0,1,1,1", "1,1,1,0,1", "0,0,0,0,0,1"], capture_output=True, text=True,
                          env=env, timeout=900, check=False)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    decode = [r for r in rows if r["scenario"].startswith("decode")]
    assert len(decode) == 4 and all(r["ok"] for r in rows) and proc.returncode == 0, (proc.stderr[-2000:], rows)
    assert [(r["fusion"].get("NF", 0), r["fusion"].get("RA", 0)) for r in decode] == [(1, 0), (1, 1), (1, 0), (0, 1)]


def test_layer_plan_with_norm_and_rope_fusion_solves_the_fused_parts():
    """One plan with both options (qwen3-8b decode): the norm-fused GEMVs and attention with the rope inside
    (test_qwen3_layer_rope_fusion has RA's template cases)."""
    from formloop.hw.chips import get_chip
    from formloop.library.qwen3_layer import get_model, parse_scenario
    from formloop.library.qwen3_layer_plan import part_floor_us, plan

    cfg = get_model("qwen3-8b")
    p = plan(cfg, parse_scenario("decode:2048"), workers=1, norm_fusion=True, rope_fusion=True)
    for n in NORM_PARTS:
        assert p.parts[n].design["Tm"] == 1 and p.parts[n].design["KS"] == 1 and p.parts[n].time_us > 0
    assert p.layer["norm_fusion"] is True and p.layer["rope_fusion"] is True
    launched = [r["part"] for r in p.as_dict()["parts"]]   # what the benchmark writes for the plan
    assert launched == list(p.fusion.parts(False)) and "qkv_norm" in launched
    assert p.model_us == pytest.approx(min(c["model_us"] for c in p.layer["choices"]), rel=1e-6)
    attn, fused = p.parts["attn"], p.parts["attn_rope"]
    assert fused.design == attn.design and fused.time_us > attn.time_us and fused.detail["feasible"]
    assert ("attn_rope" in launched) == bool(p.fusion.RA) and ("rope" in launched) != bool(p.fusion.RA)
    chip = get_chip("h200")  # the fused part's floor: attention's and the rope's bytes, less q's round trip
    assert part_floor_us(p, "attn", chip) < part_floor_us(p, "attn_rope", chip) < \
        part_floor_us(p, "attn", chip) + part_floor_us(p, "rope", chip)
    # prefill rows are more than a GEMV takes (the rule is the same at any width: the tiny config, 9 rows)
    pre = plan(get_model("tiny"), parse_scenario("prefill:9"), workers=1, norm_fusion=True, rope_fusion=True)
    assert pre.fusion.NF == 0 and pre.parts["qkv_norm"].detail["feasible"] is False
    assert pre.fusion.RA == 0 and pre.parts["attn_rope"].detail["feasible"] is False
