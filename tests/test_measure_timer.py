"""The one timer on a CPU: medians against a known sleep, rotating operand sets visited in order, the
last output and its set, labels, bad arguments; the device-state reader against a stand-in
nvidia-smi. (The CUDA-graph and eager-event paths run in benchmarks/integrity_suite.py on a GPU.)"""
import math
import os
import stat

import pytest

from formloop.errors import InvalidInput
from formloop.measure.device import read_clocks, read_device_state
from formloop.measure.timer import TimingPolicy, operand_sets_for, time_calls, time_launches


def test_median_of_a_known_sleep_and_its_labels():
    import time

    policy = TimingPolicy(budget_ms=60.0, min_reps=7, max_calls=20)
    run = time_launches(lambda i: time.sleep(0.004), 2, device="cpu", policy=policy)
    t = run.timing
    assert t.source == "cpu" and t.mode == "wall" and 7 <= t.reps <= 20
    assert 0.004 <= t.min_s <= t.p20_s <= t.seconds <= t.p80_s <= t.max_s
    assert t.seconds < 0.05  # a loaded CI machine, but not ten times the sleep
    d = t.as_dict()
    assert d["operand_sets"] == 2 and "host wall time" in d["method"] and d["device"] == {}


def test_operand_sets_are_visited_in_rotation_and_the_last_output_is_returned():
    seen = []

    def launch(i):
        seen.append(i)
        return ("out", i)

    run = time_launches(launch, 3, device="cpu", policy=TimingPolicy(budget_ms=0.0, min_reps=5, max_calls=5))
    assert seen[:3] == [0, 1, 2]                    # warm-up: every set once
    assert seen[3:] == [0, 1, 2, 0, 1]              # timed calls cycle over the sets
    assert run.last_output == ("out", 1) and run.last_set == 1
    calls = time_calls(lambda a, b: a * b, [(2, 3), (4, 5)], device="cpu",
                       policy=TimingPolicy(budget_ms=0.0, min_reps=3, max_calls=3))
    assert calls.last_set == 0 and calls.last_output == 6


def test_operand_sets_span_a_multiple_of_the_l2():
    p = TimingPolicy(l2_multiple=3.0, max_sets=64)
    assert operand_sets_for(10 * 2**20, 50 * 2**20, p) == math.ceil(3 * 50 / 10)
    assert operand_sets_for(6 * 2**30, 50 * 2**20, p) == 1      # one 6 GB set already exceeds the L2
    assert operand_sets_for(1024, 50 * 2**20, p) == 64          # capped


def test_bad_timer_arguments_name_the_field():
    with pytest.raises(InvalidInput, match="timing mode"):
        time_launches(lambda i: None, 1, mode="fast")
    with pytest.raises(InvalidInput, match="operand sets"):
        time_launches(lambda i: None, 0)
    with pytest.raises(InvalidInput, match="input sets"):
        time_calls(lambda: None, [])


def test_device_state_is_read_from_nvidia_smi_when_nvml_is_absent(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    try:
        import pynvml  # noqa: F401
        pytest.skip("NVML present: it answers first")
    except ImportError:
        pass
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '1980, 3201, 1980, 412.50, [N/A]'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    s = read_device_state(0)
    assert s == {"source": "nvidia-smi", "sm_mhz": 1980.0, "mem_mhz": 3201.0, "sm_max_mhz": 1980.0, "power_w": 412.5}
    assert read_clocks(0) == {"sm": 1980.0, "mem": 3201.0, "sm_max": 1980.0}
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert read_device_state(0) == {}


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="a CUDA graph capture needs a GPU")
def test_a_failed_capture_is_timed_eagerly_and_random_draws_still_work():
    """A call that cannot be captured (it synchronizes) is timed eagerly with the reason; afterwards the device's
    random generator draws again (a failed capture used to leave it in capture mode)."""
    import torch

    x = torch.ones(1024, device="cuda")

    def launch(i):
        y = x * 2
        torch.cuda.synchronize()
        return y

    run = time_launches(launch, 1, device="cuda", mode="auto", policy=TimingPolicy(budget_ms=5.0))
    assert run.timing.mode == "eager" and "graph capture failed" in run.timing.note
    assert torch.randn(4, device="cuda").isfinite().all()
