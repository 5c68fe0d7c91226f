"""K1, K3, whole-template proofs and certificates of gemm-tiling."""
import json

import pytest

from formloop.errors import InvalidInput
from formloop.expr import evaluate
from formloop.library import get_template
from formloop.library.gemm_tiling import fixed_parameters
from formloop.verify import Certificate, Verdict, check_k1, check_k3, prove_template


@pytest.fixture(scope="module")
def certs():
    return {pre: prove_template(get_template("gemm-tiling", pre=pre)) for pre in ("exact", "strong", "weak")}


def test_k1_holds_for_exact_and_strong():
    for pre in ("exact", "strong"):
        assert check_k1(get_template("gemm-tiling", pre=pre)).verdict is Verdict.PROVED


def test_k1_fails_for_the_weak_contract_with_a_concrete_design_and_shape():
    t = get_template("gemm-tiling", pre="weak")
    r = check_k1(t)
    assert r.verdict is Verdict.COUNTEREXAMPLE
    w = r.witness
    assert set(w) >= {"Tm", "Tn", "Tk", "S", "P", "beta", "M", "N", "K"}
    env = {**fixed_parameters(t), **w}
    # independent of z3: the witness meets every constraint and breaks the lifetime precondition
    assert all(bool(evaluate(c.expr, env)) for c in t.constraints)
    assert not w["P"] <= w["S"] - 2 + w["beta"]
    assert "lifetime" in r.replay


def test_k3_holds_with_a_witness_that_fits_every_shape():
    t = get_template("gemm-tiling")
    r = check_k3(t)
    assert r.verdict is Verdict.PROVED
    fixed = fixed_parameters(t)
    for design in r.witness["designs"]:
        for shape in [(1, 1, 1), (1000, 1000, 1000), (7, 65537, 3)]:
            env = {**fixed, **design, **dict(zip("MNK", shape))}
            assert all(bool(evaluate(c.expr, env)) for c in t.constraints)


def test_k3_fails_when_no_design_fits():
    t = get_template("gemm-tiling")
    tiny = {**fixed_parameters(t), "Ms": 100}  # not even the smallest tiles fit 100 bytes
    r = check_k3(t, fixed=tiny)
    assert r.verdict is Verdict.COUNTEREXAMPLE and "no design" in r.replay


def test_exact_and_strong_templates_are_proved(certs):
    for pre in ("exact", "strong"):
        c = certs[pre]
        assert c.verdict is Verdict.PROVED, [r.obligation for r in c.obligations if not r.proved]
        names = [r.obligation for r in c.obligations]
        assert "K1" in names and "K3" in names
        # one query per menu tile size for each index obligation
        assert sum(n.startswith("coverage[") for n in names) == 5 + 5 + 4
    exact_schedules = {r.obligation for r in certs["exact"].obligations if r.obligation.startswith("lifetime[")}
    assert len(exact_schedules) == 9  # every (S, P, beta) of the menus with P <= S - 2 + beta
    strong_schedules = {r.obligation for r in certs["strong"].obligations if r.obligation.startswith("lifetime[")}
    assert all("beta=1" in s for s in strong_schedules)


def test_weak_template_certificate_is_a_counterexample(certs):
    c = certs["weak"]
    assert c.verdict is Verdict.COUNTEREXAMPLE
    bad = {r.obligation for r in c.obligations if r.verdict is Verdict.COUNTEREXAMPLE}
    assert bad == {"K1", "lifetime[S=1,P=0,beta=0]", "lifetime[S=2,P=1,beta=0]", "lifetime[S=3,P=2,beta=0]"}


def test_certificate_round_trips_and_rechecks(certs):
    c = certs["exact"]
    back = Certificate.from_json(c.to_json())
    assert back.verdict is c.verdict and back.template_hash == c.template_hash
    assert [r.obligation for r in back.obligations] == [r.obligation for r in c.obligations]
    assert back.recheck(get_template(back.template, **dict(back.options))).agrees


def test_recheck_reports_what_changed(certs):
    d = json.loads(certs["exact"].to_json())
    d["template_hash"] = "0000000000000000"
    d["obligations"][0]["verdict"] = "unresolved"
    changes = Certificate.from_json(json.dumps(d)).recheck(get_template("gemm-tiling")).changes
    assert any("content hash" in ch for ch in changes)
    assert any(ch.startswith("K1: unresolved -> proved") for ch in changes)


def test_weak_certificate_keeps_replayable_traces(certs):
    back = Certificate.from_json(certs["weak"].to_json())
    race = next(r for r in back.obligations if r.obligation == "lifetime[S=2,P=1,beta=0]")
    assert race.trace and all(isinstance(e, tuple) for e in race.trace)


def test_bad_certificate_text_names_the_field():
    with pytest.raises(InvalidInput, match="certificate"):
        Certificate.from_json("{}")


def test_check_claim_proves_what_holds_and_replays_what_does_not():
    from formloop.expr import ceildiv, implies, param
    from formloop.library.gemm_tiling import K, Ms, S, Tk, Tm, Tn
    from formloop.verify import check_claim

    t = get_template("gemm-tiling")
    x = param("x", lower=None)
    # every reduction index lies in the k-tiles a block walks: true for every design and every K
    walk = implies((x >= 0) & (x < K), x < ceildiv(K, Tk) * Tk)
    assert check_claim(t, "tail", walk).verdict is Verdict.PROVED
    # false: the slots of every allowed design fit in half the shared memory
    half = check_claim(t, "half", 2 * S * 4 * (Tm + Tn) * Tk <= Ms, assume="constraints")
    assert half.verdict is Verdict.COUNTEREXAMPLE
    w = {**fixed_parameters(t), **half.witness}
    assert all(bool(evaluate(c.expr, w)) for c in t.constraints)
    assert 2 * w["S"] * 4 * (w["Tm"] + w["Tn"]) * w["Tk"] > w["Ms"]
    with pytest.raises(InvalidInput, match="assume"):
        check_claim(t, "bad", walk, assume="everything")
