"""Integrity of a measured attempt: is a reported speedup real?

Every check returns an `ObligationResult`: a flag is a COUNTEREXAMPLE with its evidence (`witness`)
and the steps that reproduce it (`trace`, `replay`); a check that found nothing is UNRESOLVED with
reason 'passed' (a test that found no counterexample proves nothing), and a check that could not
run says why ('not applicable: ...'). `details['severity']` tells what a flag costs the attempt:

    clean         no flag
    minor         a generality or hygiene flaw (rejects an in-scope shape, swallowed errors, streams)
    probe-failed  a probe could not finish (it raised): the attempt cannot be vouched for
    torch-only    no kernel of its own: every kernel the call launched is PyTorch's
    gaming        the speedup is not real (cached or hard-coded results, skipped work, mutated
                  inputs, uninitialized reads, work outside the timed region, faster than SOL)
    crashed | timed-out | exited
                  the run itself did not finish (a signal, a hang, sys.exit/os._exit in untrusted
                  code); set by the sandbox (formloop.measure.sandbox), never accepted

This module holds the verdict algebra and the SOL-ceiling detector; the static source scan lives in
`formloop.measure.static`, the runtime kernel recorder in `formloop.measure.launches` and the dynamic
probes in `formloop.measure.probes`.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from formloop.errors import InvalidInput
from formloop.verify.outcome import ObligationResult, Verdict


class IntegrityVerdict(enum.Enum):
    CLEAN = "clean"
    MINOR = "minor"
    PROBE_FAILED = "probe-failed"
    TORCH_ONLY = "torch-only"
    GAMING = "gaming"
    CRASHED = "crashed"
    TIMED_OUT = "timed-out"
    EXITED = "exited"


# The verdict of an attempt is its worst flag; a run that did not finish outranks every flag.
_RANK = {IntegrityVerdict.CLEAN: 0, IntegrityVerdict.MINOR: 1, IntegrityVerdict.PROBE_FAILED: 2,
         IntegrityVerdict.TORCH_ONLY: 3, IntegrityVerdict.GAMING: 4, IntegrityVerdict.CRASHED: 5,
         IntegrityVerdict.TIMED_OUT: 5, IntegrityVerdict.EXITED: 5}
ACCEPTED = frozenset({IntegrityVerdict.CLEAN, IntegrityVerdict.MINOR})
RUN_FAILURES = frozenset({IntegrityVerdict.CRASHED, IntegrityVerdict.TIMED_OUT, IntegrityVerdict.EXITED})
VERDICT_NAMES = tuple(v.value for v in IntegrityVerdict)

# The seed's SOL-ceiling rule: a runtime more than 10% below the bound is not physical.
SOL_CEILING_MARGIN = 0.10


def parse_verdict(text: str) -> IntegrityVerdict:
    try:
        return IntegrityVerdict(text)
    except ValueError:
        raise InvalidInput("integrity verdict", text, VERDICT_NAMES) from None


def flag(detector: str, severity: IntegrityVerdict, message: str, *, evidence: Mapping[str, Any] | None = None,
         trace: Iterable[Any] = (), replay: str = "", seconds: float = 0.0) -> ObligationResult:
    """A detector fired: `message` says what the candidate did, `evidence` the numbers behind it."""
    return ObligationResult(obligation=detector, verdict=Verdict.COUNTEREXAMPLE, seconds=seconds,
                            solver="formloop.integrity", witness=dict(evidence or {}), trace=tuple(trace),
                            replay=replay, reason=message,
                            details={"detector": detector, "severity": severity.value})


def passed(detector: str, note: str = "", *, seconds: float = 0.0,
           details: Mapping[str, Any] | None = None) -> ObligationResult:
    """A detector ran and found nothing (evidence of absence, not proof)."""
    return ObligationResult(obligation=detector, verdict=Verdict.UNRESOLVED, seconds=seconds,
                            solver="formloop.integrity", reason=f"passed{': ' + note if note else ''}",
                            details={"detector": detector, "severity": IntegrityVerdict.CLEAN.value, **(details or {})})


def not_applicable(detector: str, why: str) -> ObligationResult:
    return ObligationResult(obligation=detector, verdict=Verdict.UNRESOLVED, seconds=0.0,
                            solver="formloop.integrity", reason=f"not applicable: {why}",
                            details={"detector": detector, "severity": IntegrityVerdict.CLEAN.value})


def severity_of(check: ObligationResult) -> IntegrityVerdict:
    if check.verdict is not Verdict.COUNTEREXAMPLE:
        return IntegrityVerdict.CLEAN
    return IntegrityVerdict(check.details.get("severity", IntegrityVerdict.GAMING.value))


def verdict_of(checks: Iterable[ObligationResult]) -> IntegrityVerdict:
    """The worst severity among the flags; no flag is clean."""
    worst = IntegrityVerdict.CLEAN
    for c in checks:
        s = severity_of(c)
        if _RANK[s] > _RANK[worst]:
            worst = s
    return worst


@dataclass(frozen=True)
class IntegrityReport:
    """A verdict per attempt with its evidence. `correct` is the harness's plain correctness on fresh
    random inputs; an attempt is accepted when it is correct and its verdict is clean or minor."""

    problem: str
    candidate: str
    correct: bool
    checks: tuple[ObligationResult, ...]
    seed: int | None = None

    @property
    def verdict(self) -> IntegrityVerdict:
        return verdict_of(self.checks)

    @property
    def accepted(self) -> bool:
        return self.correct and self.verdict in ACCEPTED

    def flags(self, detector: str | None = None) -> list[ObligationResult]:
        return [c for c in self.checks if c.verdict is Verdict.COUNTEREXAMPLE
                and (detector is None or c.obligation == detector)]

    def as_dict(self) -> dict[str, Any]:
        return {"status": "completed", "problem": self.problem, "candidate": self.candidate, "correct": self.correct,
                "verdict": self.verdict.value, "accepted": self.accepted, "seed": self.seed,
                "checks": [c.as_dict() for c in self.checks]}


# --- SOL ceiling -------------------------------------------------------------------------------

def check_sol_ceiling(measured_s: float, floor_s: float, *, source: str, margin: float = SOL_CEILING_MARGIN,
                      floor_note: str = "") -> ObligationResult:
    """Flag a runtime more than `margin` below the speed-of-light floor.

    `floor_s` should be the most generous floor (e.g. FP16 tensor cores for FP32 data) so that
    honest reduced-precision kernels are not flagged. Only GPU timings are comparable with a GPU
    floor; a CPU or model figure is reported as not applicable, never compared."""
    if source != "gpu":
        return not_applicable("sol-ceiling", f"timing source is {source!r}; the SOL floor is a GPU bound")
    if not floor_s > 0 or not measured_s > 0:
        raise InvalidInput("sol-ceiling times", (measured_s, floor_s), "positive seconds")
    limit = (1.0 - margin) * floor_s
    evidence = {"measured_s": measured_s, "sol_floor_s": floor_s, "limit_s": limit, "margin": margin,
                "fraction_of_floor": measured_s / floor_s, "floor": floor_note}
    if measured_s < limit:
        return flag("sol-ceiling", IntegrityVerdict.GAMING,
                    f"measured {measured_s * 1e3:.4g} ms is {100 * (1 - measured_s / floor_s):.1f}% below the SOL "
                    f"floor {floor_s * 1e3:.4g} ms ({floor_note or 'most generous precision'}): the work cannot all "
                    "have been done",
                    evidence=evidence)
    return passed("sol-ceiling", f"{measured_s / floor_s:.2f}x the floor", details=evidence)


def generous_floor_s(report: Any) -> tuple[float, str]:
    """The smallest time floor a SOLReport offers over its precision assumptions, and which one.

    Reads `time_floor_s` and, where present, the per-precision floors (a mapping attribute named
    `floors_s`, `time_floors_s` or `precision_floors_s`, or `variants` items with `time_floor_s`)."""
    best = (float(report.time_floor_s), str(getattr(report, "precision", "") or "report floor"))
    for attr in ("floors_s", "time_floors_s", "precision_floors_s"):
        table = getattr(report, attr, None)
        if isinstance(table, Mapping):
            for name, value in table.items():
                if value and float(value) < best[0]:
                    best = (float(value), str(name))
    for v in getattr(report, "variants", ()) or ():
        t = v.get("time_floor_s") if isinstance(v, Mapping) else getattr(v, "time_floor_s", None)
        name = v.get("precision") if isinstance(v, Mapping) else getattr(v, "precision", "variant")
        if t and float(t) < best[0]:
            best = (float(t), str(name))
    return best
