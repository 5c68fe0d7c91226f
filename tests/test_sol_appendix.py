"""Seed 002, Appendix A.2: N=4096 FP32 GEMM on H100 at a locked 1500 MHz, to the digits the seed prints.

The seed prints 1.374e+11 FLOPs, 2.013e+08 bytes, intensity "about 682.6" (682.67 truncated),
TF32 peak 374.77 TFLOP/s, 3.35 TB/s, 0.3670 ms for TF32 (its structured output stores 0.367; the
exact quotient is 0.36673 ms), 0.1834 ms for FP16 and 0.0601 ms of memory time."""
import math

import pytest

from formloop.sol import sol_report


@pytest.fixture(scope="module")
def report():
    return sol_report("gemm", (4096, 4096, 4096), "fp32", "h100", clock_mhz=1500)


def test_counts(report):
    assert report.flops == 2 * 4096 ** 3 and f"{report.flops:.3e}" == "1.374e+11"
    assert report.bytes == 3 * 4096 ** 2 * 4 and f"{report.bytes:.3e}" == "2.013e+08"
    assert math.floor(report.intensity * 10) / 10 == 682.6


def test_clock_scaled_peaks(report):
    assert report.compute_precision == "tf32"           # FP32 data on TF32 tensor cores
    assert round(report.peak_flops / 1e12, 2) == 374.77
    assert report.bandwidth == 3.35e12                    # the SM clock lock leaves HBM alone
    assert report.clock_mhz == 1500


def test_times(report):
    assert round(report.time_floor_s * 1e3, 3) == 0.367 and f"{report.time_floor_s * 1e3:.3f}0" == "0.3670"
    assert round(report.variants["tf32"] * 1e3, 3) == 0.367
    assert round(report.variants["fp16"] * 1e3, 4) == 0.1834
    assert round(report.t_memory_s * 1e3, 4) == 0.0601
    assert report.bound == "compute"
    assert report.most_generous_s == report.variants["fp16"]


def test_fp16_augmentation_keeps_dram_traffic(report):
    fp16 = sol_report("gemm", (4096, 4096, 4096), "fp32", "h100", clock_mhz=1500, compute_precision="fp16")
    assert fp16.bytes == report.bytes and fp16.t_memory_s == report.t_memory_s
    assert fp16.time_floor_s == pytest.approx(report.time_floor_s / 2)


def test_json_has_units(report):
    d = report.as_dict()
    assert d["units"]["times"] == "s" and d["variants"]["fp16"] == report.variants["fp16"]
    assert d["shape"] == {"M": 4096, "N": 4096, "K": 4096}


def test_floors_mapping_matches_variants(report):
    assert report.floors_s == dict(report.variants)
    assert min(report.floors_s.values()) == report.most_generous_s
