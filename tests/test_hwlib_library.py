"""The hardware library: menus, chip steps as operations, the area model against hand sums."""
from __future__ import annotations

import pytest

from formloop.errors import InvalidInput, UnknownName
from formloop.hw.library import DENSITY, SRAM_MM2_PER_KIB, get_library, ventus_library


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
