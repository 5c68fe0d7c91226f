"""What the GPU was doing while it was timed: SM and memory clocks, power draw and temperature, read
through NVML (the `nvidia-ml-py` package, imported as pynvml) when it is installed, else through
`nvidia-smi`; and the static facts of the device (name, SM count, L2 size, toolchain versions).

A reading is a plain dict with its `source` ('nvml' | 'nvidia-smi'); an empty dict means no reader
answered (no GPU, or neither NVML nor nvidia-smi is present)."""
from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

_SMI_FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "power.draw", "temperature.gpu")
_SMI_KEYS = ("sm_mhz", "mem_mhz", "sm_max_mhz", "power_w", "temperature_c")


def _nvml_handle(index: int):
    import pynvml

    pynvml.nvmlInit()
    uuid = _cuda_uuid(index)
    if uuid:
        try:
            return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except Exception:  # noqa: BLE001 - UUID formats differ between drivers; fall back to the index
            pass
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)


def _cuda_uuid(index: int) -> str:
    """The NVML-style UUID of CUDA device `index` (CUDA_VISIBLE_DEVICES renumbers devices)."""
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):
        return ""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # noqa: BLE001
        return ""
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def _read_nvml(index: int) -> dict[str, Any]:
    pynvml, h = _nvml_handle(index)
    out: dict[str, Any] = {"source": "nvml",
                           "sm_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                           "mem_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                           "sm_max_mhz": float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))}
    try:
        out["power_w"] = pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        out["temperature_c"] = float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
    except Exception:  # noqa: BLE001 - some boards do not report power
        pass
    return out


def _read_smi(index: int) -> dict[str, Any]:
    ident = _cuda_uuid(index) or str(index)
    text = subprocess.run(["nvidia-smi", f"--id={ident}", f"--query-gpu={','.join(_SMI_FIELDS)}",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10).stdout
    values = [v.strip() for v in text.strip().splitlines()[0].split(",")]
    out: dict[str, Any] = {"source": "nvidia-smi"}
    for key, value in zip(_SMI_KEYS, values):
        try:
            out[key] = float(value)
        except ValueError:  # '[N/A]'
            continue
    return out


def read_device_state(index: int = 0) -> dict[str, Any]:
    """Clocks (MHz), power (W) and temperature (C) of CUDA device `index` now; {} if nothing answers."""
    for reader in (_read_nvml, _read_smi):
        try:
            return reader(index)
        except Exception:  # noqa: BLE001 - any failure falls through to the next reader
            continue
    return {}


def read_clocks(index: int = 0) -> dict[str, float]:
    """The clock part of `read_device_state` under the keys the GPU evaluator has always stored."""
    s = read_device_state(index)
    return {k: s[src] for k, src in (("sm", "sm_mhz"), ("mem", "mem_mhz"), ("sm_max", "sm_max_mhz")) if src in s}


class PowerSampler:
    """Samples NVML power every `period_s` on a thread while timing runs (NVML only: nvidia-smi is
    too slow to sample). It reads at the start, every period and at the end, so even a run shorter
    than the period has readings (NVML's own figure is averaged over its window, about 1 s on
    Hopper). `mean_w` is None only when NVML is absent."""

    def __init__(self, index: int = 0, period_s: float = 0.01):
        self.index, self.period_s, self.samples = index, period_s, []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PowerSampler:
        try:
            self._nvml, self._handle = _nvml_handle(self.index)
        except Exception:  # noqa: BLE001
            return self
        self._thread = threading.Thread(target=self._run, name="formloop-power", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> bool:
        try:
            self.samples.append(self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0)
            return True
        except Exception:  # noqa: BLE001
            return False

    def _run(self) -> None:
        # One reading at the start, then every period: a run shorter than the period still has one.
        while self._sample() and not self._stop.wait(self.period_s):
            pass

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)
            self._sample()  # and one at the end

    @property
    def mean_w(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def device_facts(index: int = 0) -> dict[str, Any]:
    """Name, SM count, L2 bytes and toolchain versions of CUDA device `index`."""
    import torch

    props = torch.cuda.get_device_properties(index)
    versions = {"torch": torch.__version__, "cuda": str(torch.version.cuda),
                "capability": f"{props.major}.{props.minor}"}
    try:
        import triton

        versions["triton"] = triton.__version__
    except ImportError:
        pass
    return {"device": props.name, "sm_count": props.multi_processor_count,
            "l2_bytes": int(getattr(props, "L2_cache_size", 50 * 2**20)), "versions": versions}
