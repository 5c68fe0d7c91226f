"""Certificates: a template's proof as re-checkable JSON, and `prove_template`, which makes one.

A certificate names the template (name, options, content hash), what the proof fixed for
decidability, which chip parameters it kept symbolic (within ranges or menus a hardware library
offers) and the bounds of its bounded models, and every obligation with its query, solver and
version, verdict and time. Its verdict is proved only if every obligation is proved, a
counterexample if any obligation has one, else unresolved. `covers` says whether a given chip
lies inside what was proved; `recheck` re-runs the proof on the template as it is now (the
caller passes it: the template library is a later layer) and reports what changed."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from numbers import Real
from typing import Any

from formloop.errors import InvalidInput, StructureError
from formloop.template import Template
from formloop.verify.lowering import ChipRanges, ParamScope, proof_scope, rule_params
from formloop.verify.outcome import ObligationResult, Verdict, z3_solver_name
from formloop.verify.smt import check_k1, check_k3

FORMAT = "formloop-certificate/1"


@dataclass(frozen=True)
class ProofRun:
    """What a plan's checks run under: this proof's parameter scope (fixed values, symbolic chip
    ranges and menus) and its timeout per query."""

    scope: ParamScope
    timeout_s: float


CheckFn = Callable[[ProofRun], Sequence[ObligationResult]]


@dataclass(frozen=True)
class ProofPlan:
    """What a template's `obligations` hook returns: parameters fixed for decidability (and why),
    the bounds of its bounded models, and its own obligations (each run under the proof's scope)."""

    fixed: Mapping[str, Real] = field(default_factory=dict)
    fixed_reason: str = ""
    bounds: Mapping[str, Any] = field(default_factory=dict)
    checks: tuple[CheckFn, ...] = ()


def plan_of(template: Template) -> ProofPlan:
    if template.obligations is None:
        return ProofPlan()
    plan = template.obligations(template)
    if not isinstance(plan, ProofPlan):
        raise StructureError(f"template {template.name}: its obligations hook returned {type(plan).__name__}, "
                             "not a ProofPlan")
    return plan


def overall(results: Sequence[ObligationResult]) -> Verdict:
    verdicts = {r.verdict for r in results}
    if Verdict.COUNTEREXAMPLE in verdicts:
        return Verdict.COUNTEREXAMPLE
    if results and verdicts == {Verdict.PROVED}:
        return Verdict.PROVED
    return Verdict.UNRESOLVED


def _formloop_version() -> str:
    try:
        return version("formloop")
    except PackageNotFoundError:  # an uninstalled checkout still certifies
        return "unknown"


@dataclass(frozen=True)
class Certificate:
    template: str
    template_hash: str
    options: Mapping[str, str]
    obligations: tuple[ObligationResult, ...]
    fixed: Mapping[str, Real] = field(default_factory=dict)
    fixed_reason: str = ""
    bounds: Mapping[str, Any] = field(default_factory=dict)
    chip: Mapping[str, Any] = field(default_factory=dict)
    workload: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 10.0
    solver: str = ""
    formloop_version: str = ""
    created: str = ""
    seconds: float = 0.0

    @property
    def verdict(self) -> Verdict:
        return overall(self.obligations)

    def counts(self) -> dict[str, int]:
        out = {v.value: 0 for v in Verdict}
        for r in self.obligations:
            out[r.verdict.value] += 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "template": self.template, "template_hash": self.template_hash,
            "options": dict(self.options), "verdict": self.verdict.value, "counts": self.counts(),
            "fixed": dict(self.fixed), "fixed_reason": self.fixed_reason, "bounds": dict(self.bounds),
            "chip": dict(self.chip), "workload": dict(self.workload), "timeout_s": self.timeout_s,
            "solver": self.solver,
            "formloop_version": self.formloop_version,
            "created": self.created, "seconds": self.seconds,
            "obligations": [_result_dict(r) for r in self.obligations],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, default=_plain)

    @classmethod
    def from_json(cls, text: str) -> "Certificate":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput("certificate", text[:60], "JSON written by Certificate.to_json") from exc
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            found = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise InvalidInput("certificate format", found, [FORMAT])
        fields = set(ObligationResult.__dataclass_fields__)
        obligations = tuple(
            ObligationResult(**{**{k: v for k, v in o.items() if k in fields}, "verdict": Verdict(o["verdict"]),
                                "trace": tuple(tuple(e) if isinstance(e, list) else e for e in o.get("trace", ()))})
            for o in d["obligations"])
        return cls(template=d["template"], template_hash=d["template_hash"], options=d["options"],
                   obligations=obligations, fixed=d.get("fixed", {}), fixed_reason=d.get("fixed_reason", ""),
                   bounds=d.get("bounds", {}), chip=d.get("chip", {}), workload=d.get("workload", {}),
                   timeout_s=d.get("timeout_s", 10.0),
                   solver=d.get("solver", ""),
                   formloop_version=d.get("formloop_version", ""), created=d.get("created", ""),
                   seconds=d.get("seconds", 0.0))

    # -- which chips the proof covers ------------------------------------------------------------
    def chip_statement(self) -> str:
        """What the proof assumed of the chip, in words: a fixed chip, or symbolic over ranges/menus."""
        c = self.chip
        if not c:
            return "chip: not recorded (certificate older than chip scopes)"
        fixed = ", ".join(f"{k}={v}" for k, v in c.get("fixed", {}).items())
        unread = f"; free (any value the template's scope admits): {', '.join(c['free'])}" if c.get("free") else ""
        if c.get("mode") == "symbolic":
            kinds = c.get("kinds", {})
            sym = ", ".join(f"{k} in [{v[0]}, {v[1]}]" if kinds.get(k) == "range" else
                            f"{k} in {{{', '.join(str(x) for x in v)}}}" for k, v in c["symbolic"].items())
            return f"chip: symbolic over {sym}" + (f"; fixed {fixed}" if fixed else "") + unread
        return f"chip: fixed ({fixed or 'no chip parameter is read'})" + unread

    def workload_statement(self) -> str:
        """What the proof says about the workload parameters, in words."""
        w = self.workload
        if not w:
            return "workload: not recorded (certificate older than workload records)"
        every = lambda ns: ", ".join(f"{n} >= {w['lower'][n]}" for n in ns)  # noqa: E731
        parts = []
        if w.get("read"):
            parts.append(f"K1/K3 hold for every {every(w['read'])} (read by the rules)")
        if w.get("unread"):
            parts.append(f"{', '.join(w['unread'])} symbolic but read by no constraint or precondition")
        if w.get("fixed"):
            parts.append("fixed " + ", ".join(f"{k}={v}" for k, v in w["fixed"].items()))
        return "workload: " + "; ".join(parts)

    def uncovered(self, chip_values: Mapping[str, Real]) -> list[str]:
        """Why the chip with parameter values `chip_values` (a template's `bind_chip(chip)`) lies
        outside this proof; empty when it is covered. Free parameters (read by no constraint or
        precondition) are covered by any value the template's scope admits, which the template
        itself checks whenever it binds a chip."""
        c = self.chip
        if not c:
            return ["the certificate records no chip scope; prove the template again"]
        out = []
        for name in c.get("read", ()):
            if name not in chip_values:
                out.append(f"{name}: no value given")
                continue
            v = chip_values[name]
            if name in c.get("fixed", {}):
                if v != c["fixed"][name]:
                    out.append(f"{name}={v}, but the proof fixed {name}={c['fixed'][name]}")
            elif c.get("kinds", {}).get(name) == "range":
                lo, hi = c["symbolic"][name]
                if not lo <= v <= hi:
                    out.append(f"{name}={v} lies outside the proved range [{lo}, {hi}]")
            elif name in c.get("symbolic", {}) and v not in c["symbolic"][name]:
                out.append(f"{name}={v} is not on the proved menu {list(c['symbolic'][name])}")
        return out

    def covers(self, chip_values: Mapping[str, Real]) -> bool:
        return not self.uncovered(chip_values)

    def recheck(self, template: Template, *, timeout_s: float | None = None) -> "Recheck":
        """Prove `template` again (the caller looks it up, e.g. by this certificate's name and
        options) under the same chip scope, and compare."""
        c = self.chip
        kinds = c.get("kinds", {})
        ranges = {k: (tuple(v) if kinds.get(k) == "range" else list(v)) for k, v in c.get("symbolic", {}).items()}
        fresh = prove_template(template, timeout_s=self.timeout_s if timeout_s is None else timeout_s,
                               chip=c.get("fixed") if c.get("pinned") else None, chip_ranges=ranges or None)
        return Recheck(self, fresh, diff(self, fresh))


def _result_dict(r: ObligationResult) -> dict[str, Any]:
    d = r.as_dict()
    d["query_sha256"] = hashlib.sha256(r.query.encode()).hexdigest()[:16]
    return d


def _plain(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)


@dataclass(frozen=True)
class Recheck:
    old: Certificate
    new: Certificate
    changes: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        return not self.changes


def diff(old: Certificate, new: Certificate) -> tuple[str, ...]:
    """What differs between two certificates: identity, scope, and each obligation's verdict or
    query. Times are not compared."""
    out = []
    if old.template != new.template:
        out.append(f"template {old.template} -> {new.template}")
    if old.template_hash != new.template_hash:
        out.append(f"template content hash {old.template_hash} -> {new.template_hash} (the contract changed)")
    for label, a, b in (("fixed parameters", dict(old.fixed), dict(new.fixed)),
                        ("bounds", dict(old.bounds), dict(new.bounds)), ("chip scope", dict(old.chip), dict(new.chip))):
        if a != b:
            out.append(f"{label} {a} -> {b}")
    before = {r.obligation: r for r in old.obligations}
    after = {r.obligation: r for r in new.obligations}
    for name in before.keys() - after.keys():
        out.append(f"{name}: no longer checked")
    for name in after.keys() - before.keys():
        out.append(f"{name}: new obligation, {after[name].verdict.value}")
    for name in before.keys() & after.keys():
        a, b = before[name], after[name]
        if a.verdict is not b.verdict:
            out.append(f"{name}: {a.verdict.value} -> {b.verdict.value}")
        elif a.query != b.query:
            out.append(f"{name}: same verdict ({a.verdict.value}), different query")
    if old.verdict is not new.verdict:
        out.append(f"certificate verdict {old.verdict.value} -> {new.verdict.value}")
    return tuple(sorted(out))


def _chip_record(template: Template, scope: ParamScope, pinned: bool) -> dict[str, Any]:
    """The chip part of a certificate: the chip parameters the rules read, each fixed or symbolic
    (a range or a menu), and the free ones (symbolic over the template's scope)."""
    chip_params = [p.name for p in template.params if p.payload.kind == "chip"]
    read = rule_params(template)
    kinds = {**{k: "range" for k in scope.ranges}, **{k: "menu" for k in scope.menus}}
    return {
        "mode": "symbolic" if kinds else "fixed", "pinned": pinned,
        "read": [n for n in chip_params if n in read],
        "free": [n for n in chip_params if n not in read],
        "fixed": {n: scope.fixed[n] for n in chip_params if n in scope.fixed},
        "symbolic": {k: list(v) for k, v in scope.symbolic.items()}, "kinds": kinds,
    }


def _workload_record(template: Template, scope: ParamScope) -> dict[str, Any]:
    """What K1/K3 say about the workload parameters: which the rules read (so the proof is a real
    statement about every value of them), which are fixed (the element size of a dtype), and
    which are symbolic but read by no rule (K1/K3 hold trivially in them; they enter through the
    plan's index obligations, proved for every extent)."""
    read = rule_params(template)
    names = [p.name for p in template.params if p.payload.kind == "workload"]
    lower = {p.name: p.payload.lower for p in template.params}
    return {"fixed": {n: scope.fixed[n] for n in names if n in scope.fixed},
            "read": [n for n in names if n in read and n not in scope.fixed],
            "unread": [n for n in names if n not in read and n not in scope.fixed],
            "lower": {n: lower[n] for n in names if n not in scope.fixed}}


def prove_template(template: Template, *, timeout_s: float = 10.0, chip: Mapping[str, Real] | None = None,
                   chip_ranges: ChipRanges | None = None) -> Certificate:
    """K1, K3 and the template's own obligations (its `obligations` hook), once for the family.

    By default the chip parameters are those the template's proof plan fixes. `chip` fixes them to
    another chip's values (prove a purchased chip before it is scored); `chip_ranges` keeps the
    named ones symbolic within a (lo, hi) range or over a menu, so one certificate covers every
    chip in them (`Certificate.covers`)."""
    start = time.perf_counter()
    plan = plan_of(template)
    scope = proof_scope(template, plan.fixed, chip, chip_ranges)
    results = [check_k1(template, scope=scope, timeout_s=timeout_s),
               check_k3(template, scope=scope, timeout_s=timeout_s)]
    run = ProofRun(scope, timeout_s)
    for check in plan.checks:
        results += list(check(run))
    return Certificate(
        template=template.name, template_hash=template.content_hash, options=dict(template.options),
        obligations=tuple(results), fixed=dict(scope.fixed), fixed_reason=plan.fixed_reason,
        bounds=dict(plan.bounds), chip=_chip_record(template, scope, chip is not None),
        workload=_workload_record(template, scope), timeout_s=timeout_s,
        solver=z3_solver_name(), formloop_version=_formloop_version(),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        seconds=time.perf_counter() - start,
    )
