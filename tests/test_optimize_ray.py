"""`formloop optimize --ray`: the campaign's CPU steps and measurements as Ray tasks on a local Ray
instance (two CPUs, no dashboard), interpreter tier, two small problems; the driver alone writes the
store, and the record matches what the process pool writes (same verdicts, same resume rule). The two
problems are shipped ones with their SMALL sizes made smaller still (the engine is under test here; both
are optimized at their own SMALL sizes by tests/test_optimize_e2e.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray", reason="ray is not installed (the Makefile's venv installs the 'ray' extra)")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop import api  # noqa: E402
from formloop.optimize.store import OptimizeStore  # noqa: E402
from tests.problem_copies import resized  # noqa: E402

# problem -> (its SMALL sizes, the smaller ones used here): a third of the interpreted kernel time
TINY = {"level2/linear_bias_relu.py": ('{"M": 64, "N": 256, "K": 512}', '{"M": 16, "N": 32, "K": 64}'),
        "level1/rmsnorm.py": ('{"R": 64, "D": 512}', '{"R": 8, "D": 64}')}


def _files(root: Path) -> list[str]:
    """Copies of the shipped problems under root (same levels, same names), SMALL made smaller."""
    return resized(root, TINY)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_campaign_on_ray_lands_in_the_one_store(local_ray, tmp_path):
    store = tmp_path / "population.db"
    files = _files(tmp_path / "problems")
    report = api.optimize(files, out=str(tmp_path / "out"), budget=1, small=True, tier="interpreter", workers=2,
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
    again = api.optimize(files, out=str(tmp_path / "out"), budget=1, small=True, tier="interpreter", workers=2,
                         progress=False, store=str(store), ray="auto")
    with OptimizeStore(store, "fp32/small", mode="read") as s:
        assert [a["id"] for a in s.attempts("linear_bias_relu")] == first    # finished attempts are not re-run
    assert ray.is_initialized()     # a Ray instance the caller started is the caller's to stop
    assert again["summary"]["with_accepted_candidate"] == report["summary"]["with_accepted_candidate"]

