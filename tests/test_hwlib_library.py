"""The hardware library: menus, chip steps as operations, the area model against hand sums."""
from __future__ import annotations

import pytest

from formloop.errors import InvalidInput, UnknownName
from formloop.hw.libraries import get_library, ventus_library
from formloop.hw.library import DENSITY, SRAM_MM2_PER_KIB


def test_ventus_reference_matches_the_seed_and_fits():
    lib = ventus_library()
    h = lib.reference
    assert (h["sm"], h["warps"], h["smem_kib"], h["l1_kib"], h["l2_kib"], h["mem_bw"]) == (2, 8, 128, 64, 128, 64)
    assert lib.ceiling_mm2 == 1.11 and lib.fits(h)
    names = set(lib.component_names)
    assert {"sm", "warps", "smem_kib", "l1_kib", "l2_kib", "vreg", "sreg", "tensor_macs", "queue", "mem_bw"} <= names


def test_area_is_the_hand_sum():
    lib = ventus_library()
    h = lib.reference
    sram = SRAM_MM2_PER_KIB
    hand = (0.05                                   # uncore
            + 2 * 0.12                             # SM logic
            + 2 * 8 * 0.003                        # warp slots
            + 2 * 128 * sram                       # shared memory
            + 2 * 64 * 1.1 * sram + 128 * 1.1 * sram  # L1 per SM, L2 (cache density)
            + 2 * 1024 * (128 / 1024) * 1.5 * sram    # vector register slots (128 B each, rf density)
            + 2 * 256 * (4 / 1024) * 8 * sram         # scalar register slots (4 B each, flop density)
            + 2 * 64 * (0.0004 + (128 / 1024) * sram)  # queue entries
            + 64 * 0.002)                              # memory interface
    assert lib.area(h) == pytest.approx(hand, rel=1e-12)
    assert DENSITY["rf"] == pytest.approx(1.5 * sram)


def test_steps_are_operations_on_chip_values():
    lib = ventus_library()
    h = lib.reference
    up = h + lib.e("vreg")
    assert up["vreg"] == 2048 and h["vreg"] == 1024             # h is unchanged: chips are values
    assert (up - lib.e("vreg")) == h
    assert (h + 2 * lib.e("sreg"))["sreg"] == 1024
    both = h + lib.e("vreg") + lib.e("sreg")
    assert (both["vreg"], both["sreg"]) == (2048, 512)
    assert hash(both) == hash(h + (lib.e("sreg") + lib.e("vreg")))
    assert up.area > h.area                                      # a step up costs area
    top = h.with_values(vreg=4096)
    with pytest.raises(InvalidInput, match="step of vreg"):
        top + lib.e("vreg")                                      # past the menu end: refused, not clamped
    with pytest.raises(UnknownName):
        lib.e("registers")


def test_restrict_opens_menus_and_pins_the_rest():
    lib = ventus_library().restrict({"vreg": (512, 1024, 2048), "sreg": (128, 256)}, {"smem_kib": 16})
    assert lib.open_components() == ("vreg", "sreg")
    assert lib.reference["smem_kib"] == 16 and lib.reference["vreg"] == 1024
    assert len(lib.chips(within_ceiling=False)) == 6
    with pytest.raises(InvalidInput, match="menu of sreg"):
        ventus_library().restrict({"sreg": (256, 128)})
    with pytest.raises(UnknownName):
        ventus_library().restrict({"bogus": (1, 2)})
    with pytest.raises(InvalidInput, match="chip component vreg"):
        lib.chip(**{**lib.reference.as_dict(), "vreg": 4096})
    assert get_library("Ventus").name == "ventus"
    with pytest.raises(UnknownName):
        get_library("h100-lib")


def test_a_configuration_is_a_chip_that_templates_sol_and_the_evaluator_read():
    """The illustrative library's reference binds gemm-tiling, prices a SOL report and evaluates a
    design exactly as the registered illustrative chip; the Ventus reference carries the seed's
    fields of the ventus chip."""
    from formloop.evaluate.model import ModelEvaluator
    from formloop.hw.chips import get_chip
    from formloop.library import gemm_tiling as gt
    from formloop.sol import sol_report

    lib = get_library("illustrative")
    chip, registered = lib.reference.chip, get_chip("illustrative")
    assert gt.chip_params(chip) == gt.chip_params(registered)
    a, b = (sol_report("gemm", (1000, 1000, 1000), "fp32", c, compute_precision="fp32") for c in (chip, registered))
    assert (a.t_compute_s, a.t_memory_s) == (b.t_compute_s, b.t_memory_s)
    t, w = gt.gemm_tiling(), gt.workload((1000, 1000, 1000))
    design = {"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0}
    m = ModelEvaluator().evaluate(t, design, w, chip)
    same = ModelEvaluator().evaluate(t, design, w, registered).latency_us
    assert m.latency_us == same == pytest.approx(53.14, abs=0.01)      # the seed's 1000^3 optimum, us
    assert chip.components == lib.reference.as_dict() and chip.name.startswith("illustrative[")
    assert get_chip("illustrative").components == {}                    # a datasheet chip
    v, ref = ventus_library().reference.chip, get_chip("ventus")
    for name in ("sm_count", "warps_per_sm", "smem_per_sm", "smem_per_block", "l1_per_sm", "l2_bytes"):
        assert getattr(v, name) == getattr(ref, name), name
    assert v.bandwidth == ref.bandwidth and v.peak("fp32") == ref.peak("fp32")
    assert v.components["queue"] == 64                                   # no Chip field: kept as a component


def test_a_component_moves_exactly_the_chip_fields_it_declares():
    import dataclasses

    lib = get_library("illustrative").restrict({"smem_kib": (96, 192), "regs_k": (64, 128)})
    h = lib.reference
    ignore = {"name", "source", "components"}

    def changed(a, b):
        return {f.name for f in dataclasses.fields(a)
                if f.name not in ignore and getattr(a, f.name) != getattr(b, f.name)}

    up_smem, up_regs = (h + lib.e("smem_kib")).chip, (h + lib.e("regs_k")).chip
    assert changed(h.chip, up_smem) == {"smem_per_sm", "smem_per_block"}
    assert up_smem.smem_per_block == 192 * 1024
    assert changed(h.chip, up_regs) == {"registers_per_sm", "registers_per_block", "accumulators_per_block"}
    # the Chip rule: R_acc is half of the registers one block may hold
    assert up_regs.accumulators_per_block == up_regs.registers_per_block // 2 == 65536


def test_area_of_component_values_is_the_area():
    ventus = ventus_library().restrict({"sm": (1, 2, 4), "vreg": (512, 4096), "queue": (8, 128)})
    for lib in (ventus, get_library("illustrative")):
        for h in lib.chips(within_ceiling=False):
            assert lib.area_of(h.as_dict()) == pytest.approx(lib.area(h), rel=1e-12)


def test_bad_chip_fields_are_refused():
    from formloop.errors import StructureError
    from formloop.hw.library import Component, HardwareLibrary

    with pytest.raises(InvalidInput, match="chip field of component x"):
        Component("x", "u", (1, 2), False, chip_fields=(("smem_bytes", 1),))
    with pytest.raises(InvalidInput, match="factor of chip field"):
        Component("x", "u", (1, 2), False, chip_fields=(("smem_per_sm", 0),))
    a = Component("sm", "SMs", (1,), False, chip_fields=(("sm_count", 1),))
    b = Component("x", "u", (1, 2), False, chip_fields=(("sm_count", 1),))
    with pytest.raises(StructureError, match="more than one component"):
        HardwareLibrary("two", (a, b), 10.0, 0.0, {"sm": 1, "x": 1}, base_chip="illustrative")
    with pytest.raises(StructureError, match="names no base chip"):
        HardwareLibrary("nobase", (a,), 10.0, 0.0, {"sm": 1})
