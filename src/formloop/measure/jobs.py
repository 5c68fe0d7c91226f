"""The harness and the integrity battery as sandboxed jobs: what the CLI (and any caller that runs
code it did not write) uses.

`run_harness(problem, candidate, ...)` and `run_integrity(problem, candidate, ...)` load and run the
problem file and the candidate file in a child process (formloop.measure.sandbox) and return the
result as a JSON-ready dict. A run that does not finish returns a dict with `status` and `verdict`
crashed | timed-out | exited, `correct: false`, `accepted: false`, and the stage, the untrusted code
that ran last (`step`, `culprit`: problem or candidate) and the exit code or signal. A formloop
error raised in the child (a malformed problem or candidate file) is raised again in the caller.
The `*_job` functions are what runs inside the child."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from formloop.errors import InvalidInput
from formloop.measure.harness import evaluate
from formloop.measure.probes import check_integrity
from formloop.measure.sandbox import ChildOutcome, Limits, RunStatus, phase, run_in_child


def harness_job(problem: str, candidate: str, options: dict[str, Any]) -> dict[str, Any]:
    return evaluate(problem, candidate, **options).as_dict()


def integrity_job(problem: str, candidate: str, options: dict[str, Any]) -> dict[str, Any]:
    opts = dict(options)
    chip, clock_mhz = opts.pop("chip", None), opts.pop("clock_mhz", None)
    timing = floor = None
    if chip:
        phase("integrity", "timing and the SOL floor")
        keep = {k: opts[k] for k in ("seed", "rtol", "precision", "eval_mode", "tolerance", "overrides") if k in opts}
        h = evaluate(problem, candidate, sets=1, chip=chip, clock_mhz=clock_mhz, **keep)  # floor at the shapes run
        timing, floor = h.cand_time, h.sol_generous_s
    report = check_integrity(problem, candidate, timing=timing, sol_floor_s=floor, **opts)
    return report.as_dict()


def _paths(problem: Any, candidate: Any) -> tuple[str, str]:
    out = []
    for kind, p in (("problem", problem), ("candidate", candidate)):
        if not isinstance(p, (str, Path)):
            raise InvalidInput(f"{kind}", type(p).__name__, "a path to a .py file (sandboxed runs load files)")
        path = Path(p)
        if not path.is_file() or path.suffix != ".py":
            raise InvalidInput(f"{kind} path", str(p), "an existing .py file")
        out.append(str(path.resolve()))
    return out[0], out[1]


def failed_run(outcome: ChildOutcome, problem: str, candidate: str) -> dict[str, Any]:
    """The JSON of a run that did not finish: a named verdict, never correct, never accepted."""
    where = outcome.step or "untrusted code"
    during = f", during {outcome.stage}" if outcome.stage else ""
    return {**outcome.as_dict(), "verdict": outcome.status.value, "correct": False, "accepted": False,
            "problem": Path(problem).stem, "candidate": Path(candidate).stem,
            "summary": f"{where}{during}: {outcome.message}"}


def _run(job: Any, problem: Any, candidate: Any, options: dict[str, Any], limits: Limits | None,
         sandbox: bool) -> dict[str, Any]:
    p, c = _paths(problem, candidate)
    if not sandbox:
        return job(p, c, options)
    outcome = run_in_child(job, p, c, options, limits=limits)
    if outcome.status is RunStatus.COMPLETED:   # with the child's wall seconds per stage (and step) it reported
        return {**outcome.value, "stage_seconds": outcome.stage_seconds, "step_seconds": outcome.step_seconds} \
            if isinstance(outcome.value, dict) else outcome.value
    outcome.reraise()  # a formloop error (bad input) is the caller's to report
    return failed_run(outcome, p, c)


def run_harness(problem: Any, candidate: Any, *, limits: Limits | None = None, sandbox: bool = True,
                **options: Any) -> dict[str, Any]:
    """`formloop.measure.harness.evaluate` on two files, in a child process; options as evaluate's."""
    return _run(harness_job, problem, candidate, options, limits, sandbox)


def run_integrity(problem: Any, candidate: Any, *, limits: Limits | None = None, sandbox: bool = True,
                  **options: Any) -> dict[str, Any]:
    """`check_integrity` on two files, in a child process; `chip`/`clock_mhz` add the SOL ceiling."""
    return _run(integrity_job, problem, candidate, options, limits, sandbox)
