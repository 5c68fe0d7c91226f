"""Template reuse (issue 18 part 2): copy the nearest solved assignment vs re-solve, at model tier.

Checked against independent computations: the copy is the nearest solved workload's own optimum
(re-solved here), the re-solve equals exhaustive enumeration's optimum (and the MILP's), and a
re-solve is never slower than the copy under the model (it would be, if the solver missed)."""
from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from formloop.api import template_reuse
from formloop.cli import app
from formloop.codesign.reuse import load_reuse_study, nearest
from formloop.errors import InvalidInput
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.solve import enumerate_designs, solve_milp

ATTENTION = """name = "t-attn"
template = "attention-decode"
chip = "h200"
solver = "enumerate"
[solved]
"a.L1024" = { B = 1, Hq = 32, Hkv = 8, D = 128, L = 1024 }
"a.L16384" = { B = 1, Hq = 32, Hkv = 8, D = 128, L = 16384 }
[held_out]
"a.L3072" = { B = 1, Hq = 32, Hkv = 8, D = 128, L = 3072 }
"b.L8192" = { B = 1, Hq = 64, Hkv = 8, D = 128, L = 8192 }
"g1.L2048" = { B = 1, Hq = 8, Hkv = 8, D = 128, L = 2048 }  # one query head per KV head: QP = 1 only
"""
GEMM = """name = "t-gemm"
template = "gemm-tiling-gpu"
solver = "enumerate"
[options]
dtype = "bf16"
[solved]
"q.gate_up.m128" = { M = 128, N = 24576, K = 4096 }
"q.down.m2048" = { M = 2048, N = 4096, K = 12288 }
[held_out]
"l.gate_up.m64" = { M = 64, N = 57344, K = 8192 }
"l.down.m1024" = { M = 1024, N = 8192, K = 28672 }
"""


@pytest.fixture
def studies(tmp_path):
    out = {}
    for name, text in (("attention", ATTENTION), ("gemm", GEMM)):
        p = tmp_path / f"{name}.toml"
        p.write_text(text)
        out[name] = str(p)
    return out


def _strip(r: dict) -> dict:
    r = dict(r)
    r["rows"] = [{k: v for k, v in row.items() if k != "solve_s"} for row in r["rows"]]
    r["solved"] = [{k: v for k, v in s.items() if k != "solve_s"} for s in r["solved"]]
    return r


@pytest.mark.parametrize("family", ["attention", "gemm"])
def test_deterministic_and_resolve_never_worse(studies, family):
    a, b = template_reuse(studies[family]), template_reuse(studies[family])
    assert _strip(a) == _strip(b)
    s = load_reuse_study(studies[family])
    t, chip = s.family(), get_chip("h200")
    solved = {x["workload"]: x for x in a["solved"]}
    for row in a["rows"]:
        params = s.held_out[row["workload"]]
        near, _ = nearest(params, s.solved)
        assert row["nearest"] == near
        # the copy is the nearest solved workload's optimum, found again here
        assert row["copied"] == dict(enumerate_designs(t.formulate(s.solved[near], chip)).assignment)
        assert row["copied"] == solved[near]["assignment"]
        best = enumerate_designs(t.formulate(params, chip))
        assert row["resolved_us"] == pytest.approx(float(best.objective), rel=1e-12)
        copied = math.inf if row["copied_us"] is None else row["copied_us"]
        assert row["resolved_us"] <= copied * (1 + 1e-12)
        if math.isfinite(copied):
            assert copied == pytest.approx(t.evaluate_terms(row["copied"], t.bind(params, chip))["cost"])
            assert row["ratio"] == pytest.approx(copied / row["resolved_us"])
        assert row["same"] == (row["copied"] == row["resolved"])


def test_nearest_is_by_log_distance():
    solved = {"a": {"M": 128, "N": 4096}, "b": {"M": 4096, "N": 4096}, "c": {"M": 1024, "N": 4096}}
    assert nearest({"M": 64, "N": 4096}, solved)[0] == "a"
    assert nearest({"M": 3000, "N": 4096}, solved)[0] == "b"
    assert nearest({"M": 1024, "N": 4096}, solved) == ("c", 0.0)
    assert nearest({"M": 181, "N": 4096}, {"x": {"M": 128, "N": 4096}, "y": {"M": 256, "N": 4096}})[0] == "x"


def test_copy_that_breaks_a_wall_is_infinite(studies):
    r = template_reuse(studies["attention"], only=["g1.L2048"])
    (row,) = r["rows"]
    t = get_template("attention-decode", dtype="bf16")
    params = load_reuse_study(studies["attention"]).held_out["g1.L2048"]
    broken = t.check(row["copied"], params, get_chip("h200"))
    assert broken and row["copied_us"] is None and row["ratio"] is None
    assert row["copied_violations"] == [str(v) for v in broken]
    assert row["resolved_us"] > 0 and not t.check(row["resolved"], params, get_chip("h200"))


def test_milp_agrees_with_enumeration(studies):
    e = template_reuse(studies["attention"], only=["a.L3072"])
    m = template_reuse(studies["attention"], only=["a.L3072"], solver="milp")
    assert m["rows"][0]["resolved_us"] == pytest.approx(e["rows"][0]["resolved_us"], rel=1e-6)
    s = load_reuse_study(studies["attention"])
    f = s.family().formulate(s.held_out["a.L3072"], get_chip("h200"))
    assert float(solve_milp(f).objective) == pytest.approx(m["rows"][0]["resolved_us"], rel=1e-6)


def test_the_shipped_studies_load():
    for path, n in (("studies/template_reuse_gemm.toml", 18), ("studies/template_reuse_attention.toml", 8)):
        s = load_reuse_study(path)
        assert len(s.held_out) == n and not set(s.held_out) & set(s.solved)


BAD = [
    ('name = "x"\ntemplate = "gemm-tiling"\n[solved]\na = {M=1,N=1,K=1}\n[held_out]\nb = {M=1,N=1,K=1}\n', "template"),
    ('name = "x"\ntemplate = "attention-decode"\nfoo = 1\n', "reuse study key"),
    ('name = "x"\ntemplate = "gemm-tiling-gpu"\n[solved]\na = {M=1,N=1,K=1}\n', "held_out"),
    ('name = "x"\ntemplate = "gemm-tiling-gpu"\n[solved]\na = {M=1,N=1}\n[held_out]\nb = {M=1,N=1,K=1}\n',
     "solved.a.K"),
    ('name = "x"\ntemplate = "gemm-tiling-gpu"\n[solved]\na = {M=1,N=1,K=0}\n[held_out]\nb = {M=1,N=1,K=1}\n',
     "solved.a.K"),
    ('name = "x"\ntemplate = "gemm-tiling-gpu"\n[solved]\na = {M=1,N=1,K=1,Q=2}\n[held_out]\nb = {M=1,N=1,K=1}\n',
     "solved.a field"),
    ('name = "x"\ntemplate = "gemm-tiling-gpu"\nsolver = "cplex"\n[solved]\na = {M=1,N=1,K=1}\n'
     '[held_out]\nb = {M=1,N=1,K=1}\n', "solver"),
    ('name = "x"\ntemplate = "gemm-tiling-gpu"\n[options]\ndtype = "int3"\n[solved]\na = {M=1,N=1,K=1}\n'
     '[held_out]\nb = {M=1,N=1,K=1}\n', "dtype"),
    ('name = "x"\ntemplate = "gemm-tiling-gpu"\n[calibration]\nwat = 1.0\n[solved]\na = {M=1,N=1,K=1}\n'
     '[held_out]\nb = {M=1,N=1,K=1}\n', "calibration term"),
    ('name = "x"\ntemplate = "attention-decode"\n[solved]\na = {B=1,Hq=3,Hkv=2,D=128,L=8}\n'
     '[held_out]\nb = {B=1,Hq=4,Hkv=2,D=128,L=8}\n', "Hq"),
    ("name = [", "reuse study file"),
]


@pytest.mark.parametrize("text,field", BAD)
def test_bad_study_is_a_named_error(tmp_path, text, field):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(InvalidInput) as exc:
        template_reuse(str(p))
    assert field in str(exc.value)
    r = CliRunner().invoke(app, ["reuse", str(p)])
    assert r.exit_code == 2 and field in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_cli_bad_options(studies):
    r = CliRunner().invoke(app, ["reuse", studies["attention"], "--only", "nope"])
    assert r.exit_code == 2 and "held-out workload" in r.output
    r = CliRunner().invoke(app, ["reuse", studies["attention"], "--solver", "glpk"])
    assert r.exit_code == 2 and "solver" in r.output
    r = CliRunner().invoke(app, ["reuse", "/nonexistent.toml"])
    assert r.exit_code == 2


def test_cli_table_and_json(studies):
    r = CliRunner().invoke(app, ["reuse", studies["attention"], "--only", "a.L3072", "--json"])
    assert r.exit_code == 0, r.output
    assert '"resolved_us"' in r.output
    r = CliRunner().invoke(app, ["reuse", studies["attention"], "--only", "a.L3072"])
    assert r.exit_code == 0 and "re-solved" in r.output
