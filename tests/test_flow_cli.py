"""`formloop run`, `formloop population ...`: tables, JSON, admission, filters, one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from formloop.cli import app

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "templates" / "rownorm.py"
runner = CliRunner()


def invoke(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("cli") / "p.db"


def test_run_table_then_reuse(store):
    first = invoke("run", "gemm", "--shape", "1000,1000,1000", "--store", store)
    assert first.exit_code == 0, first.output
    assert "gemm-tiling" in first.output and "(128,128,32,3,1,0)" in first.output and "53.1" in first.output
    assert "predicted" in first.output and "(model)" in first.output and "tier" in first.output and "1 proved now" in first.output
    second = invoke("run", "gemm", "--shape", "1000,1000,1000", "--store", store, "--json")
    assert second.exit_code == 0, second.output
    rep = json.loads(second.output)
    row = next(r for r in rep["rows"] if r["template"] == "gemm-tiling")
    assert (row["proof"], row["proof_source"]) == ("proved", "reused") and rep["proofs_reused"] >= 1
    assert row["predicted_us"] == pytest.approx(53.1399, abs=1e-3) and row["tier"] == "model"


def test_store_from_environment(tmp_path):
    path = tmp_path / "env.db"
    res = invoke("run", "tiling-study", "--json", env={"FORMLOOP_STORE": str(path)})
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["store"] == str(path) and path.exists()


def test_population_add_refuses_k1_with_counterexample(store):
    res = invoke("population", "add", f"{EXAMPLE}:rownorm_loose", "--store", store)
    assert res.exit_code == 1
    assert "refuted" in res.output and "K1" in res.output and "single_pass" in res.output
    ok = invoke("population", "add", f"{EXAMPLE}:rownorm", "--store", store, "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["status"] == "proved"


def test_admitted_template_is_drawn_without_template_option(store):
    test_population_add_refuses_k1_with_counterexample(store)  # idempotent: same hashes
    res = invoke("run", "rmsnorm", "--shape", "R=256,D=2048", "--store", store, "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["rows"]
    assert [(r["template"], r["proof"]) for r in rows] == [("rownorm", "proved")]
    assert rows[0]["design"]["BLOCK"] >= 2048


def test_population_views_and_filters(store):
    invoke("run", "gemm", "--shape", "64,4096,4096", "--store", store)
    ls = json.loads(invoke("population", "ls", "--store", store, "--json").output)
    statuses = {r["name"]: r["status"] for r in ls}
    assert statuses["gemm-tiling"] == "proved" and statuses["rownorm-loose"] == "refuted"
    gemm = json.loads(invoke("population", "designs", "--store", store, "--workload", "gemm", "--json").output)
    assert {d["workload"] for d in gemm} >= {"gemm fp32 M=1000 N=1000 K=1000", "gemm fp32 M=64 N=4096 K=4096"}
    assert all(d["chip"] == "illustrative" for d in gemm)
    one = json.loads(invoke("population", "designs", "--store", store, "--workload",
                            "gemm fp32 M=64 N=4096 K=4096", "--template", "gemm-tiling", "--json").output)
    assert len(one) == 1 and one[0]["assignment"] == {"Tm": 64, "Tn": 64, "Tk": 64, "S": 3, "P": 1, "beta": 0}
    ms = json.loads(invoke("population", "measurements", "--store", store, "--chip", "illustrative", "--tier", "model",
                           "--json").output)
    assert ms and all(m["tier"] == "model" and m["workload"] and m["chip"] == "illustrative" for m in ms)
    assert json.loads(invoke("population", "designs", "--store", store, "--chip", "h200", "--json").output) == []
    loose = next(r for r in ls if r["name"] == "rownorm-loose")
    show = invoke("population", "show", loose["hash"][:10], "--store", store)
    assert show.exit_code == 0 and "counterexample to K1" in show.output and "replay:" in show.output
    table = invoke("population", "measurements", "--store", store)
    assert table.exit_code == 0 and "latency (us)" in table.output


@pytest.mark.parametrize("args, field", [
    (("run", "gemm", "--shape", "1,2"), "shape of gemm"),
    (("run", "gemm"), "shape"),
    (("run", "gemm", "--shape", "1,1,1", "--chip", "nochip"), "chip"),
    (("run", "rmsnorm", "--shape", "R=1,D=1", "--template", "missing.py:T"), "template spec path"),
    (("population", "show", "ffffffff"), "template hash"),
    (("population", "ls", "--status", "maybe"), "--status"),
])
def test_bad_input_is_one_line_exit_2(store, args, field):
    res = invoke(*args, "--store", store)
    assert res.exit_code == 2, res.output
    assert f"invalid {field}" in res.output and "Traceback" not in res.output


def test_tier_setting_is_honoured_or_refused(store):
    from formloop.evaluate import gpu_available

    res = invoke("run", "gemm", "--shape", "64,64,64", "--tier", "model", "--store", store, "--json")
    assert res.exit_code == 0 and {r["tier"] for r in json.loads(res.output)["rows"] if r["tier"]} == {"model"}
    if not gpu_available():  # on a CPU machine a gpu request is refused, never answered by the model
        res = invoke("run", "gemm", "--shape", "64,64,64", "--tier", "gpu", "--store", store)
        assert res.exit_code == 2 and "invalid tier" in res.output
    bad = invoke("run", "gemm", "--shape", "64,64,64", "--store", store, env={"FORMLOOP_TIER": "fastest"})
    assert bad.exit_code == 2 and "FORMLOOP_TIER" in bad.output
