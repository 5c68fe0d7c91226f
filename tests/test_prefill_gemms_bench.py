"""benchmarks/prefill_gemms.py without a GPU: the measurement menu it builds (the MILP pick first, every
design feasible, no design twice, several split counts), and its refit on a synthetic run timed by the
family's own model under known terms, which the fit must recover well enough to rank the menu."""
from __future__ import annotations

import json
import os
import sys

from formloop.evaluate.calibrate import Point, predict, spearman
from formloop.hw.chips import get_chip
from formloop.library import gemm_epilogue, get_template
from formloop.library.gemm_tiling_gpu import CALIBRATED
from formloop.solve import SOLVERS

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import prefill_gemms as pg  # noqa: E402


def _formulation(chain, M, N, K, calibration=None):
    t = get_template(gemm_epilogue.NAME, dtype="bf16", epilogue=chain, calibration=calibration,
                     calibration_id="given" if calibration else "priors")
    wl = gemm_epilogue.workload(M, N, K, "bf16", pb_=K)
    return t, wl, t.formulate(wl, get_chip("h200"))


def test_the_menu_starts_at_the_optimum_and_holds_distinct_feasible_designs():
    chip = get_chip("h200")
    for name in ("qkv", "oproj_add"):
        N, K, chain = pg.dg.PARTS[name]
        designs, model = pg.family_menu(chain, 128, N, K, 10)
        t, wl, f = _formulation(chain, 128, N, K)
        best = SOLVERS["enumerate"](f)  # an independent solver: the menu's first design is optimal
        assert abs(model[0] - best.objective) <= 1e-6 * best.objective
        assert len(designs) == 10
        for d, m in zip(designs, model):
            assert not t.check(d, wl, chip), d
            assert abs(predict(t, chip, [Point(d, wl, 1.0)])[0] - m) <= 1e-9 * m
        keys = {tuple(sorted((k, v) for k, v in d.items() if k != "G")) for d in designs}
        assert len(keys) == len(designs)
        assert len({d["KS"] for d in designs}) >= 3


def test_the_refit_recovers_a_known_model_well_enough_to_rank_the_menu(tmp_path):
    chip = get_chip("h200")
    t0, wl0, _ = _formulation("", 128, 4096, 4096)
    priors = {n: float(v) for n, v in t0.bind(wl0, chip).items() if n in CALIBRATED}
    truth = {**priors, "t_fix": priors["t_fix"] * 4, "bw_sm": priors["bw_sm"] / 2, "eta_mma": priors["eta_mma"] * 0.8}
    result, points = {"runs": {}}, []
    # Two parts whose chains, N and K all differ: one fit across chains (the fit's cost is per part, not per point)
    for name in ("qkv", "down_add"):
        N, K, chain = pg.dg.PARTS[name]
        designs, model = pg.family_menu(chain, 128, N, K, 12)
        t, wl, _ = _formulation(chain, 128, N, K, truth)
        measured = predict(t, chip, [Point(d, wl, 1.0) for d in designs])
        fam = [{"design": d, "model_us": m, "graph_us": float(us)} for d, m, us in zip(designs, model, measured)]
        result["runs"][f"{name}@128"] = {"M": 128, "N": N, "K": K, "chain": chain, "family": fam, "pick": fam[0],
                                         "best": min(fam, key=lambda r: r["graph_us"]),
                                         "spearman_model": spearman(model, list(measured))}
        points += [Point(r["design"], wl, r["graph_us"]) for r in fam]
    assert min(r["spearman_model"] for r in result["runs"].values()) < 0.9  # the priors misrank this run
    pg.refit(result, points, tmp_path)
    f = result["fit"]
    assert f["rms_log_error_after"] < 0.5 * f["rms_log_error_before"]
    for r in result["runs"].values():
        assert r["spearman_fit"] >= max(0.9, r["spearman_model"])
    saved = json.loads((tmp_path / "gemm_calibration.json").read_text())
    assert set(saved["values"]) == set(CALIBRATED)
