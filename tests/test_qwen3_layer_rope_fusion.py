"""The layer template's option rope_fusion (RA): the q/k RMSNorm + RoPE + KV-cache write inside decode
attention. Without the option the template is the one before RA (same hash); with it the MILP agrees with
enumeration, RA needs ra_ok, the parts and hand-overs drop the rope kernel, every choice's cost is the sum of
the parts it launches. That RA = 1 choices compute the layer (the interpreter against the fp32 reference) and the
plan's attn_rope part: test_qwen3_layer_norm_fusion (one checker run and one plan for both options)."""
import pytest

from formloop.errors import InvalidInput
from formloop.library import get_template
from formloop.library.qwen3_layer_template import NAME, NORM_PARTS, PARTS, ROPE_PARTS, Fusion, all_fusions
from formloop.solve import enumerate_designs, solve_milp

# distinct part times (us); the relayout is a prefill part: 0 at decode, as the plan binds it
TIMES = {**{f"t_{n}": float(3 + k) for k, n in enumerate([*PARTS, *NORM_PARTS, *ROPE_PARTS])}, "t_relayout": 0.0}


def _formulate(ra_ok: int, nf: bool = True, **extra):
    t = get_template(NAME, norm_fusion=nf, rope_fusion=True)
    values = {**TIMES, **extra, "t_pdl": 0.5, "n_pdl_fixed": 4, "ra_ok": ra_ok, **({"nf_ok": 1} if nf else {})}
    if not nf:
        values = {k: v for k, v in values.items() if k[2:] not in NORM_PARTS}
    return t, t.formulate(values)


def test_option_off_is_the_template_before_ra():
    off = get_template(NAME, norm_fusion=True)
    assert "RA" not in [d.name for d in off.decisions] and "ra_ok" not in [p.name for p in off.params]
    assert get_template(NAME, norm_fusion=True, rope_fusion=False).content_hash == off.content_hash
    assert get_template(NAME, norm_fusion=True, rope_fusion=True).content_hash != off.content_hash
    with pytest.raises(InvalidInput, match="rope_fusion"):
        get_template(NAME, rope_fusion="yes")


@pytest.mark.parametrize("nf", [True, False])
def test_ra_needs_ra_ok_and_milp_matches_enumeration(nf):
    for ra_ok in (0, 1):
        # attention with the rope inside cheaper than attention plus the rope kernel: taken exactly where it exists
        t, f = _formulate(ra_ok, nf, t_attn_rope=TIMES["t_attn"] + 0.1)
        s, e = solve_milp(f), enumerate_designs(f)
        assert s.objective == pytest.approx(e.objective, rel=1e-9)
        assert s.assignment["RA"] == ra_ok
    # dearer than the two kernels (even with the hand-over it saves): not taken
    t, f = _formulate(1, nf, t_attn_rope=TIMES["t_attn"] + TIMES["t_rope"] + 0.6)
    assert solve_milp(f).assignment["RA"] == 0


def test_cost_is_the_sum_of_the_launched_parts_less_the_pdl_saving():
    """Every choice's cost, from the template, against the parts it launches summed here."""
    t, f = _formulate(1)
    for fu in all_fusions((0, 1), (0, 1), (0, 1)):
        want = sum(TIMES[f"t_{p}"] for p in fu.parts(False)) - (0.5 * fu.handovers(False) if fu.PD else 0.0)
        got = t.evaluate_terms({**fu.as_dict(), "NF": fu.NF, "RA": fu.RA}, f.params)["cost"]
        assert got == pytest.approx(want), fu


def test_ra_parts_and_handovers():
    fu = Fusion(1, 1, 1, 1, 1, 1)
    assert fu.parts(False) == ("qkv_norm", "attn_rope", "oproj_add", "gateup_glu_norm", "down_add")
    assert Fusion(0, 0, 0, 1, 0, 1).parts(False) == ("norm1", "qkv", "attn_rope", "oproj", "add1", "norm2",
                                                     "gateup", "silu_mul", "down", "add2")
    assert fu.handovers(False) == Fusion(1, 1, 1, 1, 1).handovers(False) - 1
    assert fu.as_dict()["RA"] == 1 and "RA" not in Fusion(1, 1, 1, 1, 1).as_dict()
    assert Fusion.of(fu.as_dict()) == fu

