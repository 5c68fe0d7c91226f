"""Shared by the calibration tests: a stand-in for the gpu tier whose times are a family's own cost formula under
known terms (not its priors), labelled gpu, so a refit has a truth to move toward."""
from __future__ import annotations

from collections.abc import Mapping

from formloop.evaluate.calibrate import Point, predict
from formloop.evaluate.measurement import Measurement, Provenance
from formloop.library import get_template

VERSIONS = {"triton": "3.6.0", "torch": "2.11.0", "cuda": "12.8", "capability": "9.0"}


class SyntheticGpu:
    """`evaluate` as the gpu evaluator answers: `family`'s cost (dtype bf16, priors) under `truth`, with a spread of
    `spread` (low, high factors)."""

    def __init__(self, family: str, truth: Mapping[str, float], spread: tuple[float, float] = (0.98, 1.03),
                 **options):
        self.prior = get_template(family, **options)
        self.truth, self.spread, self.calls = dict(truth), spread, 0

    def evaluate(self, t, assignment, workload, chip):
        self.calls += 1
        us = float(predict(self.prior, chip, [Point(dict(assignment), dict(workload), 0.0)], self.truth)[0])
        prov = Provenance(tier="gpu", device="synthetic H200", sm_count=132, versions=dict(VERSIONS),
                          timing="synthetic: the cost formula under known terms")
        return Measurement(t.name, t.content_hash, dict(assignment), dict(workload), "h200", us, prov,
                           spread_us=(self.spread[0] * us, self.spread[1] * us), reps=5)
