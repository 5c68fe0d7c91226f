"""benchmarks/emulated_walls.py off the GPU: a design that fails on an emulated chip gives way to the
model's next-best admitted design (recorded), and gains are only taken between finite measurements
(the H200 run reported inf objectives and nan gains when Triton failed to compile a pick)."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def ew():
    spec = importlib.util.spec_from_file_location("emulated_walls_bench", ROOT / "benchmarks" / "emulated_walls.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_failed_pick_falls_back_to_the_next_best_admitted_design(ew, monkeypatch):
    from formloop.evaluate.emulated import Walls

    b = ew.Bench(dry=True)
    w, shape = Walls(66, 227 * 1024, 128), (1000, 1000, 1000)
    ranked, chip = b.ranked(w, shape, ew.FALLBACKS)
    assert ranked[0][0] == b.pick(w, shape)[0] and len({tuple(a.items()) for a, _ in ranked}) == len(ranked)
    assert [us for _, us in ranked] == sorted(us for _, us in ranked)  # the model's order
    failing = ranked[0][0]

    def one(w_, shape_, a, chip_):
        return (math.nan, "CompilationError: please share the reproducer") if a == failing else (7.0, "")

    monkeypatch.setattr(b, "_measure_one", one)
    model_us, us, design = b.measure(w, shape)
    assert design == ranked[1][0] and us == 7.0 and model_us == ranked[1][1]
    assert b.fallbacks == [{"chip": w.label(), "shape": "1000x1000x1000", "design": failing,
                            "reason": "CompilationError: please share the reproducer"}]
    assert b.measurements == 2


def test_all_failing_gives_nan_and_no_gain(ew, monkeypatch):
    from formloop.evaluate.emulated import Walls

    b = ew.Bench(dry=True)
    monkeypatch.setattr(b, "_measure_one", lambda *args: (math.nan, "launch failed"))
    full = Walls(132, 227 * 1024, None)
    m, g = b.objective(Walls(16, 64 * 1024, 128), full)
    assert math.isfinite(m) and math.isnan(g)
    assert len(b.fallbacks) == ew.FALLBACKS * len(ew.SHAPES) * 2
    assert ew.gain(g, 1.5) is None and ew.gain(2.0, math.inf) is None and ew.gain(3.0, 1.5) == 2.0


def test_dry_run_writes_finite_json(ew, tmp_path, capsys):
    assert ew.main(["--dry-run", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "emulated_walls.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    result = json.loads(text)
    assert result["purchases"] and result["exhaustive"]["best"]
    for p in result["purchases"]:
        assert p["measured_gain"] is None or math.isfinite(p["measured_gain"])
    assert "assumed" in result["area_model"] and "emulated chip" in capsys.readouterr().out


def test_dry_run_relaxation_walks_to_the_exhaustive_best(ew, tmp_path):
    """The perturbed model (+-15% per chip and shape, simulated compile failures) plays the GPU; the
    relaxation measures exactly the picks of the model its SOLVE reads and, refitting on a miss, ends
    where exhaustive search over the grid does."""
    assert ew.main(["--dry-run", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "emulated_walls.json").read_text())
    assert out["model"].startswith("occupancy")
    assert out["relaxation"]["end"] == out["exhaustive"]["best"]
    assert len(out["purchases"]) >= 2 and all(p["buy"].startswith("sm") for p in out["purchases"])
    for key, m in out["measurements"].items():
        assert m["blocks_per_sm"] >= 1


def test_attention_decode_dry_run(ew, tmp_path, capsys):
    """The decode family through the same relaxation: stream timing, its own cost as the model, every measured
    ratio finite; the end chip's measured objective is the worst ratio recomputed here from the recorded
    measurements of that chip and of the full chip."""
    assert ew.main(["--dry-run", "--family", "attention-decode", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "emulated_walls.json").read_text())
    assert out["family"] == "attention-decode" and out["timing"] == "stream" and "own cost" in out["model"]
    assert out["purchases"] and all(p["predicted_gain"] > 1 for p in out["purchases"])
    shapes = {key.split(" ")[1] for key in out["measurements"]}
    assert shapes == {"x".join(map(str, s)) for s in ew.DECODE_SHAPES}
    end, chip = out["relaxation"]["measured_objective"], out["relaxation"]["end"]
    ms = out["measurements"]
    worst = max(ms[f"{chip} {s}"]["measured_us"] / ms[f"132sm-227k-anyr {s}"]["measured_us"] for s in shapes)
    assert end == pytest.approx(worst, rel=1e-12)
    assert "attention-decode" in capsys.readouterr().out
