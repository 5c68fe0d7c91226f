"""benchmarks/template_reuse.py off the GPU: the dry run (Triton interpreter, tiny studies) measures the
copied and the re-solved design of every held-out workload, and the calibration step fits the family to
timings of the solved workloads only (here a model stand-in 1.3x slower than the priors say)."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def tr():
    spec = importlib.util.spec_from_file_location("template_reuse_bench", ROOT / "benchmarks" / "template_reuse.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dry_run_measures_copy_and_resolve(tr, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert tr.main(["--dry-run", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "template_reuse.json").read_text())
    for fam in ("gemm", "attention"):
        rows = out["families"][fam]["rows"]
        assert rows
        for row in rows:
            for side in ("copied", "resolved"):
                rec = row["gpu"][side]
                assert rec["check"]["passed"] and rec["graph_us"] > 0 and rec["eager_us"] > 0, rec
                assert rec["design"] == row[side]
            assert row["resolved_us"] <= row["copied_us"]


def test_calibration_sees_only_solved_workloads(tr, monkeypatch):
    from formloop.codesign.reuse import load_reuse_study
    from formloop.hw.chips import get_chip

    study = load_reuse_study(ROOT / "studies" / "template_reuse_attention.toml")
    chip, seen = get_chip("h200"), []

    def fake(template, a, params, ctx):
        seen.append(dict(params))
        return {"graph_us": 1.3 * template.evaluate_terms(a, template.bind(params, chip))["cost"]}

    monkeypatch.setattr(tr, "measure", fake)
    values, note = tr.calibrate("attention", study, study.family, chip, {"gpu": False}, 8, 1)
    assert values is not None, note
    assert len(seen) == 24 and all(p in study.solved.values() for p in seen)
    assert note["rms_log_error_after"] < 0.5 * note["rms_log_error_before"]
    assert tr.calibrate("attention", study, study.family, chip, {"gpu": False}, 0, 1)[0] is None
