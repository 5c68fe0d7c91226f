"""`formloop harness | integrity | schedule | campaign | synth-log`: output contract and bad input."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json
from pathlib import Path

from typer.testing import CliRunner

from formloop.cli import app

FIX = Path(__file__).parent / "fixtures" / "integrity"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_synthetic_log_schedule_and_campaign(tmp_path):
    log = tmp_path / "log.jsonl"
    assert invoke("synth-log", log, "--problems", 12, "--attempts", 10, "--seed", 4).exit_code == 0
    r = invoke("schedule", log, "--sweep", "--eps-grid", "off,0.25,1", "--window-grid", "off,8,2", "--json",
               "--plot", tmp_path)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert len(d["sweep"]) == 9 and d["pareto"] and "replay of log.jsonl" in d["source"]
    assert (tmp_path / "pareto.png").exists()
    one = json.loads(invoke("schedule", log, "--eps", 0.5, "--window", 4, "--json").stdout)
    assert 0 <= one["savings"] <= 1 and len(one["problems"]) == 12
    table = invoke("schedule", log, "--sweep")
    assert "Pareto" in table.stdout and "best with retention" in table.stdout
    r = invoke("campaign", log, "--json", "--plot", tmp_path)
    s = json.loads(r.stdout)
    assert s["inflation"] >= 1.0 and set(s["filtered"]) >= {"geomean_speedup", "fast_p", "sol_score"}
    assert (tmp_path / "fastp.png").exists() and (tmp_path / "attempt_fastp.png").exists()
    assert "inflation without integrity filtering" in invoke("campaign", log).stdout


def test_harness_json_and_table():
    r = invoke("harness", FIX / "problems" / "add.py", FIX / "honest" / "add.py", "--seed", 1, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["correct"] and d["candidate_time"]["source"] == "cpu" and d["sol_fraction"] is None
    t = invoke("harness", FIX / "problems" / "add.py", FIX / "cheats" / "mutate_input.py", "--seed", 1, "--no-time")
    assert t.exit_code == 1 and "INCORRECT" in t.stdout and "mutated" in t.stdout


def test_harness_json_exit_status_is_1_when_incorrect():
    """--json keeps the documented exit codes (it once exited 0 for an incorrect candidate)."""
    r = invoke("harness", FIX / "problems" / "add.py", FIX / "cheats" / "mutate_input.py", "--seed", 1, "--no-time",
               "--json")
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["status"] == "completed" and d["correct"] is False and d["mutated"]
    z = invoke("harness", FIX / "problems" / "softmax_wide.py", FIX / "cheats" / "zeros_small_output.py", "--seed", 2,
               "--no-time", "--json")
    assert z.exit_code == 1 and json.loads(z.stdout)["correct"] is False


def test_integrity_exit_status_and_evidence():
    r = invoke("integrity", FIX / "problems" / "matmul.py", FIX / "cheats" / "torch_only.py", "--probe", "torch-only",
               "--json")
    assert r.exit_code == 1
    d = json.loads(r.stdout)
    assert d["verdict"] == "torch-only" and d["checks"][0]["witness"]["aten_compute_ops"] == ["aten::mm"]
    ok = invoke("integrity", FIX / "problems" / "add.py", FIX / "honest" / "add.py", "--seed", 2)
    assert ok.exit_code == 0 and "verdict: clean" in ok.stdout


def test_bad_input_is_one_line_with_exit_2(tmp_path):
    bad_log = tmp_path / "bad.jsonl"
    bad_log.write_text('{"problem": "x", "attempt": 1, "tokens": 5, "status": "great"}\n')
    good_log = tmp_path / "good.jsonl"
    assert invoke("synth-log", good_log, "--problems", 2, "--attempts", 3).exit_code == 0
    no_inputs = tmp_path / "p.py"
    no_inputs.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_init_inputs():\n    return []\n")
    cases = [
        (("schedule", bad_log), "status"),
        (("schedule", tmp_path / "none.jsonl"), "invalid LOG"),
        (("schedule", FIX / "problems" / "add.py"), "JSON"),
        (("harness", no_inputs, FIX / "honest" / "add.py"), "get_inputs"),
        (("harness", FIX / "problems" / "add.py", FIX / "honest" / "add.py", "--sets", 0), "--sets"),
        (("harness", FIX / "problems" / "add.py", FIX / "honest" / "add.py", "--chip", "nochip", "--no-time"), "nochip"),
        (("integrity", FIX / "problems" / "add.py", FIX / "honest" / "add.py", "--probe", "magic"), "probe"),
        (("schedule", good_log, "--sweep", "--eps-grid", "a,b"), "--eps-grid"),
        (("schedule", good_log, "--window", 0), "--window"),
        (("synth-log", tmp_path / "x.jsonl", "--problems", 0), "--problems"),
    ]
    for args, needle in cases:
        r = invoke(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "error:" in r.output and needle in r.output and "Traceback" not in r.output, (args, r.output)
