"""The attention families learn like the GEMM contract (issue 18 part 2): a correct (synthetic) gpu measurement from
`measure attention-decode|attention-prefill` is stored as a calibration point, the family is refit, and `solve`
reads the fit back by default, labelled; 'prior' still gives the priors. Also: the priors rank prefill tiles in the
order the H200 measured them (RESULTS.md round 13, call 5), the reason they were refit on the datasheet chip.

Independent check: the synthetic times come from the family's own cost formula under known terms (TRUTH), so the
refit must move the model toward them."""
from __future__ import annotations

import math

import pytest

from formloop import api
from formloop.api.resolve import stored_calibration
from formloop.evaluate.calibrate import Point, predict
from formloop.hw.chips import get_chip
from formloop.library import attention_service, get_template
from formloop.settings import Settings
from tests import synthetic_gpu

TRUTH = {"attention-decode": {"eta_bw": 0.45, "lat_m": 1.6e-6, "t_launch": 4e-6, "eta_mma": 0.12},
         "attention-prefill": {"eta_mma": 0.35, "t_launch": 9e-6, "t_prog": 2e-6}}
SHAPES = {"attention-decode": ("1,32,8,128,2048", "1,32,8,128,8192", "1,32,8,128,512", "1,32,8,128,16384"),
          "attention-prefill": ("1,32,8,128,1024", "1,32,8,128,4096", "1,32,8,128,512", "1,32,8,128,2048")}


def SyntheticGpu(family: str):  # noqa: N802 (a stand-in class, built per test)
    """Plays the gpu tier: the family's own cost under TRUTH (not its priors), labelled gpu."""
    return synthetic_gpu.SyntheticGpu(family, TRUTH[family], spread=(0.99, 1.02))


@pytest.fixture
def settings(tmp_path):
    return Settings(store_path=tmp_path / "pop.db")


@pytest.mark.parametrize("family", sorted(TRUTH))
def test_attention_measurements_refit_and_solve_reads_the_fit(family, settings):
    gpu = SyntheticGpu(family)
    shape = SHAPES[family][0]
    before = api.solve(family, shape, settings=settings)
    assert before["calibration_source"].startswith("prior")
    reports = [api.measure(family, s, settings=settings, evaluator=gpu) for s in SHAPES[family]]
    assert gpu.calls == len(SHAPES[family])
    assert all(r["learned"]["recorded"] for r in reports)
    assert reports[0]["learned"]["calibration"] is None  # one point fits no term
    fit = reports[-1]["learned"]["calibration"]
    assert fit is not None and fit["points"] == len(SHAPES[family]) and fit["rms_after"] <= fit["rms_before"]
    assert reports[-1]["calibration_source"].startswith("calibrated ")  # measured under the previous refit

    found, _ = stored_calibration(family, "bf16", "h200", settings)
    assert found is not None and found.id == fit["id"]
    after = api.solve(family, shape, settings=settings)
    assert after["calibration"] == found.key and after["calibration_source"] == found.describe()
    # the learned model predicts the (synthetic) truth of its own pick closer than the priors predicted theirs
    chip, prior = get_chip("h200"), get_template(family)
    wl = attention_service.attention_workload(family, shape)
    err = {}
    for name, r in (("before", before), ("after", after)):
        truth = float(predict(prior, chip, [Point(r["design"], wl, 0.0)], TRUTH[family])[0])
        err[name] = abs(math.log(r["objective_us"] / truth))
    assert err["after"] < err["before"]
    forced = api.solve(family, shape, calibration="prior", settings=settings)
    assert forced["calibration_source"] == "prior" and forced["objective_us"] == pytest.approx(before["objective_us"])


def test_attention_design_loss_adds_up(settings):
    r = api.measure("attention-prefill", "1,32,8,128,2048", settings=settings,
                    evaluator=SyntheticGpu("attention-prefill"))
    loss = r["design_loss"]
    parts = [loss[k] for k in ("representation", "precondition", "selection", "model_error")]
    assert all(p is not None for p in parts) and loss["total"] is not None
    assert sum(parts) == pytest.approx(loss["total"], abs=1e-9)
    assert loss["spread"] == pytest.approx(math.log(1.02 / 0.99))
    assert loss["sources"]["model_error"] == "gpu vs model"


def test_a_model_tier_measure_stores_nothing(settings):
    r = api.measure("attention-decode", "1,32,8,128,4096", settings=settings)  # no CUDA device in CI: model tier
    if r["measurement"]["tier"] == "gpu":
        pytest.skip("a CUDA device is present: this checks the CPU fallback")
    assert r["fallback"] and not r["learned"]["recorded"]
    assert stored_calibration("attention-decode", "bf16", "h200", settings)[0] is None


# (L, µs gpu) of three prefill designs measured in one H200 run (RESULTS.md round 13, call 5; B 1, Hq 32, Hkv 8,
# d 128, causal): 64 x 64 S3 W4, 128 x 128 S3 W8, 128 x 128 S2 W8.
MEASURED_PREFILL = {1024: (24.5, 28.5, 32.0), 2048: (74.7, 81.4, 94.9), 4096: (264.1, 269.4, 317.6)}
TILES = ({"Br": 64, "Bc": 64, "S": 3, "W": 4, "GQ": 0, "TM": 1}, {"Br": 128, "Bc": 128, "S": 3, "W": 8, "GQ": 0, "TM": 1},
         {"Br": 128, "Bc": 128, "S": 2, "W": 8, "GQ": 0, "TM": 1})


@pytest.mark.parametrize("L", sorted(MEASURED_PREFILL))
def test_prefill_priors_rank_tiles_as_the_h200_measured(L):
    t = get_template("attention-prefill")
    wl = attention_service.attention_workload("attention-prefill", f"1,32,8,128,{L}")
    model = predict(t, get_chip("h200"), [Point(a, wl, 0.0) for a in TILES])
    measured = MEASURED_PREFILL[L]
    assert sorted(range(3), key=lambda i: model[i]) == sorted(range(3), key=lambda i: measured[i])


def test_the_layer_plan_solves_attention_with_the_stored_calibration(settings):
    from formloop.population import Population
    from formloop.population import calibrations as stored

    with Population(settings.store_path) as pop:
        fit = stored.store_fit(pop, template="attention-prefill", dtype="bf16", chip="h200", toolchain="t",
                               terms=TRUTH["attention-prefill"], fitted=list(TRUTH["attention-prefill"]), points=5,
                               rms_before=0.4, rms_after=0.1, source="test")
    r = api.layer("tiny", ["prefill:64"], measure="no", workers=1, settings=settings)
    assert r["calibrations"]["attention-prefill"] == fit.describe()
    assert r["calibrations"]["attention-decode"].startswith("prior")
    attn = {p["part"]: p for p in r["scenarios"][0]["parts"]}["attn"]
    assert attn["detail"]["calibration"] == "given"
    # the plan's attention time is the family's cost of its design under the stored terms, not under the priors
    wl = attention_service.attention_workload("attention-prefill", "1,4,2,64,64")
    t, chip = get_template("attention-prefill"), get_chip("h200")
    under = {name: float(predict(t, chip, [Point(attn["design"], wl, 0.0)], terms)[0])
             for name, terms in (("stored", TRUTH["attention-prefill"]), ("priors", None))}
    assert attn["model_us"] == pytest.approx(under["stored"], rel=1e-6)
    assert abs(under["stored"] / under["priors"] - 1) > 0.05
