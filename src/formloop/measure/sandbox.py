"""Untrusted code (problem files, candidates) runs in a child process.

`run_in_child(fn, *args)` runs the module-level function `fn` in a fresh child and returns a
`ChildOutcome` whose `status` names how it ended:

    completed   fn returned; `value` is its (picklable) result
    failed      fn raised a formloop error (bad input: a malformed problem or candidate file);
                `error` carries its type and message and `reraise()` raises it again in the parent
    crashed     a signal (segfault, abort), an exception that is not a formloop error (including
                KeyboardInterrupt and MemoryError raised by the untrusted code), or the memory limit
    timed-out   the wall-clock limit passed; the child and everything it started are killed
    exited      the untrusted code called sys.exit / os._exit (any code, 0 included)

Only `completed` carries a result; nothing else can be mistaken for one. The child makes itself a
process-group leader (so the parent can kill what it spawned), ignores SIGINT (Ctrl-C belongs to
the parent, which kills the child), and reports what it is doing through `phase(who, what)`, so an
abrupt end names the code that was running ('candidate: forward', 'problem: get_inputs').

Limits: wall clock always; memory as the child's resident set, polled by the parent, plus an
address-space rlimit when the child will not use CUDA (CUDA reserves far more virtual memory than it
uses, so the rlimit is unusable with a GPU). The child owns its CUDA context; the parent never
initializes one. Children fork from a forkserver that has already imported torch and formloop (and, with a
GPU, torch.compile: `preload`), so a run starts in well under a second after the first.

Not defended: untrusted code that deliberately forges the result message from inside the child (it
shares the child's memory with the checker); that needs the checker and the candidate in different
processes, which GPU-side poisoning and timing do not allow."""
from __future__ import annotations

import enum
import faulthandler
import importlib
import math
import multiprocessing
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from formloop.errors import FormloopError, InvalidInput, StructureError
from formloop.measure import child_setup

START_METHODS = ("forkserver", "spawn")
PRELOAD = ["torch", "formloop.measure.jobs"]
# With a GPU (and Triton not interpreting: the compiler imports triton, which a CPU child must import after it has
# set TRITON_INTERPRET), torch.compile's front and back ends too: a torch.compile baseline's child then starts
# compiling at once instead of after ~8 s of imports and construction. Only with torch's NVML device check: the
# compiler's imports ask torch.cuda.is_available(), which otherwise initializes the CUDA driver in the forkserver,
# and every forked child then fails its first CUDA call (benchmarks/compile_child_probe.py on the H200, 2026-12-02:
# 'Cannot re-initialize CUDA in forked subprocess' without the check; with it a warm torch.compile child ran
# 1.6 s instead of 9.5-10.2).
# Inductor reads some settings from the environment once, at import (its compile threads, the FX graph cache):
# with the preload that import is the forkserver's, so a caller sets them before its first child.
GPU_PRELOAD = ["torch._dynamo", "torch._inductor.compile_fx"]
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
_CHANNEL: Any = None
_CONTEXTS: dict[str, Any] = {}


class RunStatus(enum.Enum):
    COMPLETED = "completed"
    FAILED = "failed"
    CRASHED = "crashed"
    TIMED_OUT = "timed-out"
    EXITED = "exited"


@dataclass(frozen=True)
class Limits:
    """Wall-clock seconds and host memory bytes for one child (None: 3/4 of physical memory)."""

    wall_s: float = 600.0
    memory_bytes: int | None = None
    start_method: str = "forkserver"

    def __post_init__(self) -> None:
        if not (isinstance(self.wall_s, (int, float)) and math.isfinite(self.wall_s) and 0 < self.wall_s <= 86400):
            raise InvalidInput("timeout seconds", self.wall_s, "a number 0 < t <= 86400")
        if self.memory_bytes is not None and not (isinstance(self.memory_bytes, int) and self.memory_bytes >= 2**26):
            raise InvalidInput("memory limit bytes", self.memory_bytes, "an integer >= 64 MiB, or None")
        if self.start_method not in START_METHODS:
            raise InvalidInput("start method", self.start_method, START_METHODS)


@dataclass(frozen=True)
class ChildOutcome:
    status: RunStatus
    value: Any = None
    stage: str = ""                 # what the harness was doing
    step: str = ""                  # which untrusted code ran last ('candidate: forward')
    message: str = ""
    exitcode: int | None = None
    seconds: float = 0.0
    error: dict[str, Any] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)   # wall seconds per stage ('harness: timing')
    # the same wall split further by the untrusted code that ran inside a stage, keyed 'stage > step'; on a GPU also
    # 'stage > step > of which Triton compiles' (seconds of the kernels compiled there: Triton cache misses) and,
    # under 'count: …', how many Triton kernels compiled and Inductor's FX graph / AOTAutograd cache hits and misses
    step_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.COMPLETED

    @property
    def culprit(self) -> str:
        """'problem' or 'candidate' (whose code ran last), '' when unknown."""
        return self.step.split(":", 1)[0] if ":" in self.step else ""

    def reraise(self) -> None:
        """Raise a `failed` child's formloop error in this process (unchanged where it unpickles)."""
        if self.status is not RunStatus.FAILED:
            return
        try:
            module = importlib.import_module(self.error["module"])
            cls = getattr(module, self.error["class"])
            exc = cls.__new__(cls)  # not __init__: formloop errors take their fields as arguments
            exc.args = tuple(self.error["args"])
            exc.__dict__.update(pickle.loads(self.error["state"]))
        except Exception:  # noqa: BLE001 - an error type that does not round-trip: same message
            exc = StructureError(self.error.get("message", "the child failed"))
        raise exc

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "stage": self.stage, "step": self.step, "culprit": self.culprit,
                "message": self.message, "exitcode": self.exitcode, "seconds": self.seconds}


def _send(message: tuple[str, Any]) -> None:
    """A message to the parent from a sandboxed child; a broken channel is seen there as an abrupt end."""
    try:
        _CHANNEL.send(message)
    except Exception:  # noqa: BLE001
        pass


def phase(who: str, what: str = "") -> None:
    """Tell the parent which code runs now: phase('harness', 'timing'), phase('candidate', 'forward').
    A no-op outside a sandboxed child."""
    if _CHANNEL is not None:
        _send(("phase", (who, what)))


def _vm_bytes(pid: int | str = "self", key: str = "VmSize") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _child(conn: Any, fn: Callable, args: tuple, kwargs: dict, env: dict, memory: int | None) -> None:
    global _CHANNEL
    try:
        os.setpgrp()
    except OSError:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(2, 1)  # what untrusted code prints must not mix into the parent's (JSON) stdout
    sys.stdout = sys.stderr
    os.environ.clear()
    os.environ.update(env)
    child_setup.inductor_threads(env)
    child_setup.no_progress_monitor()
    _CHANNEL = conn
    faulthandler.enable()
    child_setup.count_compiles(_send)
    try:
        import torch
        cpu_only = not torch.cuda.is_available()
    except ImportError:
        cpu_only = True
    if memory and cpu_only and _vm_bytes():
        import resource
        limit = _vm_bytes() + memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # hard too: the child cannot raise it back
    try:
        msg: tuple[str, Any] = ("result", fn(*args, **kwargs))
        child_setup.send_cache_counts(_send)
    except FormloopError as exc:
        try:
            state = pickle.dumps(dict(exc.__dict__))
        except Exception:  # noqa: BLE001 - a field that does not pickle: the message still travels
            state = pickle.dumps({})
        msg = ("error", {"type": type(exc).__name__, "message": str(exc), "module": type(exc).__module__,
                         "class": type(exc).__qualname__, "args": [str(a) for a in exc.args], "state": state})
    except SystemExit as exc:
        msg = ("exit", {"code": exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1),
                        "message": f"sys.exit({exc.code!r})"})
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, MemoryError, any bug: all named
        tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:]
        msg = ("crash", {"type": type(exc).__name__, "message": f"{type(exc).__name__}: {str(exc)[:300]}",
                         "traceback": "".join(tail)[-2000:]})
    try:
        conn.send(msg)
    except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result
        conn.send(("crash", {"type": type(exc).__name__, "message": f"result could not be sent: {exc}"}))
    finally:
        conn.close()
        os._exit(0)  # no atexit handlers, no waiting for threads the untrusted code left running


def _context(method: str) -> Any:
    if method not in _CONTEXTS:
        ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(preload())
        _CONTEXTS[method] = ctx
    return _CONTEXTS[method]


def preload() -> list[str]:
    """The forkserver's imports: PRELOAD, plus GPU_PRELOAD where a GPU runs compiled Triton and torch checks
    devices through NVML (set here unless the environment already says otherwise; the forkserver inherits it)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return list(PRELOAD)
    os.environ.setdefault(NVML_CHECK, "1")
    import torch
    if os.environ[NVML_CHECK] != "1" or not torch.cuda.is_available():
        return list(PRELOAD)
    return PRELOAD + GPU_PRELOAD


def _kill(proc: Any) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own group: its descendants go too
    except (ProcessLookupError, PermissionError, OSError):
        pass
    if proc.is_alive():
        proc.kill()
    proc.join(5)


def _default_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4)
    except (ValueError, OSError):
        return 16 << 30


def run_in_child(fn: Callable, /, *args: Any, limits: Limits | None = None, **kwargs: Any) -> ChildOutcome:
    """Run `fn(*args, **kwargs)` in a child process under `limits`; never raises for what the child
    does (a parent-side KeyboardInterrupt kills the child and propagates)."""
    lim = limits or Limits()
    memory = lim.memory_bytes or _default_memory()
    ctx = _context(lim.start_method)
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(writer, fn, args, kwargs, dict(os.environ), lim.memory_bytes),
                       daemon=True, name="formloop-sandbox")
    proc.start()  # the first start also starts the forkserver (imports torch): not counted against the limit
    t0 = time.monotonic()
    writer.close()
    stage = step = ""
    stages: dict[str, float] = {}
    steps: dict[str, float] = {}
    since = step_since = t0
    final: tuple[str, Any] | None = None
    status: RunStatus | None = None
    message = ""
    try:
        while final is None:
            if reader.poll(0.05):
                try:
                    kind, payload = reader.recv()
                except (EOFError, OSError):
                    break
                except Exception as exc:  # noqa: BLE001 - a garbled message ends the run
                    final = ("crash", {"type": type(exc).__name__, "message": f"unreadable message: {exc}"})
                    break
                if kind == "phase":
                    who, what = payload
                    step_since = _close_stage(steps, _step_key(stage, step), step_since)
                    if who in ("problem", "candidate"):
                        step = f"{who}: {what}"[:200]
                    else:
                        since = _close_stage(stages, stage, since)
                        stage, step = f"{who}: {what}"[:200], ""
                    continue
                if kind in ("compiled", "count"):
                    _tally(steps, kind, payload, _step_key(stage, step) or "start")
                    continue
                final = (kind, payload)
            elif not proc.is_alive() and not reader.poll(0):
                break
            if time.monotonic() - t0 > lim.wall_s:
                status, message = RunStatus.TIMED_OUT, f"no result within {lim.wall_s:g} s; killed"
                break
            if _vm_bytes(proc.pid, "VmRSS") > memory:
                status = RunStatus.CRASHED
                message = f"resident memory above the limit of {memory / 2**30:.2f} GiB; killed"
                break
    except KeyboardInterrupt:
        _kill(proc)
        raise
    finally:
        reader.close()
    if status is not None or final is None:
        _kill(proc)
    else:
        proc.join(10)
        _kill(proc)  # whatever the untrusted code left running in its group
    seconds = time.monotonic() - t0
    _close_stage(stages, stage, since)
    _close_stage(steps, _step_key(stage, step), step_since)
    base = {"stage": stage, "step": step, "seconds": seconds, "exitcode": proc.exitcode, "stage_seconds": stages,
            "step_seconds": steps}
    if status is not None:
        return ChildOutcome(status, message=message, **base)
    if final is None:
        code = proc.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            return ChildOutcome(RunStatus.CRASHED, message=f"killed by signal {name}", **base)
        return ChildOutcome(RunStatus.EXITED, message=f"the process exited with code {code} before a result "
                                                      "(os._exit or a fatal error)", **base)
    kind, payload = final
    if kind == "result":
        return ChildOutcome(RunStatus.COMPLETED, value=payload, **base)
    if kind == "error":
        return ChildOutcome(RunStatus.FAILED, message=payload["message"], error=payload, **base)
    if kind == "exit":
        return ChildOutcome(RunStatus.EXITED, message=payload["message"], error=payload,
                            **{**base, "exitcode": payload["code"]})
    return ChildOutcome(RunStatus.CRASHED, message=payload.get("message", ""), error=payload,
                        **{**base, "exitcode": None})  # the child reported the crash and left cleanly


def _tally(steps: dict[str, float], kind: str, payload: Any, where: str) -> None:
    """A child's report beyond its stages (formloop.measure.child_setup) added to its step seconds: a Triton
    compile's seconds under the step it ran in (and one more kernel counted), or a named count."""
    try:
        pairs = ([(f"{where} > of which Triton compiles", float(payload)), ("count: Triton kernels compiled", 1.0)]
                 if kind == "compiled" else [(f"count: {str(payload[0])[:80]}", float(payload[1]))])
    except (TypeError, ValueError, IndexError):
        return   # a malformed report is dropped: it never ends the run
    for key, n in pairs:
        steps[key] = steps.get(key, 0.0) + n


def _step_key(stage: str, step: str) -> str:
    """Where step seconds go: 'stage > step' while untrusted code runs in a stage, else the stage itself."""
    return f"{stage or 'start'} > {step}" if step else stage


def _close_stage(stages: dict[str, float], stage: str, since: float) -> float:
    """Add the time since `since` to `stage` (the child's start up to its first stage: 'start'); returns now."""
    now = time.monotonic()
    key = stage or "start"
    stages[key] = stages.get(key, 0.0) + now - since
    return now


class UntrustedCodeFailed(StructureError):
    """Untrusted code (a problem file, a user template) crashed, timed out or exited in its child
    process; `verdict` names which. Never a result: the caller reports it (exit status 2)."""

    def __init__(self, what: str, outcome: ChildOutcome):
        self.verdict, self.outcome = outcome.status.value, outcome
        code = f", exit code {outcome.exitcode}" if outcome.exitcode is not None else ""
        where = f" ({outcome.step})" if outcome.step else ""
        super().__init__(f"{what}{where}: {outcome.status.value}: {outcome.message}{code}; not used",
                         fix="make the file finish quickly without exiting, signals or endless loops")


def run_untrusted(fn: Callable, /, *args: Any, what: str, wall_s: float = 60.0, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` in a child under a `wall_s` limit: its value when it completes; its formloop
    error raised again when it fails; `UntrustedCodeFailed` (crashed, timed-out, exited) otherwise.
    Inside a sandboxed child already (an MCP tool call) it runs in place: that child is the guard."""
    if _CHANNEL is not None:
        return fn(*args, **kwargs)
    outcome = run_in_child(fn, *args, limits=Limits(wall_s=wall_s), **kwargs)
    if outcome.ok:
        return outcome.value
    outcome.reraise()
    raise UntrustedCodeFailed(what, outcome)
