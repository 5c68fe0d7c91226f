"""Calibrations that learn (issue 18, part 2): a (synthetic) gpu measurement is stored as a calibration
point, the family is refit, the fit is read back by `solve`/`measure` by default, changes the solve,
and is labelled ('calibrated <date>' vs 'prior'); the design-loss terms add up.

Independent checks: the synthetic "gpu" times come from the same cost formula under a different,
known set of efficiency terms (truth), so the refit must move the model toward them (its error on the
measured points drops) and a solve under the fit must predict closer to the truth than the priors do."""
from __future__ import annotations

import math
import sqlite3

import pytest

from formloop import api
from formloop.api.resolve import stored_calibration
from formloop.evaluate.calibrate import Point, predict
from formloop.hw.chips import get_chip
from formloop.library import get_template
from formloop.population import Population
from formloop.population import calibrations as cal
from formloop.population.schema import MIGRATIONS, migrate
from formloop.settings import Settings
from tests import synthetic_gpu
from tests.synthetic_gpu import VERSIONS

TRUTH = {"eta_mma": 0.4, "t_tile": 3e-6, "eta_bw": 0.6}  # a slower chip than the priors say


def SyntheticGpu():  # noqa: N802 (a stand-in class, built per test)
    """Plays the gpu tier: gemm-tiling-gpu's own cost under TRUTH (not the priors), labelled gpu."""
    return synthetic_gpu.SyntheticGpu("gemm-tiling-gpu", TRUTH, dtype="bf16")


@pytest.fixture
def settings(tmp_path):
    return Settings(store_path=tmp_path / "pop.db")


def test_schema_4_adds_the_calibration_tables_and_keeps_older_rows(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, upto=3)
    conn.execute("INSERT INTO templates VALUES ('h', 'n', '{}', 'o', 's', '{}', '{}', 'proved', 0, '')")
    applied = migrate(conn)
    assert applied == [m.version for m in MIGRATIONS if m.version > 3]
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "calibration_log" in names
    assert conn.execute("SELECT COUNT(*) FROM templates").fetchone()[0] == 1
    conn.close()


def test_point_validation_and_terms_to_fit(tmp_path):
    with Population(tmp_path / "p.db") as pop:
        with pytest.raises(Exception, match="latency_us"):
            cal.add_point(pop, template="t", dtype="bf16", chip="h200", toolchain="x", device="d", workload={},
                          assignment={}, latency_us=float("nan"))
    assert cal.terms_to_fit(("t_tile", "eta_mma", "zzz"), 1) == ()
    assert cal.terms_to_fit(("t_tile", "eta_mma", "zzz"), 3) == ("eta_mma", "t_tile")
    assert cal.terms_to_fit(("t_tile", "eta_mma", "zzz"), 10) == ("eta_mma", "t_tile", "zzz")


def test_measurements_write_a_calibration_that_solve_reads_back(settings, monkeypatch):
    gpu = SyntheticGpu()
    shape = "4096,4096,4096"
    before = api.solve("gemm-tiling", shape, chip="h200", dtype="bf16", solver="enumerate", settings=settings)
    assert before["calibration_source"].startswith("prior")
    reports = [api.measure("gemm-tiling", s, chip="h200", dtype="bf16", solver="enumerate", settings=settings,
                           evaluator=gpu) for s in ("4096,4096,4096", "64,4096,4096", "1000,1000,1000")]
    assert gpu.calls == 3
    assert reports[0]["learned"]["recorded"] and reports[0]["learned"]["calibration"] is None  # 1 point: no fit yet
    assert reports[-1]["calibration_source"].startswith("calibrated ")  # the 2nd measure already refit
    fit = reports[-1]["learned"]["calibration"]
    assert fit is not None and fit["points"] == 3 and fit["rms_after"] <= fit["rms_before"]
    assert fit["toolchain"] == cal.toolchain_of(VERSIONS)

    found, _ = stored_calibration("gemm-tiling-gpu", "bf16", "h200", settings)
    assert found is not None and found.id == fit["id"] and found.label.startswith("calibrated ")
    after = api.solve("gemm-tiling", shape, chip="h200", dtype="bf16", solver="enumerate", settings=settings)
    assert after["calibration_source"] == found.describe()
    assert after["calibration"] == found.key
    # The learned model predicts closer to the (synthetic) truth than the priors did.
    prior_t, chip = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    w = {"M": 4096, "N": 4096, "K": 4096, "e": 2}
    truth_us = float(predict(prior_t, chip, [Point(after["design"], w, 0.0)], TRUTH)[0])
    assert abs(math.log(after["objective_us"] / truth_us)) < abs(math.log(before["objective_us"] / truth_us))
    # Asking for the priors still gives them, labelled.
    forced = api.solve("gemm-tiling", shape, chip="h200", dtype="bf16", solver="enumerate", calibration="prior",
                       settings=settings)
    assert forced["calibration_source"] == "prior" and forced["objective_us"] == pytest.approx(before["objective_us"])


def test_design_loss_terms_add_up_to_the_total(settings):
    r = api.measure("gemm-tiling", "1000,1000,1000", chip="h200", dtype="bf16", solver="enumerate",
                    settings=settings, evaluator=SyntheticGpu())
    loss = r["design_loss"]
    parts = [loss[k] for k in ("representation", "precondition", "selection", "model_error")]
    assert all(p is not None for p in parts) and loss["total"] is not None
    assert sum(parts) == pytest.approx(loss["total"], abs=1e-9)
    assert loss["precondition"] == pytest.approx(0.0)  # the family's lifetime rule excludes nothing
    assert loss["selection"] == pytest.approx(0.0, abs=1e-9)  # enumeration picks the model's best
    assert loss["spread"] == pytest.approx(math.log(1.03 / 0.98))
    assert loss["measured_us"] == pytest.approx(r["measurement"]["latency_us"])


def test_cli_prints_the_label(settings, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from formloop.cli import app

    monkeypatch.setenv("FORMLOOP_STORE", str(settings.store_path))
    runner = CliRunner()
    out = runner.invoke(app, ["solve", "gemm-tiling", "--shape", "64,4096,4096", "--chip", "h200", "--dtype", "bf16",
                              "--solver", "enumerate"])
    assert out.exit_code == 0, out.output
    assert "prior" in out.output
    with Population(settings.store_path) as pop:
        cal.store_fit(pop, template="gemm-tiling-gpu", dtype="bf16", chip="h200", toolchain="t", terms=TRUTH,
                      fitted=list(TRUTH), points=4, rms_before=0.5, rms_after=0.1, source="test",
                      created_at=1_796_000_000.0)
    out = runner.invoke(app, ["solve", "gemm-tiling", "--shape", "64,4096,4096", "--chip", "h200", "--dtype", "bf16",
                              "--solver", "enumerate"])
    assert out.exit_code == 0, out.output
    assert "calibrated 2026-" in out.output
