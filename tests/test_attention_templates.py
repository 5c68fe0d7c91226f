"""attention-decode and attention-prefill as contracts: K1/K3 and the certificate, MILP against
enumeration, the walls against the kernels' own arithmetic, SOL causal counting against brute
force, named errors, and the service functions the CLI calls."""
from __future__ import annotations

import pytest

from formloop.errors import InvalidInput
from formloop.hw.chips import get_chip
from formloop.library import attention_service as service
from formloop.library import get_template, template_names
from formloop.library.attention_prefill import workload as prefill_workload
from formloop.library.attention_workload import parse_shape, workload
from formloop.sol.ops import causal_pairs
from formloop.solve import enumerate_designs, solve_milp
from formloop.verify import check_instance, prove_template
from formloop.verify.attention_replay import replay_causal_walk
from formloop.verify.kv_cover import CausalWalk

H200 = get_chip("h200")
BENCH = (1, 32, 8, 128)


def test_both_templates_are_registered():
    assert {"attention-decode", "attention-prefill"} <= set(template_names())


@pytest.mark.parametrize("name", ["attention-decode", "attention-prefill"])
def test_certificate_is_proved(name):
    cert = prove_template(get_template(name), timeout_s=30)
    failed = [(r.obligation, r.verdict, r.reason) for r in cert.obligations if not r.proved]
    assert cert.verdict.value == "proved", failed
    names = {r.obligation.split("[")[0] for r in cert.obligations}
    assert {"K1", "K3", "tile-loop", "tile-step", "normalize", "rescale-step"} <= names
    decode = {"kv-coverage", "kv-exact-once", "merge-step", "head-packing", "paged-address", "tile-in-page"}
    assert (decode <= names) if name == "attention-decode" else ({"causal-coverage", "causal-no-future"} <= names)


@pytest.mark.parametrize("L", [512, 32768])
def test_decode_milp_equals_enumeration(L):
    f = get_template("attention-decode").formulate(workload((*BENCH, L)), H200)
    milp, en = solve_milp(f), enumerate_designs(f)
    assert milp.objective == pytest.approx(en.objective, rel=1e-6)
    assert not check_instance(f.template, milp.assignment, workload((*BENCH, L)), H200).violations


@pytest.mark.parametrize("L", [512, 8192])
def test_prefill_milp_equals_enumeration(L):
    f = get_template("attention-prefill").formulate(prefill_workload((*BENCH, L)), H200)
    milp, en = solve_milp(f), enumerate_designs(f)
    assert milp.objective == pytest.approx(en.objective, rel=1e-6)
    assert milp.assignment["Br"] % milp.assignment["Bc"] == 0


def test_decode_c4_matches_the_kernel_split():
    """C4 admits exactly the split counts for which at least half the splits of the kernel's walk hold keys, the
    empty ones all trailing (counted on the walk itself, not on the template's formula)."""
    from formloop.expr import evaluate
    from formloop.library import attention_decode as ad
    from formloop.library.attention_decode_kernel import splits_fit
    from formloop.verify.kv_cover import SplitWalk

    rule = next(c.expr for c in get_template("attention-decode").constraints if c.name == "C4")
    admitted_empty = 0
    for L in (1, 40, 100, 513, 2049, 4097, 8193):
        for Bn in (16, 64, 128, 256):
            for KS in ad.KS.decision.menu:
                c4 = bool(evaluate(rule, {"L": L, "Bn": Bn, "KS": KS}))
                ranges = SplitWalk().ranges(L, Bn, KS)
                full = [lo < hi for lo, hi in ranges]
                assert full == sorted(full, reverse=True)  # the empty splits trail
                assert c4 == (2 * sum(full) >= KS) == splits_fit(L, Bn, KS), (L, Bn, KS)
                admitted_empty += c4 and not all(full)
    assert admitted_empty > 0  # the rule admits designs with empty trailing splits
    # a decode step's length (history + 1) keeps one tile per split: 17 tiles of 128 in 24 splits
    assert bool(evaluate(rule, {"L": 2049, "Bn": 128, "KS": 24}))
    assert SplitWalk().per_split(2049, 128, 24) == 1


def test_prefill_tile_steps_cover_the_causal_pairs():
    """The cost's tile-step count (plain + diagonal) is the walk's tile count: every causal pair
    sits in one counted tile, and the tiles hold no more than one Br x Bc block each."""
    from formloop.expr import evaluate
    from formloop.library import attention_prefill as ap

    for L in (64, 129, 300):
        for Br, Bc in ((128, 64), (64, 64), (64, 16)):
            env = {"L": L, "Br": Br, "Bc": Bc, "causal": 1}
            steps = float(evaluate(ap.steps_plain + ap.steps_diag, env))
            walk = CausalWalk().blocks(L, Br, Bc)
            tiles = sum(len(range(lp.lo, lp.hi, lp.tile)) for _, a, b in walk for lp in (*a, *b))
            assert tiles <= steps <= tiles + Br // Bc  # the last block's diagonal is counted whole
            assert replay_causal_walk(L, Br, walk).visits == causal_pairs(L, L) <= steps * Br * Bc


def test_sol_counts_causal_pairs():
    r = service.sol("attention-prefill", (*BENCH, 8192))
    assert r["flops"] == 4 * 32 * 128 * causal_pairs(8192, 8192) and r["source"] == "sol"
    d = service.sol("attention-decode", (*BENCH, 32768))
    assert d["bytes"] == 2 * (2 * 32 * 128 + 2 * 8 * 32768 * 128) and d["bound"] == "memory"


@pytest.mark.parametrize("shape,match", [
    ("1,32,8,96,512", "head dim D"), ("1,30,8,128,512", "query heads Hq"), ("1,32,8,128,0", "KV length L"),
    ("1,32,8,128", "five integers"), ("1,32,8,x,512", "shape D"),
])
def test_bad_shapes_are_named_errors(shape, match):
    with pytest.raises(InvalidInput, match=match):
        service.solve("attention-decode", shape)


def test_bad_options_are_named_errors():
    with pytest.raises(InvalidInput, match="dtype"):
        get_template("attention-decode", dtype="fp32")
    with pytest.raises(InvalidInput, match="chip"):
        service.solve("attention-prefill", "1,32,8,128,512", chip="gb10")
    with pytest.raises(InvalidInput, match="calibration term"):
        get_template("attention-decode", calibration={"eta_nope": 1.0}).formulate(workload((*BENCH, 512)), H200)
    with pytest.raises(InvalidInput, match="attention template"):
        service.solve("gemm-tiling", "1,32,8,128,512")
    with pytest.raises(InvalidInput, match="page size"):
        service.attention_workload("attention-prefill", "1,32,8,128,512", page=16)
    with pytest.raises(InvalidInput, match="calibration"):
        service.solve("attention-decode", "1,32,8,128,512", calibration="/nonexistent.json")


def test_service_solve_and_measure_label_every_number(tmp_path):
    r = service.solve("attention-decode", "1,32,8,128,8192", page=16)
    assert r["source"] == "model" and r["sol"]["source"] == "sol" and r["objective_us"] >= r["sol"]["floor_us"]
    assert r["workload"]["page"] == 16 and set(r["design"]) == {"Bn", "KS", "QP", "S", "W", "MG", "TM"}
    assert r["design"]["TM"] == 0 or 16 % r["design"]["Bn"] == 0  # C6: a TMA tile inside one page
    m, _ = service.measure_template(service.template("attention-prefill"), "1,32,8,128,1024")
    assert m["measurement"]["tier"] in ("model", "gpu") and m["rates"]["source"] == m["measurement"]["tier"]
    if m["measurement"]["tier"] == "model":
        assert m["fallback"] and m["measurement"]["latency_us"] == pytest.approx(m["objective_us"])


def test_calibration_file_changes_the_model(tmp_path):
    from formloop.evaluate.calibrate import Calibration

    t = get_template("attention-decode")
    cal = Calibration(template=t.name, template_hash=t.content_hash, chip="h200",
                      values={"eta_bw": 0.5, "t_launch": 5e-6}, priors={}, points=0,
                      rms_log_error_before=0.0, rms_log_error_after=0.0)
    path = tmp_path / "cal.json"
    cal.save(path)
    before = service.solve("attention-decode", "1,32,8,128,32768")
    after = service.solve("attention-decode", "1,32,8,128,32768", calibration=str(path))
    assert after["calibration"] == cal.key and after["objective_us"] > before["objective_us"]


def test_parse_shape_forms():
    assert parse_shape("1, 32, 8, 128, 4096") == parse_shape((1, 32, 8, 128, 4096)) == \
        parse_shape({"B": 1, "Hq": 32, "Hkv": 8, "D": 128, "L": 4096})


def test_shape_text_names_the_workload():
    """The shape grammar of formloop.workload (named fields, ASCII digits only), with page= and
    causal= after the five fields; each refused with its field named."""
    assert parse_shape("B=1,Hq=32,Hkv=8,D=128,L=4096") == parse_shape("1,32,8,128,4096")
    assert service.attention_workload("attention-decode", "1,32,8,128,4096,page=16")["page"] == 16
    assert service.attention_workload("attention-prefill", "1,32,8,128,4096,causal=0")["causal"] == 0
    w = service.workload_spec("attention-decode", "1,32,8,128,4096,page=16")
    assert w.key == "attention-decode bf16 B=1 Hq=32 Hkv=8 D=128 L=4096 page=16" and w.params["e"] == 2
    for text, field in [("1,32,8,128,٣", "shape L"), ("1,32,8,128,512,9", "attention shape"),
                        ("1,32,8,128,512,pages=3", "attention shape name"), ("1,32,8,128,3000000000", "shape L")]:
        with pytest.raises(InvalidInput) as info:
            parse_shape(text)
        assert info.value.field == field, text
    with pytest.raises(InvalidInput, match="page"):
        service.attention_workload("attention-decode", "1,32,8,128,512,page=16", page=32)
    with pytest.raises(InvalidInput, match="causal"):
        service.attention_workload("attention-decode", "1,32,8,128,512,causal=0")
    with pytest.raises(InvalidInput, match="allowed: bf16, fp16"):
        service.workload_spec("attention-decode", "1,32,8,128,512", "fp32")
