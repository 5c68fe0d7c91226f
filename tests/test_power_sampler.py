"""PowerSampler takes readings at the start and the end of a run, even one shorter than its period
(the H200 run recorded no power for runs of a few microseconds). A stand-in NVML counts the calls."""
from __future__ import annotations

from formloop.measure import device


class FakeNvml:
    def __init__(self):
        self.reads = 0

    def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802 - NVML's name
        self.reads += 1
        return 100_000 + 1000 * self.reads  # mW


def test_a_run_shorter_than_the_period_has_start_and_end_readings(monkeypatch):
    nvml = FakeNvml()
    monkeypatch.setattr(device, "_nvml_handle", lambda index: (nvml, "h"))
    with device.PowerSampler(0, period_s=60.0) as p:
        pass  # far shorter than the period
    assert nvml.reads >= 2 and len(p.samples) == nvml.reads
    assert p.mean_w == sum(100 + k for k in range(1, nvml.reads + 1)) / nvml.reads


def test_no_nvml_means_no_figure(monkeypatch):
    def absent(index):
        raise ImportError("no pynvml")

    monkeypatch.setattr(device, "_nvml_handle", absent)
    with device.PowerSampler(0) as p:
        pass
    assert p.mean_w is None and p.samples == []
