"""Calibrations that learn: measured points and fitted cost terms per (template, dtype, chip, toolchain).

A calibration used to be a JSON file a benchmark wrote and nobody committed. Here every gpu
measurement of a calibrated family (its descriptor lists `calibrated` terms) is stored as a
calibration point, and `learn` refits the family's terms on every point of the same
(template, dtype, chip, toolchain), starting from the latest stored fit (or the priors). With few
points only the first terms of `LEARN_ORDER` move (one fewer than there are points, so a fit is
never underdetermined); the rest carry over. A fit is stored only when it does not raise the rms
log error on the points it was fitted to. `latest` is what `solve`, `measure` and the loop read by
default; its `label` is 'calibrated <date>', and where there is none the label is 'prior'.

The toolchain key is the versions that change the kernels' speed: Triton, torch, CUDA and the device
capability; a calibration is read back only under the same toolchain unless asked otherwise."""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from formloop.errors import InvalidInput
from formloop.evaluate.calibrate import Point, fit

PRIOR_LABEL = "prior"
TOOLCHAIN_KEYS = ("triton", "torch", "cuda", "capability")
# The terms a few points can pin down first: the tensor rate and per-block cost dominate large and
# skinny GEMMs, the copy bandwidth and launch cost the memory-bound ones.
LEARN_ORDER = ("eta_mma", "t_tile", "eta_bw", "t_launch", "lat", "t_iter", "bw_sm", "t_epi", "t_fix", "lat_m",
               "eta_sync", "alpha")


def toolchain_of(versions: Mapping[str, Any]) -> str:
    """'triton 3.6.0; torch 2.11.0; cuda 12.8; capability 9.0' from a measurement's versions."""
    return "; ".join(f"{k} {versions[k]}" for k in TOOLCHAIN_KEYS if versions.get(k) not in (None, ""))


@dataclass(frozen=True)
class StoredCalibration:
    id: int
    template: str
    dtype: str
    chip: str
    toolchain: str
    terms: Mapping[str, float]
    fitted: tuple[str, ...]
    points: int
    rms_before: float
    rms_after: float
    source: str
    created_at: float

    @property
    def date(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.created_at))

    @property
    def label(self) -> str:
        return f"calibrated {self.date}"

    @property
    def key(self) -> str:
        """The template option `calibration_id`: the chip and the store row."""
        return f"{self.chip}:store-{self.id}"

    def describe(self) -> str:
        return (f"{self.label} (store #{self.id}, {self.points} points, {self.toolchain or 'toolchain unknown'}; "
                f"rms log error {self.rms_before:.3f} -> {self.rms_after:.3f})")

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "template": self.template, "dtype": self.dtype, "chip": self.chip,
                "toolchain": self.toolchain, "terms": dict(self.terms), "fitted": list(self.fitted),
                "points": self.points, "rms_before": self.rms_before, "rms_after": self.rms_after,
                "source": self.source, "created_at": self.created_at, "label": self.label}


def has_tables(pop) -> bool:
    """Whether the store has the calibration table (schema 4 and later)."""
    return pop.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'calibration_log'"
                            ).fetchone() is not None


def _key(template: str, dtype: str, chip: str) -> str:
    return f"{template}|{dtype}|{chip}"


def _append(pop, kind: str, key: str, body: Mapping[str, Any], created_at: float) -> int:
    with pop._write() as c:
        cur = c.execute("INSERT INTO calibration_log (kind, key, body, created_at) VALUES (?, ?, ?, ?)",
                        (kind, key, json.dumps(body, sort_keys=True), created_at))
        return int(cur.lastrowid)


def add_point(pop, *, template: str, dtype: str, chip: str, toolchain: str, device: str,
              workload: Mapping[str, Any], assignment: Mapping[str, Any], latency_us: float,
              p20_us: float | None = None, p80_us: float | None = None, source: str = "") -> int:
    """Store one measured point (a gpu latency of a correct instance)."""
    if not (isinstance(latency_us, (int, float)) and math.isfinite(latency_us) and latency_us > 0):
        raise InvalidInput("calibration point latency_us", latency_us, "a finite positive number of microseconds")
    if not chip or not template:
        raise InvalidInput("calibration point template/chip", (template, chip), "a template name and a chip name")
    body = {"toolchain": toolchain, "device": device, "workload": dict(workload),
            "assignment": {k: assignment[k] for k in sorted(assignment)}, "latency_us": float(latency_us),
            "p20_us": p20_us, "p80_us": p80_us, "source": source}
    return _append(pop, "point", _key(template, dtype, chip), body, time.time())


def points(pop, template: str, dtype: str, chip: str, toolchain: str | None = None) -> list[Point]:
    """The stored points of (template, dtype, chip[, toolchain]), oldest first."""
    rows = pop.conn.execute("SELECT body FROM calibration_log WHERE kind = 'point' AND key = ? ORDER BY id",
                            (_key(template, dtype, chip),)).fetchall()
    out = []
    for (text,) in rows:
        b = json.loads(text)
        if toolchain is None or b.get("toolchain") == toolchain:
            out.append(Point(b["assignment"], b["workload"], float(b["latency_us"])))
    return out


def latest(pop, template: str, dtype: str, chip: str, toolchain: str | None = None) -> StoredCalibration | None:
    """The newest fit of (template, dtype, chip) (under `toolchain` if given); None if there is none."""
    rows = pop.conn.execute("SELECT id, body, created_at FROM calibration_log WHERE kind = 'fit' AND key = ? "
                            "ORDER BY created_at DESC, id DESC", (_key(template, dtype, chip),))
    for id_, text, created in rows:
        b = json.loads(text)
        if toolchain is None or b.get("toolchain") == toolchain:
            return StoredCalibration(int(id_), template, dtype, chip, b.get("toolchain", ""), b["terms"],
                                     tuple(b.get("fitted", ())), int(b["points"]), float(b["rms_before"]),
                                     float(b["rms_after"]), b.get("source", ""), float(created))
    return None


def store_fit(pop, *, template: str, dtype: str, chip: str, toolchain: str, terms: Mapping[str, float],
              fitted: Sequence[str], points: int, rms_before: float, rms_after: float, source: str,
              created_at: float | None = None) -> StoredCalibration:
    now = time.time() if created_at is None else created_at
    body = {"toolchain": toolchain, "terms": {k: float(v) for k, v in sorted(terms.items())}, "fitted": list(fitted),
            "points": int(points), "rms_before": float(rms_before), "rms_after": float(rms_after), "source": source}
    rid = _append(pop, "fit", _key(template, dtype, chip), body, now)
    return StoredCalibration(rid, template, dtype, chip, toolchain, dict(body["terms"]), tuple(fitted), int(points),
                             float(rms_before), float(rms_after), source, now)


def terms_to_fit(calibrated: Sequence[str], n_points: int, max_terms: int | None = None,
                 first: Sequence[str] = ()) -> tuple[str, ...]:
    """At most n_points − 1 (and at most `max_terms`) terms: `first` (those the template calibrates),
    then LEARN_ORDER, then the template's own order."""
    lead = [n for n in first if n in calibrated]
    order = lead + [n for n in LEARN_ORDER if n in calibrated and n not in lead]
    order += [n for n in calibrated if n not in order]
    cap = min(len(order), n_points - 1, len(order) if max_terms is None else max_terms)
    return tuple(order[: max(0, cap)])


def learn(pop, factory: Callable[..., Any], chip_obj: Any, *, template: str, dtype: str, chip: str, toolchain: str,
          source: str, iterations: int = 12, starts: int = 1, max_terms: int | None = 6,
          first: Sequence[str] = ()) -> tuple[StoredCalibration | None, str]:
    """Refit (template, dtype, chip, toolchain) on its stored points, starting from the latest fit.

    `factory(dtype=, calibration=, calibration_id=)` builds the template. The defaults keep an
    online update (after each `measure`) to seconds: 6 terms, one start, 12 iterations, each
    refit starting where the last one ended; a benchmark with many points may ask for more, and name
    the terms to fit `first` (e.g. a schedule's own terms when its points are in the menu).
    Points the template cannot express are left out: a decision the template lacks but declares
    implicit (descriptor['implicit'], e.g. gemm-tiling-gpu without schedules: SC = 0) must hold its
    implicit value, else the point ran a design this template would price as another.
    Returns (the new fit or None, a one-line account of what happened)."""
    prev = latest(pop, template, dtype, chip, toolchain)
    start_terms = dict(prev.terms) if prev else None
    t = factory(dtype=dtype, calibration=start_terms, calibration_id=prev.key if prev else "priors")
    implicit = dict(t.descriptor.get("implicit", {}))
    pts = [p for p in points(pop, template, dtype, chip, toolchain)
           if all(p.assignment.get(k, v) == v for k, v in implicit.items())]
    calibrated = tuple(t.descriptor.get("calibrated", ()))
    names = terms_to_fit(calibrated, len(pts), max_terms, first)
    if not names:
        return None, f"{len(pts)} point(s) stored: at least 2 are needed to fit a term"
    cal = fit(t, chip_obj, pts, names=names, iterations=iterations, starts=starts, chip_label=chip)
    if not cal.rms_log_error_after <= cal.rms_log_error_before:
        return None, f"refit on {len(pts)} points did not lower the error; {prev.label if prev else PRIOR_LABEL} kept"
    base = t.bind(dict(pts[0].workload), chip_obj)
    terms = {**(start_terms or {}), **{n: float(base[n]) for n in calibrated}}  # terms it does not price carry over
    terms.update(cal.values)
    new = store_fit(pop, template=template, dtype=dtype, chip=chip, toolchain=toolchain, terms=terms, fitted=names,
                    points=len(pts), rms_before=cal.rms_log_error_before, rms_after=cal.rms_log_error_after,
                    source=source)
    return new, (f"refit {len(names)} term(s) on {len(pts)} points: rms log error {cal.rms_log_error_before:.3f} "
                 f"-> {cal.rms_log_error_after:.3f}; stored as {new.describe()}")
