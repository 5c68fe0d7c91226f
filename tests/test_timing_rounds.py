"""formloop.measure.rounds: candidate and reference timed alike. Each side reads both input buffers, the order
alternates, and a per-buffer speed difference (the H200's two stream states, RESULTS.md round 7) cancels out of
the ratio, where one round on separate buffers keeps it."""
from __future__ import annotations

import types

import pytest
import torch
from torch import nn

from formloop.measure.harness import _refill
from formloop.measure.rounds import combine, plan, run_rounds
from formloop.measure.session import Session
from formloop.measure.timer import TimedRun, Timing


def fake_run(seconds: float, note: str = "") -> TimedRun:
    return TimedRun(Timing(seconds, "gpu", "graph", 5, seconds, seconds, seconds, seconds, note=note), object(), 0)


def test_each_side_reads_each_buffer_and_the_order_alternates():
    p = plan(4)
    assert p[0] == (("candidate", 0), ("reference", 1)) and p[1] == (("reference", 0), ("candidate", 1))
    for side in ("candidate", "reference"):
        bufs = [b for pair in p for s, b in pair if s == side]
        assert bufs.count(0) == bufs.count(1) == 2
    assert [pair[0][0] for pair in p] == ["candidate", "reference"] * 2
    assert plan(1) == [(("candidate", 0), ("reference", 1))]


@pytest.mark.parametrize("slow_buffer", [0, 1])
def test_a_slow_buffer_cancels_out_of_the_ratio(slow_buffer):
    # two identical kernels; whichever reads the slow buffer runs 12 % longer
    def time_one(side, buf):
        return fake_run(1e-3 * (1.12 if buf == slow_buffer else 1.0))
    one = run_rounds(1, time_one)
    ratio_one = one["reference"][0].seconds / one["candidate"][0].seconds
    assert ratio_one == pytest.approx(1 / 1.12 if slow_buffer == 0 else 1.12)   # one round: biased
    two = run_rounds(2, time_one)
    assert two["reference"][0].seconds == pytest.approx(two["candidate"][0].seconds)   # swapped: no bias
    assert two["candidate"][2] == [0, 1] and two["reference"][2] == [1, 0]
    assert "2 rounds" in two["candidate"][0].note and "on A" in two["candidate"][0].note


def test_combine_keeps_the_spread_of_every_round():
    t = combine([fake_run(1.0), fake_run(3.0), fake_run(2.0)], [0, 1, 0])
    assert t.seconds == 2.0 and t.min_s == 1.0 and t.max_s == 3.0 and t.reps == 15
    single = fake_run(1.5, "x")
    assert combine([single], [0]) is single.timing


def test_only_the_candidates_last_output_is_kept():
    seen = []

    def time_one(side, buf):
        run = fake_run(1e-3)
        seen.append((side, run))
        return run
    run_rounds(2, time_one, before_round=lambda r: None)
    kept = [side for side, run in seen if run.last_output is not None]
    assert kept == ["candidate"] and seen[-1][0] == "candidate"


def test_refill_restores_the_drawn_values_in_the_same_memory():
    class Model(nn.Module):
        def forward(self, x):
            return x * 2
    prob = types.SimpleNamespace(name="double", Model=Model, get_inputs=lambda: [torch.randn(64)],
                                 get_init_inputs=lambda: [])
    s = Session(prob, lambda x: x * 2, seed=3)
    seeds = [s.set_seed(1000), s.set_seed(1001)]
    buffers = [[s.inputs(x) for x in seeds], [s.inputs(x) for x in seeds]]
    ptrs = [t[0].data_ptr() for sets in buffers for t in sets]
    for sets in buffers:
        for values in sets:
            values[0].zero_()          # a mutating side
    _refill(buffers, seeds, s)
    assert [t[0].data_ptr() for sets in buffers for t in sets] == ptrs
    assert all(torch.equal(values[0], s.inputs(seed)[0]) for sets in buffers for values, seed in zip(sets, seeds))
