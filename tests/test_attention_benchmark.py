"""benchmarks/attention.py end to end without a GPU: the dry run (interpreter acceptance checks at a
tiny shape, a perturbed model standing in for timings, calibration and held-out picks) and the
offline refit from its JSON."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Checked without importing: triton must first be imported with TRITON_INTERPRET=1 (the kernel tests).
pytestmark = pytest.mark.skipif(not (importlib.util.find_spec("torch") and importlib.util.find_spec("triton")),
                                reason="needs torch and triton")

ROOT = Path(__file__).parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "attention.py"), *args], capture_output=True,
                          text=True, env=env, timeout=900)


def test_dry_run_then_refit(tmp_path):
    out = tmp_path / "dry"
    proc = _run("--dry-run", "--families", "attention-decode", "--lengths", "40", "--top", "14",
                "--refine", "0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "attention.json").read_text())
    (row,) = result["rows"]
    assert row["family"] == "attention-decode" and row["L"] == 40 and row["accepted"]
    kinds = result["families"]["attention-decode"]["per_length"]["40"]["acceptance"]["pick"]
    assert {"random/eager", "zero/eager", "scaled/eager", "tail-dominant/eager"} <= set(kinds)
    assert all(r["tier"] == "dry-run model" for r in result["records"])
    assert (out / "calibration_decode.json").is_file()
    assert "dry-run model" in proc.stdout and "pick" in proc.stdout  # every time says where it comes from
    refit = _run("--calibrate", str(out / "attention.json"), "--out", str(tmp_path / "refit"))
    assert refit.returncode == 0, refit.stderr[-3000:]
    assert "fit on all lengths" in refit.stdout and "L=40: pick" in refit.stdout


def test_refuses_to_time_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = _run("--out", str(tmp_path))
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr


@pytest.mark.parametrize("family", ["attention-decode", "attention-prefill"])
def test_candidates_are_the_models_ranking(family):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from attention_sweep import candidates, key_of, top_designs

    from formloop.hw.chips import get_chip
    from formloop.library import get_template
    from formloop.library.attention_service import attention_workload
    from formloop.solve import solve_milp

    f = get_template(family).formulate(attention_workload(family, (1, 32, 8, 128, 4096), page=0, causal=1),
                                       get_chip("h200"))
    got = [key_of(family, a) for a in candidates(family, f, top=6)]
    # top-k, one per value of Bn, KS, QP (Br x Bc, S), the neighbours of the best three (decode) or the best
    assert len(set(got)) == len(got) <= 6 + 18 + (27 if family == "attention-decode" else 4)
    top = [key_of(family, a) for a in top_designs(f, 6)]
    assert top[:4] == got[:4] and set(top) <= set(got)  # the model's best are measured first
    if family == "attention-decode":  # six stages, which the model ties with three, are measured early
        assert any(k[3] == 6 for k in got[:12]), got
    assert key_of(family, solve_milp(f).assignment) in got  # the MILP's pick is measured
