"""benchmarks/vector_ops.py's CPU path: every case's kernel and torch baseline pass the float64 check in the
interpreter at tiny sizes (the GPU run does the same before timing)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_dry_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vector_ops.py"), "--dry-run", "--out",
                        str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = json.loads((tmp_path / "vector_ops.json").read_text())["cases"]
    assert len(rows) >= 15 and all(x["correct"] and x["torch_correct"] for x in rows)
    assert {x["family"] for x in rows} == {"rowwise", "elementwise", "qk_rope"}


def test_dry_run_problem_set_menu(tmp_path):
    """--set --menu on the CPU: the problem set's single vector ops, each with its menu of model designs (both
    elementwise layouts), every design checked against float64 in the interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vector_ops.py"), "--dry-run", "--set", "--menu",
                        "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = json.loads((tmp_path / "vector_ops.json").read_text())["cases"]
    names = {x["case"].split("-")[0] for x in rows}
    assert {"relu", "gelu", "residual_add", "row_sum", "log_softmax", "logsumexp", "argmax_dim"} <= names
    assert all(x["correct"] and x["menu_correct"] and len(x["menu"]) >= 3 for x in rows)
    ew_rows = [x for x in rows if x["family"] == "elementwise"]
    assert ew_rows and all({m["design"]["F"] for m in x["menu"]} == {0, 1} for x in ew_rows)
    assert any(x["design"].get("F") == 1 for x in ew_rows)  # the flat walk ran in the interpreter
