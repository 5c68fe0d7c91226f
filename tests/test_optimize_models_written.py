"""OUT/models: on the gpu tier a best kernel measured slower than eager keeps the reference (no ModelNew
written), and the report shows that view beside the candidates' own geomean."""
from __future__ import annotations

import math
from pathlib import Path

from formloop.optimize.engine import _write_models
from formloop.optimize.report import _summary
from formloop.optimize.store import OptimizeStore


def _store(tmp_path: Path) -> OptimizeStore:
    store = OptimizeStore(tmp_path / "p.db", "fp32/full")
    for name, t, ref in (("fast", 1.0, 2.0), ("slow", 4.0, 1.0)):
        cand = tmp_path / f"{name}_a0.py"
        cand.write_text(f"# {name}\n")
        store.put_problem(name, path=str(tmp_path / f"{name}.py"), level=1, tier="gpu", status="ready")
        store.add_attempt(name, candidate=str(cand), origin="formloop", correct=True, accepted=True,
                          verdict="clean", time_s=t, ref_s=ref, time_source="gpu", sol_fraction=0.5, detail={})
    return store


def test_a_slower_best_keeps_the_reference_on_the_gpu_tier(tmp_path):
    store = _store(tmp_path)
    files = [tmp_path / "fast.py", tmp_path / "slow.py"]
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "slow.py").write_text("stale")
    _write_models(files, store, tmp_path, "gpu")
    assert (tmp_path / "models" / "fast.py").read_text() == "# fast\n"
    assert not (tmp_path / "models" / "slow.py").exists()
    _write_models(files, store, tmp_path, "interpreter")   # interpreter times say nothing about kernels
    assert (tmp_path / "models" / "slow.py").read_text() == "# slow\n"
    store.close()


def test_the_summary_has_both_geomeans():
    rows = [{"problem": n, "speedup_eager": s, "speedup_compile": None, "sol_fraction": None, "best": b,
             "status": "ready", "attempts": 1, "dtype": "fp32", "phase_seconds": [], "bootstrap_seconds": {},
             "compile_s": None}
            for n, s, b in (("fast", 2.0, {}), ("slow", 0.25, {}), ("none", None, None))]
    ve = _summary(rows)["vs_eager"]
    assert math.isclose(ve["geomean"], (2.0 * 0.25 * 1.0) ** (1 / 3))
    assert math.isclose(ve["geomean_models"], (2.0 * 1.0 * 1.0) ** (1 / 3))


def test_report_only_rebuilds_the_report_from_a_store(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("optimize_set", Path(__file__).parent.parent / "benchmarks" /
                                                  "optimize_set.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    root = tmp_path / "problems"
    root.mkdir()
    for name in ("fast", "slow"):
        (root / f"{name}.py").write_text("")
    _store(tmp_path).close()
    out = tmp_path / "out"
    assert bench.main(["--out", str(out), "--root", str(root), "--store", str(tmp_path / "p.db"),
                       "--report-only"]) == 0
    text = (out / "report.md").read_text()
    assert "# formloop optimize (gpu, fp32)" in text and "nothing measured" in text
    assert "| fast |" in text and "| slow |" in text and "geomean 1x" not in text


def test_the_report_says_which_best_kernels_were_timed_in_rounds(tmp_path):
    from formloop.optimize.report import _row, markdown

    store = OptimizeStore(tmp_path / "p.db", "fp32/full")
    for name, protocol in (("old", {"reference_math": "fp32"}),
                           ("new", {"reference_math": "fp32", "timing_rounds": 2})):
        store.put_problem(name, path=str(tmp_path / f"{name}.py"), level=1, tier="gpu", status="ready")
        store.add_attempt(name, candidate=str(tmp_path / f"{name}_a0.py"), origin="formloop", correct=True,
                          accepted=True, verdict="clean", time_s=1.0, ref_s=1.0, time_source="gpu", sol_fraction=0.5,
                          detail={"harness": {"protocol": protocol}})
    rows = [_row(store, n) for n in ("old", "new")]
    assert [r["timing_rounds"] for r in rows] == [1, 2]
    summary = _summary(rows)
    assert summary["timing_protocol"] == {"rounds": 1, "one_round": 1}
    report = {"summary": summary, "tier": "gpu", "dtype": "fp32", "note": "", "engine": {}, "store": "s",
              "campaign": "c", "source": "gpu", "settings": {"tolerance": "kernelbench"}, "problems": rows}
    assert "1 against their reference in rounds" in markdown(report)
    store.close()


def test_recompile_clears_a_baseline_and_keeps_the_old_one(tmp_path):
    import importlib.util
    import types

    import pytest

    spec = importlib.util.spec_from_file_location("optimize_set", Path(__file__).parent.parent / "benchmarks" /
                                                  "optimize_set.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    store = _store(tmp_path)
    store.set_compile("fast", 0.5, {"ref_s": 2.0, "source": "gpu"})
    store.close()
    args = types.SimpleNamespace(dtype="fp32", store=tmp_path / "p.db", out=tmp_path, recompile=["fast"])
    bench.recompile(args, small=False)
    with OptimizeStore(tmp_path / "p.db", "fp32/full") as again:
        rec = again.problem("fast")
        assert rec["compile_s"] is None                                   # --compile-only measures it again
        assert rec["compile"]["previous"] == {"compile_s": 0.5, "ref_s": 2.0, "source": "gpu"}
        assert again.problem("slow")["compile_s"] is None and again.problem("slow")["compile"] is None
    args.recompile = ["nope"]
    with pytest.raises(SystemExit, match="nope"):
        bench.recompile(args, small=False)
