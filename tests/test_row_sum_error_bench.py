"""benchmarks/row_sum_error.py on the CPU (interpreter, small rows): the fp64-partials kernel equals the float64
truth rounded to fp32 at every design, the fp32-partials kernel does not (the table has something to show)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]


def test_dry_run_fp64_partials_match_the_truth(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "row_sum_error.py"), "--out", str(tmp_path),
                        "--dry-run", "--seeds", "1"], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads((tmp_path / "row_sum_error.json").read_text())
    rows = rep["errors"]
    wide = [k for k in rows if "fp64 partials" in k]
    narrow = [k for k in rows if "fp32 partials" in k]
    assert len(wide) == len(narrow) == 3
    assert all(rows[k][0]["max_abs_vs_truth"] == 0.0 for k in wide)
    assert any(rows[k][0]["max_abs_vs_truth"] > 0.0 for k in narrow)
    assert "| BC2048 RP1 W2 S2 fp64 partials | 0 |" in r.stdout
