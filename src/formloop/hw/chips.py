"""Chip specs: peaks, capacities and where each number comes from.

A `Chip` is a value. Peak rates are stated at the boost clock and scale linearly with the clock
(`at_clock`); measured ceilings, when a benchmark has produced them, override datasheet values
through `measured`."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from formloop.errors import InvalidInput, UnknownName

KiB = 1024


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

    @property
    def clock_hz(self) -> float:
        return (self.clock_mhz or self.boost_clock_mhz) * 1e6

    def peak(self, precision: str) -> float:
        """FLOP/s for `precision`, a measured ceiling if one was recorded."""
        if f"flops_{precision}" in self.measured:
            return self.measured[f"flops_{precision}"]
        try:
            return self.peak_flops[precision]
        except KeyError:
            raise InvalidInput(f"precision for chip {self.name}", precision, sorted(self.peak_flops)) from None

    @property
    def bandwidth(self) -> float:
        return self.measured.get("mem_bandwidth", self.mem_bandwidth)

    def at_clock(self, mhz: float) -> "Chip":
        """The same chip with its core clock set to `mhz`; compute peaks scale with the clock."""
        if not 0 < mhz <= self.boost_clock_mhz:
            raise InvalidInput("clock_mhz", mhz, f"0 < MHz <= {self.boost_clock_mhz:g} (boost clock of {self.name})")
        ratio = mhz / (self.clock_mhz or self.boost_clock_mhz)
        return replace(self, clock_mhz=mhz, peak_flops={k: v * ratio for k, v in self.peak_flops.items()})


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
