"""The integrity battery: every probe, run against one attempt, into one `IntegrityReport`.

Probes live in `probes_calls` (how the candidate runs: launches, memory, streams, exceptions,
repeated calls) and `probes_inputs` (inputs changed the way a cheat does not expect). A probe that
raises is a failure of the probe, reported as the flag `probe:<name>` with severity 'probe-failed'
(never 'minor': an attempt whose check did not finish cannot be accepted). SystemExit and
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
from formloop.measure.session import Session
from formloop.measure.timer import Timing

PROBES: dict[str, Callable[[Session, Any], list]] = {
    "static": probe_static, "torch-only": probe_torch_only, "trivial": probe_trivial, "unseen": probe_unseen,
    "shapes": probe_shapes, "memory": probe_memory, "cache": probe_cache, "mutation": probe_mutation,
    "skipped": probe_skipped, "side-stream": probe_side_stream, "launch-failure": probe_launch_failure,
    "call-count": probe_call_count,
}
PROBE_NAMES = tuple(PROBES)


def run_probe(name: str, s: Session, base: Any) -> list:
    """One probe's results, each stamped with its time and replay line; a raising probe is a flag."""
    t0 = time.perf_counter()
    phase("integrity", f"probe {name}")
    try:
        found = PROBES[name](s, base)
    except (MemoryError, torch.OutOfMemoryError):
        raise  # out of memory ends the run (the sandbox names it), it does not fail one probe
    except Exception as exc:  # noqa: BLE001 - the probe did not finish: say so, never 'minor'
        found = [flag(f"probe:{name}", IntegrityVerdict.PROBE_FAILED,
                      f"the {name} probe failed ({type(exc).__name__}: {str(exc)[:300]}); the attempt is not "
                      "vouched for",
                      evidence={"probe": name, "error": type(exc).__name__, "message": str(exc)[:300]})]
    dt = time.perf_counter() - t0
    if torch.cuda.is_available():  # what one probe cached must not crowd the next (inputs may be 6 GB)
        gc.collect()
        torch.cuda.empty_cache()
    return [replace(c, seconds=dt, replay=s.replay("check_integrity") + f" with probes=({name!r},)",
                    details={**c.details, "probe": name}) for c in found]


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
    checks = []
    for name in names:
        checks += run_probe(name, s, base)
    if timing is not None and sol_floor_s:
        checks.append(check_sol_ceiling(timing.seconds, sol_floor_s, source=timing.source))
    return IntegrityReport(s.name, s.candidate.name, base.correct, tuple(checks), s.seed)
