"""`formloop optimize` on the shipped attention problems, end to end in the Triton interpreter at SMALL
sizes with one batch entry: SDPA (causal prefill, GQA decode) and minGPT's written-out attention become the
fp32 flash kernel, and every ModelNew passes the harness (KernelBench's fp32 tolerance, float64 truth) and the integrity
battery. A ModelNew whose mask is wrong (causal flag dropped) is refused by the same harness. Slow
(interpreted kernels, child processes, ~20 s a problem alone, most of it the integrity battery): one
attempt each on the two paths into the kernel, SDPA (causal prefill) and written-out attention (minGPT); the
GQA decode, GQA-causal and full-prefill problems are left to tests/test_attention_fp32.py (their recognition,
and the kernel on GQA, causal tails and full attention against float64), which exercises the same path below
the campaign. The problems are copies of the shipped files with SMALL's batch 1 instead of 2: the same heads,
lengths and tails, half the interpreted kernel work."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop import api  # noqa: E402
from tests.problem_copies import resized  # noqa: E402

NAMES = ["attention_causal"]
# shipped problem -> (its SMALL sizes, the same with one batch entry)
ONE_BATCH = {"level1/attention_causal.py": ('{"B": 2, "H": 4, "S": 96, "D": 64}', '{"B": 1, "H": 4, "S": 96, "D": 64}'),
             "level3/mingpt_attention.py": ('{"B": 2, "T": 64, "C": 64, "H": 4}', '{"B": 1, "T": 64, "C": 64, "H": 4}')}


def _one_batch(root: Path) -> list[str]:
    """Copies of the shipped problems under root (same levels, same names), SMALL's batch made 1."""
    return resized(root, ONE_BATCH)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("optimize_attention")
    files = _one_batch(tmp_path_factory.mktemp("problems"))
    report = api.optimize(files, out=str(out), budget=1, small=True, tier="interpreter", workers=1, progress=False,
                          tolerance="kernelbench", store=str(out / "population.db"))
    return out, {r["problem"]: r for r in report["problems"]}


@pytest.mark.parametrize("name", NAMES + ["mingpt_attention"])
def test_attention_problem_gets_an_accepted_kernel(campaign, name):
    out, rows = campaign
    r = rows[name]
    assert r["best"] is not None, r["verdicts"]
    assert r["verdicts"][0]["correct"] and r["verdicts"][0]["accepted"], r["verdicts"]
    kinds = [g["kind"] for g in r["regions"]]
    assert "attention" in kinds
    body = (out / "models" / f"{name}.py").read_text().split("def forward", 1)[1]
    assert "attention(" in body and "scaled_dot_product_attention" not in body and "softmax" not in body
    notes = " ".join(n for g in r["regions"] if g["kind"] == "attention" for n in g["notes"])
    assert "tf32x3" in notes and "not the proved bf16" in notes


def test_a_wrong_mask_is_refused_by_the_harness(campaign, tmp_path):
    """The accepted causal ModelNew with its causal flag dropped computes full attention: the harness
    (same problem, same tolerance) must call it incorrect."""
    from formloop.measure.jobs import run_harness

    out, _ = campaign
    src = (out / "models" / "attention_causal.py").read_text()
    assert src.count("causal = True") == 1
    wrong = tmp_path / "attention_causal_wrong.py"
    wrong.write_text(src.replace("causal = True", "causal = False"))
    problem = out / "problems" / "attention_causal.py"
    h = run_harness(str(problem), str(wrong), tolerance="kernelbench", sets=1)
    assert not h["correct"], h.get("summary")
    good = run_harness(str(problem), str(out / "models" / "attention_causal.py"), tolerance="kernelbench", sets=1)
    assert good["correct"], good.get("summary")
