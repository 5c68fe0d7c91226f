"""Candidate and reference timed alike: swapped input buffers, shared output memory, alternating order.

A multi-GB stream runs at two speeds on the H200 (about 4.2 and 3.8 TB/s) depending on the memory its
input and output get, whatever the kernel: PyTorch's relu and formloop's flat walk take the same state on
the same memory (benchmarks/stream_probe.py, RESULTS.md round 7). Timed once each on memory of their own,
a candidate and its reference can land in different states and their ratio moves by up to 12 %.

So the harness times them in rounds. Two input buffers A and B hold the same values; in round r the
candidate reads A and the reference B, then they swap (the buffers are refilled with the set's values
before each round: an in-place reference or a mutating candidate cannot leak into the other's timing); the
order alternates (candidate first, then reference first); under CUDA graphs both capture into one graph
pool, so each round's outputs can reuse the same blocks. Each side's time is the median over rounds of
its per-round medians; the note gives every round."""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

from formloop.measure.timer import TimedRun, Timing

# time(side, buffer) -> a TimedRun of `side` ('candidate' | 'reference') on input buffer 0 (A) or 1 (B)
TimeOne = Callable[[str, int], TimedRun]


def plan(rounds: int) -> list[tuple[tuple[str, int], tuple[str, int]]]:
    """Each round's two timings in order: ((side, buffer), (side, buffer))."""
    out = []
    for r in range(rounds):
        cand, ref = ("candidate", r % 2), ("reference", 1 - r % 2)
        out.append((cand, ref) if r % 2 == 0 else (ref, cand))
    return out


def combine(runs: list[TimedRun], buffers: list[int]) -> Timing:
    """One side's timing over its rounds: the median of the round medians; spread over all rounds."""
    ts = [r.timing for r in runs]
    if len(ts) == 1:
        return ts[0]
    per_round = ", ".join(f"{t.seconds * 1e3:.4g} ms on {'AB'[b]}" for t, b in zip(ts, buffers))
    note = f"median of {len(ts)} rounds (input buffers swapped with the other side's, output memory shared): " \
           f"{per_round}"
    return dataclasses.replace(
        ts[-1], seconds=statistics.median(t.seconds for t in ts), reps=sum(t.reps for t in ts),
        p20_s=min(t.p20_s for t in ts), p80_s=max(t.p80_s for t in ts), min_s=min(t.min_s for t in ts),
        max_s=max(t.max_s for t in ts), note="; ".join(x for x in (ts[-1].note, note) if x))


def run_rounds(rounds: int, time_one: TimeOne, before_round: Callable[[int], Any] | None = None
               ) -> dict[str, tuple[Timing, TimedRun, list[int]]]:
    """Every round of `plan(rounds)`: side -> (combined timing, its last TimedRun, the buffers it read). Only the
    candidate's last run keeps its output (the harness checks what the timed calls wrote); every other output is
    dropped before the next timing."""
    runs: dict[str, list[TimedRun]] = {"candidate": [], "reference": []}
    used: dict[str, list[int]] = {"candidate": [], "reference": []}
    for r, pair in enumerate(plan(rounds)):
        if before_round is not None:
            before_round(r)
        for side, buf in pair:
            for earlier in runs["reference"] + runs["candidate"][:rounds - 1]:
                earlier.last_output = None   # freed before the next capture: its blocks can serve the next one
            runs[side].append(time_one(side, buf))
            used[side].append(buf)
    return {side: (combine(runs[side], used[side]), runs[side][-1], used[side]) for side in runs}
