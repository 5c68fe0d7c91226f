"""Verification outcomes as data: three verdicts, never two.

An obligation is `proved`, refuted with a `counterexample` (a witness, a replayable trace and the
replay's account of what went wrong), or `unresolved` (a timeout, an unsupported query, or a
failed proof without a semantic witness). Unresolved is never stored or reported as proved."""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import z3


class Verdict(enum.Enum):
    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class ObligationResult:
    """One checked obligation. `query` is the normalized query text (what a cache keys on)."""

    obligation: str
    verdict: Verdict
    seconds: float
    solver: str = ""
    query: str = ""
    witness: Mapping[str, Any] | None = None
    trace: tuple[Any, ...] = ()
    replay: str = ""
    reason: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def proved(self) -> bool:
        return self.verdict is Verdict.PROVED

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        d["trace"] = list(self.trace)
        return d


def z3_solver_name() -> str:
    """The solver and its version, as every result and proof key records it."""
    return f"z3 {z3.get_version_string()}"


def toolchain() -> str:
    """The verifier's toolchain for cache keys and provenance (callers outside verify/ use this
    instead of importing z3)."""
    return z3_solver_name()


def verdict_of_validity(result: z3.CheckSatResult) -> Verdict:
    """Verdict for a validity query posed as 'is the negation satisfiable?'. Z3's `unknown` (a
    timeout, an incomplete theory) is unresolved: it is never read as a proof."""
    if result == z3.unsat:
        return Verdict.PROVED
    if result == z3.sat:
        return Verdict.COUNTEREXAMPLE
    return Verdict.UNRESOLVED
