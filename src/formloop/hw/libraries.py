"""The hardware libraries formloop ships: components with menus, area models and the chip fields
each component sets (see `formloop.hw.library`), looked up by name with `get_library`."""
from __future__ import annotations

from collections.abc import Callable

from formloop.errors import UnknownName
from formloop.hw.library import Component, HardwareLibrary

_LIBRARIES: dict[str, Callable[[], HardwareLibrary]] = {}


def register_library(name: str):
    def deco(factory: Callable[[], HardwareLibrary]) -> Callable[[], HardwareLibrary]:
        _LIBRARIES[name] = factory
        return factory
    return deco


def get_library(name: str) -> HardwareLibrary:
    try:
        return _LIBRARIES[name.lower()]()
    except KeyError:
        raise UnknownName("hardware library", name, sorted(_LIBRARIES)) from None


def library_names() -> list[str]:
    return sorted(_LIBRARIES)


@register_library("ventus")
def ventus_library() -> HardwareLibrary:
    """A Ventus-like GPGPU library (seed 000 §5.5): 32-thread warps, per-SM resources, one L2.

    Its configurations are `ventus` chips (1 GHz nominal clock: 32 FP32 lanes per SM give 64 GFLOP/s
    per SM, B/cycle equal GB/s). Vector register slots are 32 lanes x 32 bit, so `vreg` slots set
    32 x slots registers per SM; the library's reference (1024 slots, ours) is half of the registered
    ventus chip's 256 registers per thread for 8 warps. Scalar registers, queue entries and tensor
    MACs have no `Chip` field: they stay in `Chip.components`, where the Ventus cycle model reads them."""
    comps = (
        Component("sm", "SMs", (1, 2, 4), False, logic_mm2=0.12,
                  doc="streaming multiprocessors (32-lane SIMT core, LSU, front end)",
                  chip_fields=(("sm_count", 1), ("peak_flops.fp32", 64e9))),
        Component("warps", "warps/SM", (4, 8, 16), True, logic_mm2=0.003,
                  doc="resident 32-thread warps per SM (PC, SIMT stack, scoreboard)",
                  chip_fields=(("warps_per_sm", 1),)),
        Component("smem_kib", "KiB/SM", (16, 32, 64, 128, 256), True, storage_kib=1, storage="sram",
                  doc="shared memory per SM", chip_fields=(("smem_per_sm", 1024), ("smem_per_block", 1024))),
        Component("l1_kib", "KiB/SM", (16, 32, 64, 128), True, storage_kib=1, storage="cache",
                  doc="L1 data cache per SM", chip_fields=(("l1_per_sm", 1024),)),
        Component("l2_kib", "KiB", (64, 128, 256, 512), False, storage_kib=1, storage="cache",
                  doc="shared L2 cache", chip_fields=(("l2_bytes", 1024),)),
        Component("vreg", "slots/SM", (256, 512, 1024, 2048, 4096), True, storage_kib=128 / 1024, storage="rf",
                  doc="vector register slots per SM (one slot: 32 lanes x 32 bit = 128 B)",
                  chip_fields=(("registers_per_sm", 32),)),
        Component("sreg", "slots/SM", (64, 128, 256, 512, 1024, 2048), True, storage_kib=4 / 1024, storage="flop",
                  doc="scalar register slots per SM (one slot: 32 bit)"),
        Component("tensor_macs", "MAC/cycle/SM", (0, 64, 256), True, logic_mm2=0.0006,
                  doc="tensor unit: 0 none, 64 = 4x4x4 shape, 256 = 8x8x4 shape (bf16 in, fp32 accumulate)"),
        Component("queue", "requests/SM", (8, 16, 32, 64, 128), True, logic_mm2=0.0004, storage_kib=128 / 1024,
                  storage="sram", doc="outstanding external-memory requests per SM (MSHR-like entries)"),
        Component("mem_bw", "B/cycle", (32, 64, 128), False, logic_mm2=0.002,
                  doc="external-memory service rate (controller and interface share)",
                  chip_fields=(("mem_bandwidth", 1e9),)),
    )
    reference = {"sm": 2, "warps": 8, "smem_kib": 128, "l1_kib": 64, "l2_kib": 128, "vreg": 1024,
                 "sreg": 256, "tensor_macs": 0, "queue": 64, "mem_bw": 64}
    return HardwareLibrary(
        name="ventus", components=comps, ceiling_mm2=1.11, uncore_mm2=0.05, reference_values=reference,
        source="seed 000 §5.5 reference: 2 SMs, 8 resident 32-thread warps/SM, 128 KiB shared memory and "
               "64 KiB L1 per SM, 128 KiB L2, 64 B/cycle external memory, 1.11 mm2 ceiling; register, queue "
               "and tensor values of the reference are ours",
        base_chip="ventus",
    )


# Area of the illustrative chip's fixed parts (our assumptions at 7 nm, not a synthesis run): SM
# logic without its shared memory and register file (datapath for 174 FP32 FMA lanes, schedulers,
# load/store and L1 logic), the memory interface per GB/s, and the uncore (L2, crossbar, I/O).
ILLUSTRATIVE_SM_LOGIC_MM2 = 2.0
ILLUSTRATIVE_MEM_MM2_PER_GBS = 0.02
ILLUSTRATIVE_UNCORE_MM2 = 100.0


@register_library("illustrative")
def illustrative_library() -> HardwareLibrary:
    """The illustrative chip of the tiling study (seed 000, Appendix A) as a library whose walls are
    the tiling template's: shared memory per SM (C1's Ms, one block per SM may use all of it) and
    32-bit registers per SM (C2's R_acc = half of them, the `Chip` rule). Shared memory is SRAM,
    registers are register file (4 KiB per Ki registers, rf density). The reference is the
    illustrative chip: 96 KiB, 64 Ki registers (R_acc 32768), 128 SMs, 1.8 TB/s, 80 TFLOP/s FP32."""
    comps = (
        Component("sm", "SMs", (128,), False, logic_mm2=ILLUSTRATIVE_SM_LOGIC_MM2,
                  doc="streaming multiprocessors (625 GFLOP/s FP32 each)",
                  chip_fields=(("sm_count", 1), ("peak_flops.fp32", 625e9))),
        Component("smem_kib", "KiB/SM", (16, 24, 32, 48, 64, 96, 128, 192, 256, 384), True, storage_kib=1,
                  storage="sram", doc="shared memory per SM; one block per SM may allocate all of it (Ms)",
                  chip_fields=(("smem_per_sm", 1024), ("smem_per_block", 1024))),
        Component("regs_k", "Ki regs/SM", (4, 8, 16, 32, 64, 128), True, storage_kib=4, storage="rf",
                  doc="32-bit registers per SM, in Ki; one block may hold all, half are accumulators (R_acc)",
                  chip_fields=(("registers_per_sm", 1024), ("registers_per_block", 1024),
                               ("accumulators_per_block", 512))),
        Component("mem_gbs", "GB/s", (1800,), False, logic_mm2=ILLUSTRATIVE_MEM_MM2_PER_GBS,
                  doc="DRAM bandwidth (memory controllers and PHYs)", chip_fields=(("mem_bandwidth", 1e9),)),
    )
    reference = {"sm": 128, "smem_kib": 96, "regs_k": 64, "mem_gbs": 1800}
    return HardwareLibrary(
        name="illustrative", components=comps, ceiling_mm2=440.0, uncore_mm2=ILLUSTRATIVE_UNCORE_MM2,
        reference_values=reference, base_chip="illustrative",
        source="seed 000 Appendix A chip (128 SMs, 96 KiB shared memory per block, R_acc 32768, 1.8 TB/s, "
               "80 TFLOP/s FP32); area coefficients are ours (see formloop.hw.libraries)",
    )
