"""`formloop optimize --ray`: the campaign's CPU steps and measurements as Ray tasks on a local Ray
instance (two CPUs, no dashboard), interpreter tier, two small problems; the driver alone writes the
store, and the record matches what the process pool writes (same verdicts, same resume rule)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray", reason="ray is not installed (the Makefile's venv installs the 'ray' extra)")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop import api  # noqa: E402
from formloop.optimize.store import OptimizeStore  # noqa: E402

P = Path(__file__).resolve().parents[1] / "problems"
FILES = [str(P / "level2" / "linear_bias_relu.py"), str(P / "level1" / "rmsnorm.py")]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_campaign_on_ray_lands_in_the_one_store(local_ray, tmp_path):
    store = tmp_path / "population.db"
    report = api.optimize(FILES, out=str(tmp_path / "out"), budget=1, small=True, tier="interpreter", workers=2,
                          progress=False, store=str(store), ray="auto")
    assert report["engine"]["engine"] == "ray" and report["engine"]["cluster"]["CPU"] == 2
    assert "Ray tasks" in report["engine"]["measurements"]
    rows = {r["problem"]: r for r in report["problems"]}
    lbr = rows["linear_bias_relu"]
    assert lbr["best"] is not None and lbr["verdicts"][0]["accepted"], lbr["verdicts"]
    assert set(lbr["phase_seconds"][0]) >= {"capture", "solve", "harness", "integrity", "child start"}
    assert rows["rmsnorm"]["best"] is not None, rows["rmsnorm"]["verdicts"]
    assert "Engine: ray" in (tmp_path / "out" / "report.md").read_text()
    with OptimizeStore(store, "fp32/small", mode="read") as s:
        first = [a["id"] for a in s.attempts("linear_bias_relu")]
        assert len(first) == 1 and Path(s.attempts("linear_bias_relu")[0]["candidate"]).is_file()
    again = api.optimize(FILES, out=str(tmp_path / "out"), budget=1, small=True, tier="interpreter", workers=2,
                         progress=False, store=str(store), ray="auto")
    with OptimizeStore(store, "fp32/small", mode="read") as s:
        assert [a["id"] for a in s.attempts("linear_bias_relu")] == first    # finished attempts are not re-run
    assert ray.is_initialized()     # a Ray instance the caller started is the caller's to stop
    assert again["summary"]["with_accepted_candidate"] == report["summary"]["with_accepted_candidate"]

