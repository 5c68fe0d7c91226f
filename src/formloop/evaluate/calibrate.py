"""Calibration: fit a template's efficiency terms to measured latencies.

The terms are chip-side parameters the template names in `descriptor["calibrated"]` (achieved
bandwidth and tensor rate, per-step, per-block and per-launch costs, ...). The fit minimizes the
squared log error between the template's cost and the measured latency (every point counts by
its relative error), by Levenberg–Marquardt over the logarithms of the terms, inside bounds. The
result says how good the fit is per point and how well the model ranks the menu (Spearman), and
is stored with the chip it was measured on."""
from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np

from formloop.errors import InvalidInput
from formloop.expr import evaluate
from formloop.template import Template


@dataclass(frozen=True)
class Point:
    """One measured instance: decision values, workload parameters, measured latency (µs)."""

    assignment: Mapping[str, Real]
    workload: Mapping[str, Real]
    latency_us: float


@dataclass(frozen=True)
class Calibration:
    template: str
    template_hash: str
    chip: str
    values: Mapping[str, float]
    priors: Mapping[str, float]
    points: int
    rms_log_error_before: float
    rms_log_error_after: float
    device: Mapping[str, Any] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    @property
    def key(self) -> str:
        """A short id for the fitted values (goes into the template's options)."""
        import hashlib

        text = json.dumps({k: round(float(v), 12) for k, v in sorted(self.values.items())})
        return f"{self.chip}:{hashlib.sha256(text.encode()).hexdigest()[:10]}"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2, default=float) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        return cls(**json.loads(Path(path).read_text()))


def _groups(points: Sequence[Point]) -> dict[tuple, list[int]]:
    out: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        out.setdefault(tuple(sorted(p.workload.items())), []).append(i)
    return out


def predict(template: Template, chip: Any, points: Sequence[Point],
            values: Mapping[str, float] | None = None) -> np.ndarray:
    """The template's cost (µs) at every point, with `values` overriding the chip-side terms."""
    pred = np.empty(len(points))
    for key, idx in _groups(points).items():
        env: dict[str, Any] = dict(template.bind(dict(key), chip))
        env.update(values or {})
        for d in template.decisions:  # a point stored before a decision existed ran its first menu value
            first = d.decision.menu[0]  # (gemm-tiling-gpu's SC: 0, data-parallel, the only schedule then)
            env[d.name] = np.array([points[i].assignment.get(d.name, first) for i in idx], dtype=np.int64)
        pred[idx] = np.broadcast_to(np.asarray(evaluate(template.cost, env), dtype=np.float64), (len(idx),))
    return pred


def spearman(a: Iterable[float], b: Iterable[float]) -> float:
    """Rank correlation with average ranks for ties (NaN if either side is constant)."""
    ra, rb = _ranks(np.asarray(list(a), float)), _ranks(np.asarray(list(b), float))
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):  # average the ranks of tied values
        tied = x == v
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def default_bounds(priors: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """Efficiencies (eta_*) within [0.02, 1.2]; every other term within 1/100..100x its prior."""
    return {k: ((0.02, 1.2) if k.startswith("eta") else (v / 100, v * 100)) for k, v in priors.items()}


def fit(template: Template, chip: Any, points: Sequence[Point], *, names: Sequence[str] | None = None,
        bounds: Mapping[str, tuple[float, float]] | None = None, iterations: int = 60,
        chip_label: str | None = None, device: Mapping[str, Any] | None = None,
        near_best: float | None = None, far_weight: float = 0.25, starts: int = 8) -> Calibration:
    """Fit the named terms (default: the template's `calibrated` list) to `points`.

    With `near_best` (e.g. 1.5), points slower than near_best × their workload's fastest point count
    `far_weight` instead of 1: the model is then most accurate where the solver makes its choice,
    while the slow tail still orders the menu."""
    names = tuple(names if names is not None else template.descriptor.get("calibrated", ()))
    if not names:
        raise InvalidInput("calibrated terms", names, "the names of chip-side parameters of the template",
                           fix="list them in the template's descriptor['calibrated']")
    good = [p for p in points if math.isfinite(p.latency_us) and p.latency_us > 0]
    if len(good) < len(names) + 1:
        raise InvalidInput("calibration points", len(good), f"at least {len(names) + 1} measured points")
    base = template.bind(dict(good[0].workload), chip)
    priors = {n: float(base[n]) for n in names}
    box = {**default_bounds(priors), **template.descriptor.get("bounds", {}), **(bounds or {})}
    box = {k: (max(lo_, 1e-12), hi_) for k, (lo_, hi_) in box.items()}  # log space: strictly positive
    lo = np.log([box[n][0] for n in names])
    hi = np.log([box[n][1] for n in names])
    measured = np.log([p.latency_us for p in good])
    weight = np.ones(len(good))
    if near_best is not None:
        for idx in _groups(good).values():
            fastest = min(good[i].latency_us for i in idx)
            for i in idx:
                weight[i] = 1.0 if good[i].latency_us <= near_best * fastest else far_weight
    weight = np.sqrt(weight / weight.mean())

    def residual(x: np.ndarray) -> np.ndarray:
        pred = predict(template, chip, good, dict(zip(names, np.exp(x))))
        return (np.log(np.maximum(pred, 1e-12)) - measured) * weight

    x0 = np.clip(np.log([priors[n] for n in names]), lo, hi)
    before = float(np.sqrt(np.mean(residual(x0) ** 2)))
    best_x, best_cost = x0, before
    for start in _starts(x0, lo, hi, starts):
        x, cost = _levenberg_marquardt(residual, start, lo, hi, iterations)
        if cost < best_cost:
            best_x, best_cost = x, cost
    values = {n: float(v) for n, v in zip(names, np.exp(best_x))}
    return Calibration(template=template.name, template_hash=template.content_hash,
                       chip=chip_label or getattr(chip, "name", "none"), values=values, priors=priors,
                       points=len(good), rms_log_error_before=before, rms_log_error_after=best_cost,
                       device=dict(device or {}))


def _starts(x0: np.ndarray, lo: np.ndarray, hi: np.ndarray, count: int = 12) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [x0] + [np.clip(x0 + rng.normal(0.0, 1.2, x0.shape), lo, hi) for _ in range(count - 1)]


def _levenberg_marquardt(residual, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, iterations: int):
    r = residual(x)
    cost = float(np.sqrt(np.mean(r ** 2)))
    lam = 1e-2
    for _ in range(iterations):
        h = 1e-3
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            step = np.zeros_like(x)
            step[j] = h if x[j] + h <= hi[j] else -h
            jac[:, j] = (residual(x + step) - r) / step[j]
        jtj, jtr = jac.T @ jac, jac.T @ r
        improved = False
        for _ in range(8):
            delta = np.linalg.solve(jtj + lam * np.diag(np.diag(jtj) + 1e-9), -jtr)
            trial = np.clip(x + delta, lo, hi)
            r_trial = residual(trial)
            c_trial = float(np.sqrt(np.mean(r_trial ** 2)))
            if c_trial < cost - 1e-9:
                x, r, cost, lam, improved = trial, r_trial, c_trial, max(lam / 3, 1e-7), True
                break
            lam *= 4
        if not improved:
            break
    return x, cost


def report(template: Template, chip: Any, points: Sequence[Point], calibration: Calibration | None) -> dict[str, Any]:
    """Per-point prediction error and per-workload rank correlation, before and after calibration."""
    before = predict(template, chip, points)
    after = predict(template, chip, points, calibration.values) if calibration else before
    measured = np.array([p.latency_us for p in points])
    ok = np.isfinite(measured)
    per_workload = {}
    for key, idx in _groups(points).items():
        idx = [i for i in idx if ok[i]]
        per_workload[json.dumps(dict(key))] = {
            "points": len(idx),
            "spearman_before": spearman(before[idx], measured[idx]),
            "spearman_after": spearman(after[idx], measured[idx]),
        }
    return {"per_point": [{"assignment": dict(p.assignment), "workload": dict(p.workload), "measured_us": float(m),
                           "model_before_us": float(b), "model_after_us": float(a),
                           "error_after": float(a / m - 1) if ok[i] else None}
                          for i, (p, m, b, a) in enumerate(zip(points, measured, before, after))],
            "per_workload": per_workload}
