"""What the population holds, as records, and the rules on them that need no database: the
near-duplicate measure, scope coverage, and what a performance fact must carry."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from formloop.errors import FormloopError, InvalidInput
from formloop.expr import render
from formloop.population.schema import descriptor_key
from formloop.template import Template

TIERS = ("model", "emulated", "simulated", "gpu")
NEAR_DUPLICATE = 0.8  # mean per-field word overlap (Jaccard) at or above which two structures are one


class NearDuplicate(FormloopError, ValueError):
    """A proved template whose structure the population already holds under another name."""

    def __init__(self, name: str, other: str, other_hash: str, similarity: float):
        self.name, self.other, self.other_hash, self.similarity = name, other, other_hash, similarity
        super().__init__(f"template {name} is a near-duplicate of stored template {other} ({other_hash}); "
                         f"descriptor overlap {similarity:.2f} >= {NEAR_DUPLICATE}",
                         fix="describe (and build) a structurally different template, or reuse the stored one")


@dataclass(frozen=True)
class TemplateRecord:
    hash: str
    name: str
    options: Mapping[str, Any]
    origin: str
    status: str
    descriptor: Mapping[str, Any]
    scope: Mapping[str, Any]
    created_at: float

    def as_dict(self) -> dict:
        return {"hash": self.hash, "name": self.name, "options": dict(self.options), "origin": self.origin,
                "status": self.status, "descriptor": dict(self.descriptor), "scope": dict(self.scope),
                "created_at": self.created_at}


def near_duplicate(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """Similarity of two descriptors in [0, 1]: the mean over fields of word-set Jaccard overlap."""
    ka, kb = json.loads(descriptor_key(dict(a))), json.loads(descriptor_key(dict(b)))
    scores = []
    for field in ka:
        x, y = set(ka[field]), set(kb[field])
        scores.append(1.0 if not x and not y else len(x & y) / len(x | y))
    return sum(scores) / len(scores)


def scope_summary(t: Template) -> dict:
    return {
        "rules": {c.name: render(c.expr) for c in t.scope},
        "params": {p.name: {"kind": p.payload.kind, "integer": p.payload.integer, "lower": p.payload.lower}
                   for p in t.params},
    }


def canon(obj: Mapping[str, Any]) -> str:
    return json.dumps({k: obj[k] for k in sorted(obj)}, default=_num)


def _num(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


@dataclass(frozen=True)
class MeasurementFact:
    """One measurement of a design before it is stored; its chip and workload are the design's.
    latency_s is None only with a failure class saying what stopped the measurement."""

    tier: str
    device: str
    latency_s: float | None
    error: float | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    failure: str = ""

    def validate(self) -> None:
        if self.tier not in TIERS:
            raise InvalidInput("measurement tier", self.tier, TIERS)
        if self.latency_s is None and not self.failure:
            raise InvalidInput("measurement", "no latency and no failure class",
                               "a latency, or the failure that stopped it")
        if self.latency_s is not None and not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise InvalidInput("measurement latency_s", self.latency_s, "a finite number of seconds >= 0, or None "
                               "with a failure class")


def scope_miss(t: Template, params: Mapping[str, Any], chip: Any) -> str:
    """Why `t` does not cover the workload on the chip ('' when it does)."""
    wanted = {p.name for p in t.params if p.payload.kind == "workload"}
    if set(params) != wanted:
        return f"reads workload parameters {sorted(wanted)}, the workload gives {sorted(params)}"
    try:
        values = t.bind(params, chip if t.bind_chip is not None else None)
    except (FormloopError, KeyError) as exc:
        return f"does not bind: {exc}"
    failures = t.scope_failures(values)
    return "; ".join(str(f) for f in failures)


TCOLS = "hash, name, options, origin, status, descriptor, scope, created_at"


def record(r) -> TemplateRecord:
    return TemplateRecord(hash=r[0], name=r[1], options=json.loads(r[2]), origin=r[3], status=r[4],
                          descriptor=json.loads(r[5]), scope=json.loads(r[6]), created_at=r[7])


def require_fact(workload: str, chip: str) -> None:
    if not workload or not isinstance(workload, str):
        raise InvalidInput("workload of a performance fact", workload, "a non-empty workload key")
    if not chip or not isinstance(chip, str):
        raise InvalidInput("chip of a performance fact", chip, "a non-empty chip name")
