"""Chip specs: peaks, capacities and where each number comes from.

A `Chip` is a value. Peak rates are stated at the boost clock and scale linearly with the clock
(`at_clock`); memory bandwidth does not follow the SM clock. Measured ceilings, when a benchmark
has produced them, override datasheet values through `measured` (`with_measured`).

Precision keys of `peak_flops`: "fp32" is the SIMT (CUDA-core) rate; "tf32", "bf16", "fp16",
"fp8" are dense tensor-core rates (no 2:4 sparsity). A chip without a unit for a precision simply
lacks the key, and asking for it raises, so nothing is silently substituted.

Rule for `accumulators_per_block` (R_acc): half of the 32-bit registers one block may hold. The
other half is left for addresses, operand fragments and pipeline state; on a 64 Ki-register
block limit this gives the illustrative chip's 32768.

A chip drawn from a hardware library (`formloop.hw.library`) is a `Chip` like any datasheet chip:
`ChipConfig.chip` sets the fields its components govern and records the component values in
`components` (empty for a datasheet chip), so templates, SOL, the evaluator and co-design all read
one chip type.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from formloop.errors import InvalidInput, UnknownName

KiB = 1024
MiB = 1024 * KiB

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
DERIVED_TF32X3 = "tf32x3"   # not a unit of its own: the tf32 rate / 3 (Chip.peak)


@dataclass(frozen=True)
class Chip:
    name: str
    source: str
    sm_count: int
    boost_clock_mhz: float
    mem_bandwidth: float                   # bytes/s (DRAM/HBM)
    peak_flops: Mapping[str, float]        # precision -> dense FLOP/s at the current clock
    smem_per_block: int                    # bytes a block may allocate
    smem_per_sm: int = 0                   # bytes
    registers_per_sm: int = 0              # 32-bit registers
    l2_bytes: int = 0
    accumulators_per_block: int = 0        # R_acc: accumulator elements a block may hold
    barrier_cycles: int = 0
    clock_mhz: float | None = None         # current (locked) clock; None = boost
    measured: Mapping[str, float] = field(default_factory=dict)
    registers_per_block: int = 0           # 32-bit registers one block may hold
    l1_per_sm: int = 0                     # bytes of L1 beside shared memory (0: unified/unknown)
    warps_per_sm: int = 0                  # resident 32-thread warps per SM
    notes: str = ""                        # assumptions that are ours, not the datasheet's
    components: Mapping[str, float] = field(default_factory=dict)   # hardware-library values it was drawn from
    registers_per_thread: int = 255        # 32-bit registers one thread may use (255 on NVIDIA; maxnreg caps it)

    @property
    def clock_hz(self) -> float:
        return (self.clock_mhz or self.boost_clock_mhz) * 1e6

    def peak(self, precision: str) -> float:
        """FLOP/s for `precision`, a measured ceiling if one was recorded. "tf32x3" (three tf32 dots
        per product, formloop.dtypes) is a third of the tf32 rate unless it was measured itself."""
        if precision == DERIVED_TF32X3 and f"flops_{precision}" not in self.measured:
            return self.peak("tf32") / 3
        if f"flops_{precision}" in self.measured:
            return self.measured[f"flops_{precision}"]
        try:
            return self.peak_flops[precision]
        except KeyError:
            raise InvalidInput(f"precision for chip {self.name}", precision, sorted(self.peak_flops)) from None

    def has_precision(self, precision: str) -> bool:
        if precision == DERIVED_TF32X3:
            return self.has_precision("tf32")
        return precision in self.peak_flops or f"flops_{precision}" in self.measured

    @property
    def bandwidth(self) -> float:
        return self.measured.get("mem_bandwidth", self.mem_bandwidth)

    def at_clock(self, mhz: float) -> "Chip":
        """The same chip with its core clock set to `mhz`; compute peaks scale with the clock."""
        if not 0 < mhz <= self.boost_clock_mhz:
            raise InvalidInput("clock_mhz", mhz, f"0 < MHz <= {self.boost_clock_mhz:g} (boost clock of {self.name})")
        ratio = mhz / (self.clock_mhz or self.boost_clock_mhz)
        return replace(self, clock_mhz=mhz, peak_flops={k: v * ratio for k, v in self.peak_flops.items()})

    def with_measured(self, **ceilings: float) -> "Chip":
        """The same chip with measured ceilings (keys `mem_bandwidth`, `flops_<precision>`)."""
        allowed = {"mem_bandwidth", *(f"flops_{p}" for p in PRECISIONS)}
        for key, value in ceilings.items():
            if key not in allowed:
                raise InvalidInput("measured ceiling", key, sorted(allowed))
            if not value > 0:
                raise InvalidInput(f"measured {key}", value, "a positive number")
        return replace(self, measured={**self.measured, **ceilings})


_CHIPS: dict[str, Callable[[], Chip]] = {}


def register_chip(name: str):
    def deco(factory: Callable[[], Chip]) -> Callable[[], Chip]:
        _CHIPS[name] = factory
        return factory
    return deco


def get_chip(name: str) -> Chip:
    try:
        return _CHIPS[name.lower()]()
    except KeyError:
        raise UnknownName("chip", name, sorted(_CHIPS)) from None


def chip_names() -> list[str]:
    return sorted(_CHIPS)


def chip_for_device(device_name: str) -> str | None:
    """The chip spec a CUDA device name denotes ('NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' ->
    'h100'): a spec whose name appears in the device name as a whole word; None when none does."""
    text = str(device_name).lower()
    hits = [n for n in _CHIPS if re.search(rf"(?<![a-z0-9]){re.escape(n)}(?![a-z0-9])", text)]
    return max(hits, key=len) if hits else None


@register_chip("illustrative")
def illustrative() -> Chip:
    """The illustrative chip contract of the tiling study (seed 000, Appendix A)."""
    return Chip(
        name="illustrative",
        source="seed 000, Listing 1 / Appendix A: 128 SMs, 1.8 TB/s, 80 TFLOP/s FP32, 40-cycle barrier at 1.8 GHz",
        sm_count=128,
        boost_clock_mhz=1800.0,
        mem_bandwidth=1.8e12,
        peak_flops={"fp32": 80e12},
        smem_per_block=96 * KiB,
        smem_per_sm=96 * KiB,
        accumulators_per_block=32768,
        barrier_cycles=40,
    )


# Hopper SXM (GH100, 132 SMs). Dense datasheet peaks; the datasheet prints the sparse figure for
# tensor precisions (989 TF32, 1979 BF16/FP16, 3958 FP8 TFLOP/s), we store half of it.
_HOPPER_PEAKS = {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12}
_HOPPER_NOTES = (
    "peaks scale from the 1980 MHz max boost, the convention of seed 002 App. A.2 (494.7 TF32 at "
    "1500 MHz -> 374.77); barrier_cycles=40 is our assumption (illustrative chip's value), not a "
    "datasheet figure; R_acc = registers_per_block / 2"
)


def _hopper(name: str, bandwidth: float, memory: str) -> Chip:
    return Chip(
        name=name,
        source=(f"NVIDIA {name.upper()} SXM datasheet ({memory}, {bandwidth / 1e12:g} TB/s; dense = sparse/2) and "
                "NVIDIA H100 Tensor Core GPU Architecture whitepaper (132 SMs, 50 MB L2, 228 KB smem/SM, "
                "227 KB opt-in per block, 64 Ki regs/SM); CUDA C++ Programming Guide, compute capability 9.0"),
        sm_count=132,
        boost_clock_mhz=1980.0,
        mem_bandwidth=bandwidth,
        peak_flops=dict(_HOPPER_PEAKS),
        smem_per_block=227 * KiB,
        smem_per_sm=228 * KiB,
        registers_per_sm=65536,
        registers_per_block=65536,
        l2_bytes=50 * MiB,
        accumulators_per_block=65536 // 2,
        barrier_cycles=40,
        warps_per_sm=64,
        notes=_HOPPER_NOTES,
    )


@register_chip("h100")
def h100() -> Chip:
    """H100 SXM5 80 GB (HBM3)."""
    return _hopper("h100", 3.35e12, "80 GB HBM3")


@register_chip("h200")
def h200() -> Chip:
    """H200 SXM 141 GB (HBM3e): H100's compute with faster, larger memory."""
    return _hopper("h200", 4.8e12, "141 GB HBM3e")


@register_chip("gb10")
def gb10() -> Chip:
    """GB10 Grace Blackwell superchip (DGX Spark), Blackwell GPU, compute capability 12.1."""
    lanes = 6144
    boost_mhz = 31e12 / (2 * lanes) / 1e6          # clock implied by the stated 31 TFLOP/s FP32
    fp8 = 1e15 / 2 / 2                              # 1 PFLOP FP4 with sparsity -> dense FP4 -> FP8
    return Chip(
        name="gb10",
        source=("NVIDIA DGX Spark product page / Hot Chips 2025 GB10 talk: 6144 CUDA cores (48 SMs), "
                "~31 TFLOP/s FP32, 1 PFLOP FP4 with sparsity, 128 GB LPDDR5x at 273 GB/s; CUDA C++ "
                "Programming Guide, compute capability 12.x (100 KB smem/SM, 99 KB per block, 64 Ki regs)"),
        sm_count=48,
        boost_clock_mhz=boost_mhz,
        mem_bandwidth=273e9,
        peak_flops={"fp32": 31e12, "tf32": fp8 / 4, "bf16": fp8 / 2, "fp16": fp8 / 2, "fp8": fp8},
        smem_per_block=99 * KiB,
        smem_per_sm=100 * KiB,
        registers_per_sm=65536,
        registers_per_block=65536,
        l2_bytes=24 * MiB,
        accumulators_per_block=65536 // 2,
        barrier_cycles=40,
        warps_per_sm=48,
        notes=("boost clock derived from 31 TFLOP/s / (2 x 6144 lanes); tensor peaks derived from the "
               "FP4-sparse headline by halving per step (sparse->dense, FP4->FP8->FP16->TF32); "
               "24 MB L2 as reported for the G-die, not a datasheet figure; barrier_cycles=40 assumed; "
               "record measured ceilings with with_measured()"),
    )


@register_chip("ventus")
def ventus() -> Chip:
    """Ventus-like reference chip of the co-design study (seed 000, Section 5.5 / Table 11)."""
    clock_mhz = 1000.0
    lanes_per_sm = 32                               # one warp-wide FP32 FMA per SM per cycle
    return Chip(
        name="ventus",
        source=("seed 000, Ventus co-design reference: 2 SMs, 8 resident 32-thread warps/SM, 128 KiB "
                "shared memory + 64 KiB L1 per SM, 128 KiB shared L2, 64 B/cycle external memory; "
                "THU-DSP-LAB/ventus-gpgpu: 256 vector registers (v0-v255) per thread"),
        sm_count=2,
        boost_clock_mhz=clock_mhz,
        mem_bandwidth=64 * clock_mhz * 1e6,
        peak_flops={"fp32": 2 * lanes_per_sm * 2 * clock_mhz * 1e6},
        smem_per_block=128 * KiB,
        smem_per_sm=128 * KiB,
        registers_per_sm=8 * 32 * 256,
        registers_per_block=32 * 256,             # the study's blocks are one warp
        l2_bytes=128 * KiB,
        accumulators_per_block=32 * 256 // 2,
        barrier_cycles=40,
        l1_per_sm=64 * KiB,
        warps_per_sm=8,
        notes=("the study counts cycles: the 1 GHz clock is nominal and only converts cycles to seconds; "
               "32 FP32 lanes per SM and no tensor unit are our assumptions (only 'fp32' is present); "
               "memory bandwidth is 64 B/cycle at the nominal clock; barrier_cycles=40 assumed"),
    )


@register_chip("a100")
def a100() -> Chip:
    """A100 SXM4 80 GB (Ampere, compute capability 8.0): the sm80 target of formloop.dsl."""
    return Chip(
        name="a100",
        source=("NVIDIA A100 Tensor Core GPU datasheet (SXM4 80 GB: 2039 GB/s; dense 19.5 FP32, 156 TF32, "
                "312 BF16/FP16 TFLOP/s) and Ampere architecture whitepaper (108 SMs, 1410 MHz boost, 40 MB L2, "
                "164 KB smem/SM, 64 Ki regs/SM); CUDA C++ Programming Guide, compute capability 8.0 "
                "(163 KB opt-in shared memory per block)"),
        sm_count=108,
        boost_clock_mhz=1410.0,
        mem_bandwidth=2.039e12,
        peak_flops={"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
        smem_per_block=163 * KiB,
        smem_per_sm=164 * KiB,
        registers_per_sm=65536,
        registers_per_block=65536,
        l2_bytes=40 * MiB,
        accumulators_per_block=65536 // 2,
        barrier_cycles=40,
        warps_per_sm=64,
        notes="barrier_cycles=40 assumed (illustrative chip's value); no FP8 tensor unit; "
              "R_acc = registers_per_block / 2",
    )


@register_chip("b200")
def b200() -> Chip:
    """B200 (Blackwell, compute capability 10.0): the sm100 target of formloop.dsl."""
    return Chip(
        name="b200",
        source=("NVIDIA HGX B200 datasheet, per GPU of eight (8 TB/s HBM3e; sparse 36 PF FP16/BF16, 72 PF FP8, "
                "18 PF TF32 and 600 TF FP32 per board -> dense per GPU = sparse / 16); CUDA C++ Programming Guide, "
                "compute capability 10.0 (228 KB smem/SM, 227 KB per block, 64 Ki regs/SM)"),
        sm_count=148,
        boost_clock_mhz=1965.0,
        mem_bandwidth=8.0e12,
        peak_flops={"fp32": 75e12, "tf32": 1.125e15, "bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15},
        smem_per_block=227 * KiB,
        smem_per_sm=228 * KiB,
        registers_per_sm=65536,
        registers_per_block=65536,
        l2_bytes=126 * MiB,
        accumulators_per_block=65536 // 2,
        barrier_cycles=40,
        warps_per_sm=64,
        notes=("148 SMs, 1965 MHz boost and 126 MB L2 as reported for B200, not datasheet figures; barrier_cycles=40 "
               "assumed; formloop uses this chip for the capacity walls of sm100 specs (smem, registers) only"),
    )
