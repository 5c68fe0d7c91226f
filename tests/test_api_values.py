"""api results are strict JSON: no inf/nan anywhere, a non-finite float is null with a note saying
where it was and what; renderers can put it back."""
from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from formloop import api
from formloop.api.values import plain, with_non_finite
from formloop.cli import app
from formloop.errors import InvalidInput

RACY = "256,256,64,3,2,0"  # 3 slots of (256*64 + 64*256) fp32 = 384 KiB > 96 KiB, and P=2 > S-2+beta


def strict_loads(text: str):
    def refuse(token):
        raise ValueError(f"non-strict JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def test_plain_encodes_non_finite_with_a_note():
    out = plain({"a": math.inf, "b": [{"x": math.nan}, 1.5], "c": {"d": -math.inf}, "e": (1, 2)})
    assert out == {"a": None, "b": [{"x": None}, 1.5], "c": {"d": None}, "e": [1, 2],
                   "non_finite": {"a": "inf", "b[0].x": "nan", "c.d": "-inf"}}
    strict_loads(json.dumps(out))
    back = with_non_finite(out)
    assert back["a"] == math.inf and math.isnan(back["b"][0]["x"]) and back["c"]["d"] == -math.inf


def test_a_failed_measurement_is_null_with_its_failure_on_both_faces(tmp_path):
    env = {"FORMLOOP_TIER": "model", "FORMLOOP_STORE": str(tmp_path / "p.db")}
    res = CliRunner().invoke(app, ["evaluate", "gemm-tiling", "--design", RACY, "--shape", "1000,1000,1000", "--json"],
                             env=env)
    assert res.exit_code == 1, res.output  # a failed design is answered, never accepted
    out = strict_loads(res.stdout)
    m = out["measurement"]
    assert m["latency_us"] is None and out["non_finite"] == {"measurement.latency_us": "inf"}
    assert not m["ok"] and "C1" in m["failure"] and "C3" in m["failure"]
    table = CliRunner().invoke(app, ["evaluate", "gemm-tiling", "--design", RACY, "--shape", "1000,1000,1000"], env=env)
    assert "failed: infeasible" in table.stdout and "model tier" in table.stdout


def test_routing_is_the_same_for_solve_check_and_evaluate():
    solved = api.solve("gemm-tiling", "256,256,256", chip="h100", dtype="fp16", solver="enumerate")
    assert solved["template"] == "gemm-tiling-gpu" and solved["dtype"] == "fp16"
    design = ",".join(str(v) for v in solved["design"].values())
    checked = api.check("gemm-tiling", design, "256,256,256", chip="h100", dtype="fp16")
    assert checked["valid"] and checked["template"] == "gemm-tiling-gpu"
    m = api.evaluate("gemm-tiling", solved["design"], {"M": 256, "N": 256, "K": 256}, chip="h100", dtype="fp16",
                     tier="model")["measurement"]
    assert m["latency_us"] == pytest.approx(solved["objective_us"])  # the model tier is the solved cost
    with pytest.raises(InvalidInput, match="op for gemm-tiling"):
        api.solve("gemm-tiling", "R=1,D=2", op="rmsnorm")
    with pytest.raises(InvalidInput, match="calibration"):
        api.solve("gemm-tiling", "8,8,8", calibration="cal.json")  # a calibration belongs to the GPU contract
