"""Chip specs: the tiling study's chip is unchanged, every new chip is complete and self-consistent,
clock scaling and measured overrides behave, bad names and values are refused."""
import pytest

from formloop.errors import InvalidInput, UnknownName
from formloop.hw.chips import KiB, PRECISIONS, chip_names, get_chip


def test_illustrative_chip_is_the_seed_contract():
    c = get_chip("illustrative")
    assert (c.sm_count, c.bandwidth, c.peak("fp32"), c.smem_per_block, c.accumulators_per_block,
            c.barrier_cycles, c.clock_hz) == (128, 1.8e12, 80e12, 96 * KiB, 32768, 40, 1.8e9)


@pytest.mark.parametrize("name", ["h100", "h200", "gb10", "ventus"])
def test_chip_has_every_field_and_a_source(name):
    c = get_chip(name)
    assert name in chip_names()
    assert c.source and c.notes
    assert c.sm_count > 0 and c.bandwidth > 0 and c.smem_per_block > 0 and c.l2_bytes > 0
    assert c.smem_per_block <= c.smem_per_sm
    assert c.registers_per_block <= c.registers_per_sm
    # the stated R_acc rule: half of a block's registers
    assert c.accumulators_per_block == c.registers_per_block // 2
    assert c.barrier_cycles > 0
    assert set(c.peak_flops) <= set(PRECISIONS) and "fp32" in c.peak_flops


@pytest.mark.parametrize("name", ["h100", "h200", "gb10"])
def test_tensor_precisions_are_ordered(name):
    c = get_chip(name)
    assert set(c.peak_flops) == set(PRECISIONS)
    assert c.peak("tf32") * 2 == pytest.approx(c.peak("fp16"))
    assert c.peak("bf16") == c.peak("fp16")
    assert c.peak("fp8") == pytest.approx(2 * c.peak("fp16"), rel=1e-4)   # datasheet rounding


def test_hopper_pair_differs_only_in_memory():
    a, b = get_chip("h100"), get_chip("h200")
    assert a.peak_flops == b.peak_flops and a.smem_per_block == b.smem_per_block == 227 * KiB
    assert (a.bandwidth, b.bandwidth) == (3.35e12, 4.8e12)


def test_hopper_fp32_simt_peak_matches_lanes_times_clock():
    c = get_chip("h100")   # 132 SMs x 128 FP32 lanes x 2 FLOP/FMA x 1.98 GHz
    assert c.peak("fp32") == pytest.approx(132 * 128 * 2 * 1.98e9, rel=2e-3)


def test_ventus_reference_from_the_study():
    c = get_chip("ventus")
    assert (c.sm_count, c.warps_per_sm, c.smem_per_sm, c.l1_per_sm, c.l2_bytes) == (2, 8, 128 * KiB, 64 * KiB, 128 * KiB)
    assert c.bandwidth / c.clock_hz == pytest.approx(64.0)    # 64 B/cycle
    with pytest.raises(InvalidInput, match="fp16"):
        c.peak("fp16")                                       # no tensor unit: refused, not substituted


def test_clock_lock_scales_compute_not_memory():
    c = get_chip("h100").at_clock(1500)
    assert c.peak("tf32") / 1e12 == pytest.approx(374.77, abs=5e-3)
    assert c.bandwidth == 3.35e12 and c.clock_hz == 1.5e9
    with pytest.raises(InvalidInput, match="clock_mhz"):
        get_chip("h100").at_clock(2500)


def test_measured_ceilings_override_datasheet():
    c = get_chip("h200").with_measured(mem_bandwidth=4.1e12, flops_bf16=700e12)
    assert c.bandwidth == 4.1e12 and c.peak("bf16") == 700e12 and c.peak("fp16") == 989.4e12
    with pytest.raises(InvalidInput, match="measured ceiling"):
        get_chip("h200").with_measured(bogus=1.0)
    with pytest.raises(InvalidInput):
        get_chip("h200").with_measured(mem_bandwidth=-1.0)


def test_unknown_chip_names_the_choices():
    with pytest.raises(UnknownName, match="h100"):
        get_chip("z100")  # no such chip
