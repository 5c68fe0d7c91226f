"""formloop.evaluate: turn an instance into a Measurement (tiers model | gpu; room for emulated and
simulated), and calibrate a template's efficiency terms from measurements.

    evaluator = best_available()          # GpuEvaluator with a CUDA device, else ModelEvaluator
    m = evaluator.evaluate(template, assignment, workload, chip)   # -> Measurement
"""
from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from typing import Any, Protocol

from formloop.evaluate.measurement import Correctness, Measurement, Provenance, Runnable, Tier, failed
from formloop.evaluate.model import ModelEvaluator
from formloop.template import Template


class Evaluator(Protocol):
    tier: Tier

    def evaluate(self, template: Template, assignment: Mapping[str, Real], workload: Mapping[str, Real],
                 chip: Any = None) -> Measurement: ...


def gpu_available() -> bool:
    from formloop.evaluate.gpu import gpu_available as available

    return available()


def best_available(**gpu_options: Any) -> Evaluator:
    """The gpu evaluator when torch sees a CUDA device, else the model evaluator."""
    if gpu_available():
        from formloop.evaluate.gpu import GpuEvaluator

        return GpuEvaluator(**gpu_options)
    return ModelEvaluator()


__all__ = ["Correctness", "Evaluator", "Measurement", "ModelEvaluator", "Provenance", "Runnable", "Tier",
           "best_available", "failed", "gpu_available"]
