"""What an evaluator returns: a latency with its correctness evidence and its provenance.

A `Measurement` says which tier produced it (model, emulated, simulated, gpu), on which device,
with which toolchain, for which template (by content hash), assignment and workload. A failed
instance is a Measurement too: latency is infinite and `failure` names the class and the reason
(it never turns into a blank or a silent skip)."""
from __future__ import annotations

import enum
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from numbers import Real
from typing import Any, Protocol, runtime_checkable


class Tier(enum.Enum):
    MODEL = "model"
    EMULATED = "emulated"
    SIMULATED = "simulated"
    GPU = "gpu"


ELEMENT_FACTOR = 10.0


@dataclass(frozen=True)
class Correctness:
    """Evidence that the instance computed the function: relative Frobenius error against a
    higher-precision reference on fresh random inputs, the worst element against the reference's
    RMS, and whether every output element was written (the output was poisoned with NaN)."""

    rel_error: float
    max_error_rms: float
    tolerance: float
    all_written: bool
    reference: str
    checks: int = 1

    @property
    def passed(self) -> bool:
        # NaN compares false, so a NaN error never passes. The element bound (10x, against the
        # reference's RMS) catches a few wrong elements that the Frobenius norm would average away.
        return bool(self.all_written and self.rel_error <= self.tolerance
                    and self.max_error_rms <= ELEMENT_FACTOR * self.tolerance)


@dataclass(frozen=True)
class Provenance:
    """Where a number comes from."""

    tier: str
    device: str
    sm_count: int | None = None
    clocks_mhz: Mapping[str, float] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)
    timing: str = ""
    timestamp: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Measurement:
    """One evaluated instance. `latency_us` is the median over `reps` timed runs (gpu) or the
    modeled time (model); `spread_us` is (p20, p80) when the tier has a distribution."""

    template: str
    template_hash: str
    assignment: Mapping[str, Real]
    workload: Mapping[str, Real]
    chip: str
    latency_us: float
    provenance: Provenance
    correctness: Correctness | None = None
    spread_us: tuple[float, float] | None = None
    reps: int = 0
    terms: Mapping[str, float] = field(default_factory=dict)
    failure: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tier(self) -> str:
        return self.provenance.tier

    @property
    def ok(self) -> bool:
        """A usable number: finite, no failure, and correct where correctness was checked."""
        return (not self.failure and math.isfinite(self.latency_us)
                and (self.correctness is None or self.correctness.passed))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tier"] = self.tier
        d["ok"] = self.ok
        if self.correctness is not None:
            d["correctness"]["passed"] = self.correctness.passed
        return d


@runtime_checkable
class Runnable(Protocol):
    """An executable instance as the GPU evaluator drives it (a template's `program` returns one).

    `new_case` draws fresh random operands and a poisoned output; `launch` enqueues the work
    (no allocation, no host sync: it must be capturable in a CUDA graph); `reference` computes the
    expected output in higher precision; `tolerance` bounds ‖out − ref‖ / ‖ref‖."""

    name: str
    tolerance: float

    def new_case(self, device: Any, generator: Any) -> Any: ...

    def launch(self, case: Any) -> None: ...

    def output(self, case: Any) -> Any: ...

    def reference(self, case: Any) -> Any: ...

    def poison(self, case: Any) -> None: ...

    @property
    def case_bytes(self) -> int: ...


def failed(template: str, template_hash: str, assignment: Mapping[str, Real], workload: Mapping[str, Real],
           chip: str, provenance: Provenance, failure: str, **details: Any) -> Measurement:
    """An instance that could not be measured: infinite latency with its failure class and reason."""
    return Measurement(template, template_hash, dict(assignment), dict(workload), chip, math.inf, provenance,
                       failure=failure, details=details)
