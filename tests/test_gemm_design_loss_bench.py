"""benchmarks/gemm_design_loss.py on a synthetic run: every design timed at 1.1x the model's time under a
known calibration, so the decomposition must show a model error of ln(1.1), no selection loss (the pick is
re-solved to optimality), and terms that add up to ln(measured / SOL floor) computed here independently."""
from __future__ import annotations

import json
import math
import os
import sys

from formloop.codesign.reuse import model_cost
from formloop.hw.chips import get_chip
from formloop.library.gemm_tiling import workload
from formloop.sol import sol_report
from formloop.solve import SOLVERS
from tests.test_gemm_schedule_fit import TRUTH, _sched

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
SHAPES = [(2304, 2048, 4096), (64, 1024, 2048)]


def test_the_decomposition_of_a_synthetic_run(tmp_path):
    chip, t = get_chip("h200"), _sched(TRUTH)
    rows = []
    for s in SHAPES:
        w = workload(s, "bf16")
        pick = dict(SOLVERS["enumerate"](t.formulate(w, chip)).assignment)
        us = model_cost(t, pick, w, chip)[0] * 1.1
        rows.append({"shape": list(s), "torch": {"graph": {"us": us / 2}},
                     "designs": [{"design": pick, "schedule": "x",
                                  "graph": {"us": us, "p20_us": us * 0.99, "p80_us": us * 1.01}}]})
    run = tmp_path / "gemm_eager.json"
    run.write_text(json.dumps({"rows": rows, "learned": {"calibration": {"terms": TRUTH, "id": 1, "label": "t"}}}))
    sys.path.insert(0, BENCH)
    import gemm_design_loss

    assert gemm_design_loss.main(["--run", str(run), "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "gemm_design_loss.json").read_text())
    assert len(out) == len(SHAPES)
    for s, loss in zip(SHAPES, out):
        floor = sol_report("gemm", dict(zip("MNK", s)), "bf16", chip).time_floor_s * 1e6
        assert math.isclose(loss["model_error"], math.log(1.1), rel_tol=1e-6)
        assert abs(loss["selection"]) < 1e-9 and loss["precondition"] >= 0
        assert math.isclose(loss["total"], math.log(loss["measured_us"] / floor), rel_tol=1e-9)
        parts = loss["representation"] + loss["precondition"] + loss["selection"] + loss["model_error"]
        assert math.isclose(parts, loss["total"], rel_tol=1e-6)
        assert math.isclose(loss["spread"], math.log(1.01 / 0.99), rel_tol=1e-6)
