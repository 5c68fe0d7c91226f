"""The integrity battery: every probe, run against one attempt, into one `IntegrityReport`.

Probes live in `probes_calls` (how the candidate runs: launches, memory, streams, exceptions,
repeated calls) and `probes_inputs` (inputs changed the way a cheat does not expect). A probe that
raises is a failure of the probe, reported as the flag `probe:<name>` with severity 'probe-failed'
(never 'minor': an attempt whose check did not finish cannot be accepted); running out of memory
inside a probe is such a failure too (inconclusive, named in the evidence), not the end of the run.
Between probes the memory a probe left is freed, and a candidate that keeps more than 1 GiB of device
memory (a cache of 6 GB outputs) or ran out of memory is rebuilt, so each probe starts with room. SystemExit and
KeyboardInterrupt raised by the candidate are not caught here: run untrusted candidates through
`formloop.measure.jobs.run_integrity` (a child process) to turn them into a named verdict."""
from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch

from formloop.errors import InvalidInput
from formloop.measure.harness import evaluate
from formloop.measure.integrity import IntegrityReport, IntegrityVerdict, check_sol_ceiling, flag
from formloop.measure.probes_calls import (probe_call_count, probe_launch_failure, probe_memory, probe_side_stream,
                                           probe_static, probe_torch_only, probe_trivial)
from formloop.measure.probes_inputs import probe_cache, probe_mutation, probe_shapes, probe_skipped, probe_unseen
from formloop.measure.sandbox import phase
from formloop.measure.session import Session, device_bytes
from formloop.measure.timer import Timing
from formloop.verify.outcome import ObligationResult

PROBES: dict[str, Callable[[Session, Any], list]] = {
    "static": probe_static, "torch-only": probe_torch_only, "trivial": probe_trivial, "unseen": probe_unseen,
    "shapes": probe_shapes, "memory": probe_memory, "cache": probe_cache, "mutation": probe_mutation,
    "skipped": probe_skipped, "side-stream": probe_side_stream, "launch-failure": probe_launch_failure,
    "call-count": probe_call_count,
}
PROBE_NAMES = tuple(PROBES)


OUT_OF_MEMORY = (MemoryError, torch.OutOfMemoryError)
KEPT_BYTES = 2**30   # device memory a candidate may keep between probes before it is rebuilt


def out_of_memory(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or the CPU allocator's RuntimeError."""
    return isinstance(exc, OUT_OF_MEMORY) or "can't allocate memory" in str(exc) or "out of memory" in str(exc)


def _failed(name: str, exc: BaseException, s: Session) -> ObligationResult:
    """The flag of a probe that did not finish: probe-failed (never 'minor'), out of memory named."""
    evidence = {"probe": name, "error": type(exc).__name__, "message": str(exc)[:300]}
    if out_of_memory(exc):
        evidence.update(out_of_memory=True, device_bytes_in_use=device_bytes(s.device))
        return flag(f"probe:{name}", IntegrityVerdict.PROBE_FAILED,
                    f"the {name} probe ran out of memory ({type(exc).__name__}: {str(exc)[:200]}); inconclusive: the "
                    "attempt is not vouched for (a candidate that keeps what it computed, a cache of outputs, fills "
                    "memory this way); the battery went on with a fresh candidate", evidence=evidence)
    return flag(f"probe:{name}", IntegrityVerdict.PROBE_FAILED,
                f"the {name} probe failed ({type(exc).__name__}: {str(exc)[:300]}); the attempt is not vouched for",
                evidence=evidence)


def release_memory(s: Session, *, rebuild: bool = False) -> str:
    """Free what the last probe left (its tensors, the allocator's cached blocks); rebuild the candidate
    when it ran out of memory or keeps more than KEPT_BYTES of device memory, so the next probe fits.
    Returns a note when the candidate was rebuilt."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    kept = device_bytes(s.device) - s.baseline_bytes
    if not rebuild and kept <= KEPT_BYTES:
        return ""
    s.rebuild_candidate()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    why = "it ran out of memory" if rebuild else f"it kept {kept / 2**30:.2f} GiB of device memory"
    return f"candidate rebuilt after this probe ({why})"


def run_probe(name: str, s: Session, base: Any) -> list:
    """One probe's results, each stamped with its time and replay line. A probe that raises, out of
    memory included, is a flag of that probe; the memory it held is released before the next."""
    t0 = time.perf_counter()
    phase("integrity", f"probe {name}")
    oom = False
    try:
        found = PROBES[name](s, base)
    except Exception as exc:  # noqa: BLE001 - the probe did not finish: say so, never 'minor'
        oom = out_of_memory(exc)
        found = [_failed(name, exc, s)]
    dt = time.perf_counter() - t0
    note = release_memory(s, rebuild=oom)  # the exception and its frames are gone: their tensors are free
    extra = {"probe": name, **({"released": note} if note else {})}
    return [replace(c, seconds=dt, replay=s.replay("check_integrity") + f" with probes=({name!r},)",
                    details={**c.details, **extra}) for c in found]


def check_integrity(problem: Any, candidate: Any, *, seed: int | None = None, sets: int = 2,
                    probes: tuple[str, ...] | None = None, timing: Timing | None = None,
                    sol_floor_s: float | None = None, rtol: float | None = None, precision: str | None = None,
                    eval_mode: bool = False, tolerance: str = "formloop",
                    overrides: Mapping[str, Any] | None = None) -> IntegrityReport:
    """All integrity checks for one attempt. `timing` and `sol_floor_s` add the SOL-ceiling check
    (only a GPU timing is compared with the floor)."""
    names = PROBE_NAMES if probes is None else tuple(probes)
    unknown = [p for p in names if p not in PROBES]
    if unknown:
        raise InvalidInput("probe", unknown[0], sorted(PROBES))
    phase("integrity", "loading the problem and the candidate")
    s = Session(problem, candidate, seed=seed, rtol=rtol, precision=precision, eval_mode=eval_mode,
                rule=tolerance, overrides=overrides)
    base = evaluate(s.problem, s.candidate, sets=sets, timing=False, session=s)
    release_memory(s)  # what the correctness runs left behind (a cache of outputs) does not crowd probe 1
    checks = []
    for name in names:
        checks += run_probe(name, s, base)
    if timing is not None and sol_floor_s:
        checks.append(check_sol_ceiling(timing.seconds, sol_floor_s, source=timing.source))
    return IntegrityReport(s.name, s.candidate.name, base.correct, tuple(checks), s.seed)
