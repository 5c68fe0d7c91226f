"""Evaluators: the model tier against the template's cost, the correctness check against sabotaged
instances (run in Triton's interpreter on the CPU), and the fallback when no GPU is present."""
from __future__ import annotations

import math
import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from typer.testing import CliRunner  # noqa: E402

from formloop.cli import app  # noqa: E402
from formloop.evaluate import ModelEvaluator, best_available  # noqa: E402
from formloop.evaluate.gpu import check  # noqa: E402
from formloop.evaluate.measurement import Correctness  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import get_template  # noqa: E402
from formloop.library.gemm_tiling import workload  # noqa: E402
from formloop.library.gemm_tiling_instance import TritonGemm  # noqa: E402
from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig  # noqa: E402

GOOD = {"Tm": 128, "Tn": 256, "Tk": 64, "S": 4, "W": 8, "KS": 1, "G": 8, "L": 1}


def test_model_tier_is_the_template_cost():
    t, chip = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    w = workload((4096, 4096, 4096), "bf16")
    m = ModelEvaluator().evaluate(t, GOOD, w, chip)
    assert m.ok and m.tier == "model" and m.template_hash == t.content_hash
    assert m.latency_us == pytest.approx(t.evaluate_terms(GOOD, t.bind(w, chip))["cost"])


def test_infeasible_instance_is_a_failed_measurement_with_its_reason():
    t, chip = get_template("gemm-tiling-gpu", dtype="bf16"), get_chip("h200")
    too_big = {**GOOD, "S": 5}  # 5 slots of (128+256)x64 bf16 = 240 KiB > 227 KiB
    m = ModelEvaluator().evaluate(t, too_big, workload((4096, 4096, 4096), "bf16"), chip)
    assert not m.ok and math.isinf(m.latency_us) and "C1" in m.failure


def test_no_gpu_means_model_tier():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert isinstance(best_available(), ModelEvaluator)


def test_nan_never_passes():
    assert not Correctness(math.nan, 0.0, 1e-2, True, "float64").passed
    assert not Correctness(0.0, 0.0, 1e-2, False, "float64").passed
    assert Correctness(1e-3, 1e-2, 1e-2, True, "float64").passed
    assert not Correctness(1e-3, 0.5, 1e-2, True, "float64").passed  # one wrong element


class _HalfWritten(TritonGemm):
    def launch(self, case):
        super().launch(case)
        case.c[: case.c.shape[0] // 2] = float("nan")  # as if half the tiles were never stored


class _DroppedTail(TritonGemm):
    def reference(self, case):  # the kernel is right; pretend the k tail were dropped
        return case.a[:, :-8].double() @ case.b[:-8, :].double()


def test_check_passes_a_correct_kernel_and_rejects_sabotage():
    plan = GemmPlan(TileConfig(16, 32, 32, S=2, KS=2), 37, 40, 72, "bf16")
    gen = torch.Generator().manual_seed(3)
    assert check(TritonGemm(plan), "cpu", gen).passed
    half = check(_HalfWritten(plan), "cpu", gen)
    assert not half.passed and not half.all_written
    tail = check(_DroppedTail(plan), "cpu", gen)
    assert not tail.passed and tail.all_written and tail.rel_error > tail.tolerance


def test_measure_cli_without_gpu_falls_back_to_model_labelled():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = CliRunner().invoke(app, ["measure", "gemm-tiling", "--shape", "1000,1000,1000", "--json"])
    assert result.exit_code == 0, result.output
    import json

    report = json.loads(result.output)
    assert report["measurement"]["tier"] == "model" and "no CUDA device" in report["fallback"]
    bad = CliRunner().invoke(app, ["measure", "gemm-tiling", "--shape", "1000,1000,1000", "--chip", "illustrative"])
    assert bad.exit_code == 2 and "chip" in bad.output
