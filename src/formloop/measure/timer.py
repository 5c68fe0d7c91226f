"""The one timer: median seconds per call, with the device's clocks and power beside the number.

`launch(i)` enqueues one call on operand set `i` and returns its output. Modes:

    graph  the calls are captured in a CUDA graph that cycles over the operand sets (launch overhead
           out of the number, the same for every competitor); each replay is timed with CUDA events
    eager  one call at a time, bracketed by CUDA events and synchronized (per-call latency, launch
           overhead included), cycling over the operand sets
    stream back-to-back calls between two CUDA events, no sync between them (the throughput of an eager
           loop: the host's launch work hides behind the device's while the device is the slower; the
           calls run on the current stream, so a green context's stream keeps its SMs, which a graph
           captured elsewhere would not)
    auto   graph, falling back to eager (with the reason in `note`) when the calls cannot be captured
           (a host sync, a CPU tensor, a stream the graph does not own)

Enough operand sets are drawn to span `l2_multiple` times the L2 cache, so a repeated call reads its
inputs from DRAM, not from the cache the previous call warmed. Without a GPU the timer uses host wall
time (perf_counter) and labels the result source 'cpu'; a CPU time is never compared with a GPU
bound. Every GPU timing records the SM clock, memory clock, power and temperature before and after
the timed run (and NVML's mean power during it), so a throttled run can be told from a slow kernel."""
from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from formloop.errors import InvalidInput
from formloop.measure.device import PowerSampler, read_device_state

MODES = ("auto", "graph", "eager", "stream")


@dataclass(frozen=True)
class TimingPolicy:
    """How long to time: a graph replay lasts about `graph_ms`; `budget_ms` of timed replays or
    calls per measurement, between `min_reps` and `max_reps` replays (`max_calls` eager calls);
    operand sets spanning `l2_multiple` times the L2, at most `max_sets`; a candidate and its reference
    are timed in `rounds` rounds on a GPU (formloop.measure.rounds; one on a CPU)."""

    graph_ms: float = 2.0
    budget_ms: float = 40.0
    min_reps: int = 5
    max_reps: int = 30
    max_calls: int = 200
    max_launches: int = 2000
    max_sets: int = 64
    l2_multiple: float = 3.0
    rounds: int = 2


@dataclass(frozen=True)
class Timing:
    """Median seconds per call and how it was obtained (`source` gpu|cpu, `mode` graph|eager|wall)."""

    seconds: float
    source: str
    mode: str
    reps: int
    p20_s: float
    p80_s: float
    min_s: float
    max_s: float
    launches: int = 1
    operand_sets: int = 1
    note: str = ""
    device: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        if self.mode == "graph":
            how = (f"CUDA graph of {self.launches} launches over {self.operand_sets} operand sets, "
                   f"{self.reps} replays, event-timed median")
        elif self.mode == "eager":
            how = f"eager per-call CUDA events over {self.operand_sets} operand sets, {self.reps} calls, median"
        elif self.mode == "stream":
            how = (f"back-to-back eager calls, {self.launches} a run between CUDA events over {self.operand_sets} "
                   f"operand sets, {self.reps} runs, median per call")
        else:
            how = f"host wall time per call over {self.operand_sets} operand sets, {self.reps} calls, median"
        return how + (f"; {self.note}" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "source": self.source, "mode": self.mode, "reps": self.reps,
                "p20_s": self.p20_s, "p80_s": self.p80_s, "min_s": self.min_s, "max_s": self.max_s,
                "launches": self.launches, "operand_sets": self.operand_sets, "note": self.note,
                "device": dict(self.device), "method": self.describe()}


@dataclass
class TimedRun:
    """A timing, the output of the last timed call and the operand set it ran on. In graph mode the
    output is what the replayed graph wrote (see `time_launches(poison=...)`)."""

    timing: Timing
    last_output: Any
    last_set: int


def operand_sets_for(bytes_per_set: int, l2_bytes: int, policy: TimingPolicy | None = None) -> int:
    """Operand sets whose bytes together exceed `l2_multiple` x the L2 (1 when one set already does)."""
    p = policy or TimingPolicy()
    return max(1, min(p.max_sets, math.ceil(p.l2_multiple * l2_bytes / max(1, int(bytes_per_set)))))


def _summary(per_call: list[float], source: str, mode: str, **kw: Any) -> Timing:
    xs = sorted(per_call)
    q = lambda f: xs[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
    return Timing(statistics.median(xs), source, mode, len(xs), q(0.2), q(0.8), xs[0], xs[-1], **kw)


def _device_state(before: Mapping[str, Any], after: Mapping[str, Any], power: PowerSampler | None) -> dict:
    out: dict[str, Any] = {"before": dict(before), "after": dict(after)}
    if power is not None and power.mean_w is not None:
        out["mean_power_w"] = power.mean_w
        out["power_samples"] = len(power.samples)
    return out


def _time_cpu(launch: Callable[[int], Any], n_sets: int, p: TimingPolicy) -> TimedRun:
    out = None
    t0 = time.perf_counter()
    for i in range(n_sets):  # warm-up: imports, compilation, caches
        out = launch(i)
    estimate = max((time.perf_counter() - t0) / n_sets, 1e-7)
    reps = int(min(p.max_calls, max(p.min_reps, p.budget_ms / 1e3 // estimate)))
    times = []
    for r in range(reps):
        t = time.perf_counter()
        out = launch(r % n_sets)
        times.append(time.perf_counter() - t)
    note = "Triton kernels interpreted" if os.environ.get("TRITON_INTERPRET") == "1" else ""
    return TimedRun(_summary(times, "cpu", "wall", operand_sets=n_sets, note=note), out, (reps - 1) % n_sets)


def _one_pass_ms(launch: Callable[[int], Any], n_sets: int, start: Any, end: Any) -> float:
    """Milliseconds per launch of one pass over the operand sets, timed by two CUDA events."""
    start.record()
    for i in range(n_sets):
        launch(i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n_sets


def _time_eager(launch: Callable[[int], Any], n_sets: int, p: TimingPolicy, note: str = "") -> TimedRun:
    import torch

    for i in range(n_sets):
        launch(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    estimate = max(_one_pass_ms(launch, n_sets, start, end) / 1e3, 1e-7)
    reps = int(min(p.max_calls, max(p.min_reps, p.budget_ms / 1e3 // estimate)))
    before = read_device_state(torch.cuda.current_device())
    times, out = [], None
    with PowerSampler(torch.cuda.current_device()) as power:
        for r in range(reps):
            start.record()
            out = launch(r % n_sets)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    state = _device_state(before, read_device_state(torch.cuda.current_device()), power)
    return TimedRun(_summary(times, "gpu", "eager", operand_sets=n_sets, note=note, device=state),
                    out, (reps - 1) % n_sets)


def _time_stream(launch: Callable[[int], Any], n_sets: int, p: TimingPolicy) -> TimedRun:
    """Runs of back-to-back calls (no sync inside a run) between two events: seconds per call, median of
    the runs. A run has at least 4 passes over the operand sets (64 calls at least) and lasts about
    `graph_ms`; `min_reps`..`max_reps` runs within `budget_ms`."""
    import torch

    for i in range(n_sets):
        launch(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    estimate_ms = max(_one_pass_ms(launch, n_sets, start, end), 1e-4)
    calls = max(4 * n_sets, 64, min(p.max_launches, math.ceil(p.graph_ms / estimate_ms)))
    reps = int(min(p.max_reps, max(p.min_reps, p.budget_ms // (calls * estimate_ms))))
    before = read_device_state(torch.cuda.current_device())
    runs, out = [], None
    with PowerSampler(torch.cuda.current_device()) as power:
        for _ in range(reps):
            start.record()
            for k in range(calls):
                out = launch(k % n_sets)
            end.record()
            end.synchronize()
            runs.append(start.elapsed_time(end) / 1e3 / calls)
    state = _device_state(before, read_device_state(torch.cuda.current_device()), power)
    return TimedRun(_summary(runs, "gpu", "stream", launches=calls, operand_sets=n_sets, device=state),
                    out, (calls - 1) % n_sets)


def _time_graph(launch: Callable[[int], Any], n_sets: int, p: TimingPolicy,
                poison: Callable[[Any], Any] | None, pool: Any = None) -> TimedRun:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for i in range(n_sets):
            launch(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    estimate_ms = max(_one_pass_ms(launch, n_sets, start, end), 1e-4)
    launches = max(n_sets, min(p.max_launches, math.ceil(p.graph_ms / estimate_ms)))
    launches = n_sets * math.ceil(launches / n_sets)
    graph, out = torch.cuda.CUDAGraph(), None
    try:
        with torch.cuda.graph(graph, pool=pool):
            for k in range(launches):
                out = launch(k % n_sets)
    except BaseException:
        _end_capture_mode()
        raise
    graph.replay()
    torch.cuda.synchronize()
    reps = int(min(p.max_reps, max(p.min_reps, p.budget_ms // max(estimate_ms * launches, 1e-3))))
    before = read_device_state(torch.cuda.current_device())
    per_launch = []
    with PowerSampler(torch.cuda.current_device()) as power:
        for _ in range(reps):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            per_launch.append(start.elapsed_time(end) / 1e3 / launches)
    state = _device_state(before, read_device_state(torch.cuda.current_device()), power)
    if poison is not None:  # what the timed graph itself writes, not what capture-time calls left behind
        poison(out)
        graph.replay()
        torch.cuda.synchronize()
    del graph
    timing = _summary(per_launch, "gpu", "graph", launches=launches, operand_sets=n_sets, device=state)
    return TimedRun(timing, out, (launches - 1) % n_sets)


def _end_capture_mode() -> None:
    """A capture that raised never ran its end: CUDA's random generators stay in capture mode, and the next
    random draw outside a graph (a problem's get_inputs() on the device) fails with 'Offset increment outside
    graph capture'. An empty capture that completes ends that mode."""
    import torch

    try:
        torch.cuda.synchronize()
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
    except Exception:  # noqa: BLE001 - nothing more to undo; the caller reports the first failure
        pass


def time_launches(launch: Callable[[int], Any], n_sets: int = 1, *, device: str = "cpu", mode: str = "auto",
                  policy: TimingPolicy | None = None, poison: Callable[[Any], Any] | None = None,
                  pool: Any = None) -> TimedRun:
    """Median time per call of `launch(i)` cycling over operand sets 0..n_sets-1.

    `device` 'cpu' times host wall time; a CUDA device uses `mode` (graph | eager | auto). `poison`,
    in graph mode, is applied to the last captured output before one more replay, so the returned
    output shows what the timed graph computes (a call that skips its work while being captured
    leaves the poison in place). `pool` (torch.cuda.graph_pool_handle()): the graph's memory pool, shared
    with other timings so that their outputs can take the same blocks (formloop.measure.rounds)."""
    if mode not in MODES:
        raise InvalidInput("timing mode", mode, MODES)
    if not isinstance(n_sets, int) or n_sets < 1:
        raise InvalidInput("operand sets", n_sets, "an integer >= 1")
    p = policy or TimingPolicy()
    if not str(device).startswith("cuda"):
        return _time_cpu(launch, n_sets, p)
    if mode == "eager":
        return _time_eager(launch, n_sets, p)
    if mode == "stream":
        return _time_stream(launch, n_sets, p)
    if mode == "graph":
        return _time_graph(launch, n_sets, p, poison, pool)
    try:
        return _time_graph(launch, n_sets, p, poison, pool)
    except Exception as exc:  # noqa: BLE001 - not capturable: time it eagerly and say why
        import torch

        torch.cuda.synchronize()
        why = f"graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}); " \
              "timed eagerly"
        return _time_eager(launch, n_sets, p, note=why)


def time_calls(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], *, device: str = "cpu",
               mode: str = "auto", policy: TimingPolicy | None = None,
               poison: Callable[[Any], Any] | None = None, pool: Any = None) -> TimedRun:
    """`time_launches` for a callable over prepared argument lists (one per operand set)."""
    if not input_sets:
        raise InvalidInput("input sets", 0, "at least one argument list")
    return time_launches(lambda i: fn(*input_sets[i]), len(input_sets), device=device, mode=mode, policy=policy,
                         poison=poison, pool=pool)
