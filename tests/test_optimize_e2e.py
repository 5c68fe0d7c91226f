"""`formloop optimize` end to end in the Triton interpreter at SMALL sizes: problems captured,
regions implemented, each ModelNew checked by the harness (against the reference and its float64
truth) and the integrity battery in a child process, the record resumed, an agent's submission
judged like formloop's own. Slow (interpreted kernels): three problems, one attempt each."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop import api  # noqa: E402
from formloop.optimize.store import OptimizeStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
P = ROOT / "problems"
FILES = [str(P / "level2" / "linear_bias_relu.py"), str(P / "level1" / "rmsnorm.py"),
         str(ROOT / "tests" / "fixtures" / "optimize" / "row_cumprod.py")]   # no region implements cumprod

WRONG = '''import torch
from formloop.sol.problem import load_problem

PROBLEM = {path!r}


class ModelNew(torch.nn.Module):
    def __init__(self, *init):
        super().__init__()
        self.proj = load_problem(PROBLEM, small=True).Model(*init).proj

    def forward(self, x):
        return torch.relu(self.proj(x)) * 1.01   # 1% off: the harness must refuse it
'''


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("optimize")
    report = api.optimize(FILES, out=str(out), budget=1, small=True, tier="interpreter", workers=1, progress=False,
                          store=str(out / "population.db"))
    return out, report


def test_gemm_problem_gets_a_verified_model_new(campaign):
    out, report = campaign
    rows = {r["problem"]: r for r in report["problems"]}
    lbr = rows["linear_bias_relu"]
    assert lbr["best"] is not None, lbr["verdicts"]
    assert lbr["verdicts"][0]["correct"] and lbr["verdicts"][0]["accepted"]
    assert lbr["regions"][0]["kind"] == "gemm-epilogue"
    assert (out / "models" / "linear_bias_relu.py").is_file()
    assert "gemm_chain" in (out / "models" / "linear_bias_relu.py").read_text()
    assert lbr["best"]["time_source"] == "cpu"


def test_rowwise_problem_gets_a_verified_model_new(campaign):
    out, report = campaign
    rms = {r["problem"]: r for r in report["problems"]}["rmsnorm"]
    assert rms["best"] is not None and rms["verdicts"][0]["accepted"], rms["verdicts"]
    assert [g["kind"] for g in rms["regions"]] == ["rowwise"]
    assert "row_op('rmsnorm'" in (out / "models" / "rmsnorm.py").read_text()


def test_uncovered_problem_keeps_the_reference_with_a_reason(campaign):
    out, report = campaign
    cs = {r["problem"]: r for r in report["problems"]}["row_cumprod"]
    assert cs["status"] == "reference" and cs["best"] is None
    assert "cumprod" in cs["reason"]
    assert not (out / "models" / "row_cumprod.py").exists()


def test_report_is_labelled_interpreter_and_written(campaign):
    out, report = campaign
    assert report["tier"] == "interpreter" and "NOT kernel speedups" in report["note"]
    s = report["summary"]
    assert s["problems"] == 3 and s["with_accepted_candidate"] == 2 and s["kept_reference"] == 1
    assert set(s["vs_eager"]["fast_p"]) == {"0", "1", "1.5", "2"}
    assert s["vs_eager"]["fast_p"]["0"] == pytest.approx(2 / 3)   # two of three have an accepted candidate
    assert s["vs_compile"] is None                     # not measured on this tier
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["summary"]["with_accepted_candidate"] == 2
    assert "interpreter" in (out / "report.md").read_text()


def test_second_call_resumes_without_new_attempts(campaign):
    out, _ = campaign
    store = OptimizeStore(out / "population.db", "fp32/small")
    before = [dict(a) for a in store.attempts("linear_bias_relu")]
    store.close()
    report = api.optimize(FILES, out=str(out), budget=1, small=True, tier="interpreter", workers=1, progress=False,
                          store=str(out / "population.db"))
    store = OptimizeStore(out / "population.db", "fp32/small")
    after = store.attempts("linear_bias_relu")
    store.close()
    assert [a["id"] for a in after] == [a["id"] for a in before]   # the budget was spent: nothing re-run
    assert {r["problem"]: r for r in report["problems"]}["linear_bias_relu"]["best"]["attempt"] == 0


def test_an_agents_wrong_candidate_is_refused_and_stored(campaign):
    out, _ = campaign
    r = api.optimize_submit(FILES[0], out=str(out), source=WRONG.format(path=FILES[0]), small=True,
                            tier="interpreter", store=str(out / "population.db"))
    assert r["correct"] is False and r["accepted"] is False and r["verdict"].startswith("incorrect")
    assert r["is_best"] is False
    status = api.optimize_status(FILES[0], out=str(out), store=str(out / "population.db"), small=True)
    assert status["best"]["origin"] == "formloop"
    assert [a["origin"] for a in status["attempts"]] == ["formloop", "agent"]
    assert status["sol"]["time_floor_s"] > 0


# problem -> (its SMALL sizes, fewer rows, the same row length): the interpreted kernels' time is per row
FEWER_ROWS = {"rmsnorm": ('{"R": 64, "D": 512}', '{"R": 8, "D": 512}'),
              "cross_entropy": ('{"N": 64, "CLASSES": 512}', '{"N": 8, "CLASSES": 512}')}


def _fewer_rows(root: Path, name: str) -> str:
    """A copy of problems/level1/NAME.py under root/level1 with FEWER_ROWS' SMALL sizes."""
    small, fewer = FEWER_ROWS[name]
    text = (P / "level1" / f"{name}.py").read_text()
    assert f"SMALL = {small}" in text, name
    (root / "level1").mkdir(parents=True, exist_ok=True)
    (root / "level1" / f"{name}.py").write_text(text.replace(f"SMALL = {small}", f"SMALL = {fewer}", 1))
    return str(root / "level1" / f"{name}.py")


def test_bf16_variant_casts_what_it_can_and_says_why_not(tmp_path):
    """--dtype bf16: rmsnorm runs in bf16 (its candidate and its eager baseline both timed in bf16 by the
    harness, bf16 tolerance); cross_entropy's integer targets keep it fp32, with the reason. Both with 8
    rows instead of SMALL's 64 (rows of the same length: the cast and its tolerance are what is checked)."""
    files = [_fewer_rows(tmp_path / "problems", n) for n in ("rmsnorm", "cross_entropy")]
    report = api.optimize(files, out=str(tmp_path), budget=1, small=True, tier="interpreter", workers=1,
                          progress=False, store=str(tmp_path / "p.db"), dtype="bf16")
    rows = {r["problem"]: r for r in report["problems"]}
    assert report["dtype"] == "bf16" and report["campaign"] == "bf16/small"
    assert rows["rmsnorm"]["dtype"] == "bf16" and rows["rmsnorm"]["dtype_reason"] == ""
    assert rows["cross_entropy"]["dtype"] == "fp32" and "int64" in rows["cross_entropy"]["dtype_reason"]
    with OptimizeStore(tmp_path / "p.db", "bf16/small", mode="read") as s:
        a = s.attempts("rmsnorm")[0]
    assert a["detail"]["harness"]["protocol"]["precision"] == "torch.bfloat16", a["verdict"]
    assert a["ref_s"] is not None and a["accepted"], a["verdict"]
    assert "stayed fp32: cross_entropy" in (tmp_path / "report.md").read_text()
    with OptimizeStore(tmp_path / "p.db", "fp32/small", mode="read") as s:
        assert s.problems() == []     # the fp32 campaign is another record
