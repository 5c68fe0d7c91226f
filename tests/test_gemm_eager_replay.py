"""benchmarks/gemm_eager.py --replay: the learning step of the GPU benchmark on the CPU. A synthetic earlier run
(graph times from the schedule family's cost under a known TRUTH in which stream-K is slow) is refit and
re-solved: the fit is stored in the population store under --out, and the re-picks are the TRUTH's schedules."""
from __future__ import annotations

import json
import os
import sys

from formloop.evaluate.calibrate import Point, predict
from formloop.hw.chips import get_chip
from formloop.library.gemm_tiling import workload
from formloop.population import Population
from formloop.population import calibrations as cal
from formloop.solve import enumerate_designs
from tests.test_gemm_schedule_fit import SHAPES, TRUTH, _menu, _sched

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def _run_json(path):
    chip, t = get_chip("h200"), _sched()
    rows = []
    for s in SHAPES:
        w = workload(s, "bf16")
        designs = []
        for a in _menu(t.formulate(w, chip)):
            us = float(predict(t, chip, [Point(a, w, 0.0)], TRUTH)[0])
            designs.append({"design": a, "graph": {"us": us}})
        plan = {"graph": {"us": designs[0]["graph"]["us"]}, "eager": {"us": designs[0]["graph"]["us"] + 10}}
        rows.append({"shape": list(s), "designs": designs, "torch": {"graph": {"us": 1.0}, "eager": {"us": 2.0}},
                     "pick": {"design": designs[0]["design"], "plan": plan},
                     "best": {"design": designs[0]["design"], "plan": plan}})
    versions = {"triton": "3.6.0", "torch": "2.11.0", "cuda": "12.8", "capability": "9.0"}
    path.write_text(json.dumps({"rows": rows, "device": {"versions": versions}, "source": "synthetic"}))


def test_replay_refits_stores_and_repicks_the_truths_schedules(tmp_path, capsys):
    sys.path.insert(0, BENCH)
    import gemm_eager

    src = tmp_path / "run.json"
    _run_json(src)
    out = tmp_path / "out"
    assert gemm_eager.main(["--replay", str(src), "--out", str(out)]) == 0
    lr = json.loads((out / "gemm_eager_replay.json").read_text())
    assert set(gemm_eager.FIT_FIRST) <= set(lr["calibration"]["fitted"])
    chip = get_chip("h200")
    for e, s in zip(lr["shapes"], SHAPES):
        want = enumerate_designs(_sched(TRUTH).formulate(workload(s, "bf16"), chip)).assignment["SC"]
        assert e["design"]["SC"] == want, s
    with Population(out / "population.db") as pop:
        found = cal.latest(pop, "gemm-tiling-gpu", "bf16", "h200")
    assert found is not None and found.id == lr["calibration"]["id"]
    text = capsys.readouterr().out
    assert "before = that run's picks" in text and "geomean cuBLAS/ours" in text
