"""The kernel-level decisions of the Triton GEMM kernels (gemm-tiling-gpu, gemm-epilogue-gpu and
gemv-epilogue-gpu's one-row tiles) as one validated record; imports nothing heavy."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from numbers import Real

from formloop.errors import InvalidInput


@dataclass(frozen=True)
class TileConfig:
    """The kernel-level decisions: Tm×Tn output tile, Tk k-tile, S stages, W warps, KS splits of
    the k range, G tile rows per swizzle group, L load path (1 TMA descriptors, 0 pointers), SC
    schedule (0 data-parallel, 1 persistent, 2 stream-K: gemm_tiling_sched_kernel)."""

    Tm: int
    Tn: int
    Tk: int
    S: int = 3
    W: int = 4
    KS: int = 1
    G: int = 8
    L: int = 0
    SC: int = 0

    @classmethod
    def from_assignment(cls, assignment: Mapping[str, Real]) -> "TileConfig":
        known = {k: int(v) for k, v in assignment.items() if k in cls.__dataclass_fields__}
        missing = [k for k in ("Tm", "Tn", "Tk") if k not in known]
        if missing:
            raise InvalidInput("assignment", dict(assignment), f"values for {', '.join(missing)}")
        return cls(**known)

    def __post_init__(self) -> None:
        if self.simt:  # one-row tiles on the CUDA cores (gemv-epilogue-gpu): no tl.dot, so no 16-wide sides
            if self.L or self.SC:
                raise InvalidInput("L, SC with Tm = 1", (self.L, self.SC),
                                   "0, 0 (the CUDA-core path loads by pointers)")
            for name, lo in (("Tn", 2), ("Tk", 16)):
                v = getattr(self, name)
                if v < lo or v & (v - 1):
                    raise InvalidInput(name, v, f"a power of two >= {lo} (Tm = 1: the CUDA-core path)")
        for name in () if self.simt else ("Tm", "Tn", "Tk"):
            v = getattr(self, name)
            if v < 16 or v & (v - 1):
                raise InvalidInput(name, v, "a power of two >= 16 (tl.dot needs 16 on each side), or Tm = 1 "
                                            "(the CUDA-core path)")
        for name, lo in (("S", 1), ("W", 1), ("KS", 1), ("G", 1)):
            if getattr(self, name) < lo:
                raise InvalidInput(name, getattr(self, name), f"an integer >= {lo}")
        if self.L not in (0, 1):
            raise InvalidInput("L", self.L, (0, 1))
        if self.SC not in (0, 1, 2) or (self.SC and (self.KS != 1 or self.L != 1)):
            raise InvalidInput("SC", self.SC, "0, or 1/2 (persistent, stream-K) with KS=1 and L=1")
        if self.W & (self.W - 1):
            raise InvalidInput("W", self.W, "a power of two (num_warps)")

    @property
    def simt(self) -> bool:
        """One-row tiles (Tm = 1): the gemm-epilogue kernel's CUDA-core main loop, the GEMV."""
        return self.Tm == 1

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
