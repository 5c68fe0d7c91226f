"""The population: an SQLite store of templates, proofs, counterexamples, designs, measurements.

Rules kept by this module, not by its callers:
  * a template is stored as `proved` only with a certificate that proves K1, K2 and K3 for it;
  * every design, measurement and calibration names its chip and workload;
  * a proved template whose structural descriptor nearly equals that of another proved template
    (a different name or variant) is refused: the population keeps structures, not variants.

Concurrency: WAL journal, a busy timeout, and every write in one `BEGIN IMMEDIATE` transaction,
so concurrent writers (threads or processes) queue instead of failing or losing rows."""
from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from formloop.errors import FormloopError, InvalidInput
from formloop.expr import render
from formloop.population.certify import certificate_status, obligation_failures
from formloop.population.schema import SCHEMA_VERSION, descriptor_key, migrate, version_of
from formloop.settings import load_settings
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


def _canon(obj: Mapping[str, Any]) -> str:
    return json.dumps({k: obj[k] for k in sorted(obj)}, default=_num)


def _num(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


class Population:
    """One store file. Use as a context manager or call `close()`."""

    def __init__(self, path: str | Path | None = None, *, busy_timeout_ms: int | None = None):
        settings = load_settings()
        self.path = Path(path) if path is not None else settings.store_path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        timeout_ms = busy_timeout_ms or settings.busy_timeout_ms
        self.conn = sqlite3.connect(self.path, timeout=timeout_ms / 1000, isolation_level=None,
                                    check_same_thread=False)
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.migrated = migrate(self.conn)
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Population":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return version_of(self.conn)

    @property
    def journal_mode(self) -> str:
        return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- templates and proofs ---------------------------------------------------------------
    def add_template(self, template: Template, *, origin: str, certificate: Any, source: str | None = None,
                     toolchain: str = "") -> TemplateRecord:
        """Store a template with the certificate that decides its status; return its record.

        The status is read from the certificate (never passed in): proved only when K1, K2 and K3
        are all proved for this template. Counterexamples in the certificate are stored with it."""
        status = certificate_status(certificate, template.content_hash)
        descriptor = dict(template.descriptor)
        now = time.time()
        with self._write() as c:
            if status == "proved":  # inside the write lock: two writers cannot both slip past
                self._refuse_near_duplicate(template, descriptor)
            row = c.execute("SELECT status FROM templates WHERE hash = ?", (template.content_hash,)).fetchone()
            if row is None:
                c.execute(
                    "INSERT INTO templates (hash, name, options, origin, source, scope, descriptor, status, "
                    "created_at, descriptor_key) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (template.content_hash, template.name, _canon(template.options), origin,
                     source or template.canonical_text(), json.dumps(scope_summary(template)),
                     json.dumps(descriptor, default=list), status, now, descriptor_key(descriptor)))
            elif row[0] != "proved" or status == "proved":
                c.execute("UPDATE templates SET status = ?, origin = ? WHERE hash = ?",
                          (status, origin, template.content_hash))
            self._insert_certificate(c, template.content_hash, certificate, toolchain, now)
        return self.template(template.content_hash)

    def _insert_certificate(self, c, template_hash: str, certificate: Any, toolchain: str, now: float) -> None:
        verdict = certificate.verdict.value if hasattr(certificate.verdict, "value") else str(certificate.verdict)
        c.execute("INSERT INTO certificates (template_hash, verdict, toolchain, body, seconds, created_at) "
                  "VALUES (?,?,?,?,?,?)",
                  (template_hash, verdict, toolchain, certificate.to_json(),
                   float(sum(o.seconds for o in certificate.obligations)), now))
        for o in obligation_failures(certificate):
            c.execute("INSERT INTO counterexamples (template_hash, obligation, witness, trace, replay, created_at) "
                      "VALUES (?,?,?,?,?,?)",
                      (template_hash, o.obligation, json.dumps(dict(o.witness or {}), default=str),
                       json.dumps(list(o.trace), default=str), o.replay or o.reason, now))

    def _refuse_near_duplicate(self, template: Template, descriptor: dict) -> None:
        rows = self.conn.execute("SELECT hash, name, options, descriptor FROM templates WHERE status = 'proved' "
                                 "AND hash <> ?", (template.content_hash,)).fetchall()
        for h, name, options, desc in rows:
            same_variant = name == template.name and options == _canon(template.options)
            if same_variant:
                continue  # a revision of the same template, not a second structure
            sim = near_duplicate(descriptor, json.loads(desc))
            if sim >= NEAR_DUPLICATE:
                raise NearDuplicate(f"{template.name}{dict(template.options) or ''}", name, h, sim)

    def proof(self, template_hash: str, toolchain: str) -> str | None:
        """The JSON of a stored proved certificate for this template and toolchain (the reuse key)."""
        row = self.conn.execute(
            "SELECT body FROM certificates WHERE template_hash = ? AND toolchain = ? AND verdict = 'proved' "
            "ORDER BY id DESC LIMIT 1", (template_hash, toolchain)).fetchone()
        return None if row is None else row[0]

    def latest_certificate(self, template_hash: str, toolchain: str) -> tuple[str, str] | None:
        """(verdict, JSON) of the newest certificate for this template and toolchain, if any."""
        row = self.conn.execute("SELECT verdict, body FROM certificates WHERE template_hash = ? AND toolchain = ? "
                                "ORDER BY id DESC LIMIT 1", (template_hash, toolchain)).fetchone()
        return None if row is None else (row[0], row[1])

    def find(self, template_hash: str) -> TemplateRecord | None:
        row = self.conn.execute(f"SELECT {_TCOLS} FROM templates WHERE hash = ?", (template_hash,)).fetchone()
        return None if row is None else _record(row)

    def template(self, template_hash: str) -> TemplateRecord:
        row = self.conn.execute(f"SELECT {_TCOLS} FROM templates WHERE hash = ? OR hash LIKE ? || '%'",
                                (template_hash, template_hash)).fetchall()
        if len(row) != 1:
            known = [r[0] for r in self.conn.execute("SELECT hash FROM templates").fetchall()]
            raise InvalidInput("template hash", template_hash, known or "no templates are stored yet")
        return _record(row[0])

    def templates(self, *, name: str | None = None, status: str | None = None) -> list[TemplateRecord]:
        q, args = f"SELECT {_TCOLS} FROM templates WHERE 1=1", []
        if name:
            q, args = q + " AND name = ?", [*args, name]
        if status:
            q, args = q + " AND status = ?", [*args, status]
        return [_record(r) for r in self.conn.execute(q + " ORDER BY created_at, hash", args)]

    def certificates(self, template_hash: str) -> list[dict]:
        rows = self.conn.execute("SELECT id, verdict, toolchain, seconds, created_at FROM certificates "
                                 "WHERE template_hash = ? ORDER BY id", (template_hash,)).fetchall()
        return [dict(zip(("id", "verdict", "toolchain", "seconds", "created_at"), r)) for r in rows]

    def counterexamples(self, template_hash: str) -> list[dict]:
        rows = self.conn.execute("SELECT obligation, witness, trace, replay FROM counterexamples "
                                 "WHERE template_hash = ? ORDER BY id", (template_hash,)).fetchall()
        return [{"obligation": o, "witness": json.loads(w), "trace": json.loads(t), "replay": r} for o, w, t, r in rows]

    # -- designs, measurements, calibrations --------------------------------------------------
    def add_design(self, template_hash: str, *, workload: str, chip: str, assignment: Mapping[str, Any],
                   predicted: float | None, unit: str, solver: str, bound: float | None = None,
                   gap: float | None = None) -> int:
        """Store a design (idempotent on template, workload, chip and assignment); return its id."""
        _require_fact(workload, chip)
        key = _canon(assignment)
        with self._write() as c:
            row = c.execute("SELECT id FROM designs WHERE template_hash=? AND workload=? AND chip=? AND assignment=?",
                            (template_hash, workload, chip, key)).fetchone()
            if row is not None:
                return int(row[0])
            cur = c.execute("INSERT INTO designs (template_hash, workload, chip, assignment, predicted, unit, solver, "
                            "bound, gap, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                            (template_hash, workload, chip, key, predicted, unit, solver, bound, gap, time.time()))
            return int(cur.lastrowid)

    def add_measurement(self, design_id: int, *, workload: str, chip: str, tier: str, device: str,
                        latency_s: float | None, error: float | None = None, versions: Mapping[str, str] | None = None,
                        provenance: Mapping[str, Any] | None = None, failure: str = "") -> int:
        """Store one measurement of a design; its chip and workload must be the design's."""
        _require_fact(workload, chip)
        if tier not in TIERS:
            raise InvalidInput("measurement tier", tier, TIERS)
        if latency_s is None and not failure:
            raise InvalidInput("measurement", "no latency and no failure class", "a latency, or the failure that stopped it")
        with self._write() as c:
            row = c.execute("SELECT workload, chip FROM designs WHERE id = ?", (design_id,)).fetchone()
            if row is None:
                raise InvalidInput("design id", design_id, "the id of a stored design")
            if (row[0], row[1]) != (workload, chip):
                raise InvalidInput("measurement chip/workload", (chip, workload),
                                   f"those of design {design_id}: ({row[1]}, {row[0]})")
            cur = c.execute("INSERT INTO measurements (design_id, workload, chip, tier, device, latency_s, error, "
                            "versions, created_at, provenance, failure) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            (design_id, workload, chip, tier, device, latency_s, error,
                             json.dumps(dict(versions or {})), time.time(), json.dumps(dict(provenance or {}), default=str),
                             failure))
            return int(cur.lastrowid)

    def add_calibration(self, template_hash: str, *, chip: str, tier: str, factors: Mapping[str, float],
                        samples: int) -> int:
        _require_fact("calibration", chip)
        with self._write() as c:
            cur = c.execute("INSERT INTO calibrations (template_hash, chip, tier, factors, samples, created_at) "
                            "VALUES (?,?,?,?,?,?)", (template_hash, chip, tier, json.dumps(dict(factors)), samples, time.time()))
            return int(cur.lastrowid)

    def designs(self, *, chip: str | None = None, workload: str | None = None, template: str | None = None) -> list[dict]:
        q, args = _filters("SELECT d.id, t.name, d.template_hash, d.workload, d.chip, d.assignment, d.predicted, "
                           "d.unit, d.solver, d.bound, d.gap, d.created_at FROM designs d "
                           "JOIN templates t ON t.hash = d.template_hash WHERE 1=1", "d", chip, workload, template)
        cols = ("id", "template", "template_hash", "workload", "chip", "assignment", "predicted", "unit", "solver",
                "bound", "gap", "created_at")
        out = [dict(zip(cols, r)) for r in self.conn.execute(q + " ORDER BY d.id", args)]
        for d in out:
            d["assignment"] = json.loads(d["assignment"])
        return out

    def measurements(self, *, chip: str | None = None, workload: str | None = None, template: str | None = None,
                     tier: str | None = None) -> list[dict]:
        q, args = _filters("SELECT m.id, m.design_id, t.name, d.template_hash, m.workload, m.chip, m.tier, m.device, "
                           "m.latency_s, m.error, m.versions, m.provenance, m.failure, m.created_at FROM measurements m "
                           "JOIN designs d ON d.id = m.design_id JOIN templates t ON t.hash = d.template_hash "
                           "WHERE 1=1", "m", chip, workload, template)
        if tier:
            q, args = q + " AND m.tier = ?", [*args, tier]
        cols = ("id", "design_id", "template", "template_hash", "workload", "chip", "tier", "device", "latency_s",
                "error", "versions", "provenance", "failure", "created_at")
        out = [dict(zip(cols, r)) for r in self.conn.execute(q + " ORDER BY m.id", args)]
        for m in out:
            m["versions"], m["provenance"] = json.loads(m["versions"]), json.loads(m["provenance"])
        return out

    def counts(self) -> dict[str, int]:
        return {t: int(self.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
                for t in ("templates", "certificates", "counterexamples", "designs", "measurements", "calibrations")}

    # -- retrieval --------------------------------------------------------------------------
    def covering(self, params: Mapping[str, Any], chip: Any, *, algorithm: str | None = None
                 ) -> tuple[list[tuple[TemplateRecord, Template]], list[tuple[TemplateRecord, str]]]:
        """Proved templates whose scope covers these workload parameters on `chip`.

        Returns (covering, passed_over): each stored template is loaded again from its origin; one
        whose source changed since it was proved (its hash differs) is passed over with the reason."""
        from formloop.library.user import load_origin  # the loader reaches the library and user files

        hits, skipped = [], []
        for rec in self.templates(status="proved"):
            if algorithm and rec.descriptor.get("algorithm") != algorithm:
                continue
            try:
                t = load_origin(rec.origin)
            except FormloopError as exc:
                skipped.append((rec, f"cannot be loaded again: {exc}"))
                continue
            if t.content_hash != rec.hash:
                skipped.append((rec, f"its source changed since it was proved (now {t.content_hash})"))
                continue
            reason = scope_miss(t, params, chip)
            if reason:
                skipped.append((rec, reason))
            else:
                hits.append((rec, t))
        return hits, skipped


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


_TCOLS = "hash, name, options, origin, status, descriptor, scope, created_at"


def _record(r) -> TemplateRecord:
    return TemplateRecord(hash=r[0], name=r[1], options=json.loads(r[2]), origin=r[3], status=r[4],
                          descriptor=json.loads(r[5]), scope=json.loads(r[6]), created_at=r[7])


def _require_fact(workload: str, chip: str) -> None:
    if not workload or not isinstance(workload, str):
        raise InvalidInput("workload of a performance fact", workload, "a non-empty workload key")
    if not chip or not isinstance(chip, str):
        raise InvalidInput("chip of a performance fact", chip, "a non-empty chip name")


def _filters(q: str, alias: str, chip, workload, template) -> tuple[str, list]:
    args: list = []
    if chip:
        q, args = q + f" AND {alias}.chip = ?", [*args, chip]
    if workload:  # an exact key, or an operator name matching every workload of that operator
        q, args = q + f" AND ({alias}.workload = ? OR {alias}.workload LIKE ? || ' %')", [*args, workload, workload]
    if template:
        q, args = q + " AND (t.name = ? OR t.hash LIKE ? || '%')", [*args, template, template]
    return q, args


__all__ = ["NearDuplicate", "Population", "SCHEMA_VERSION", "TemplateRecord", "near_duplicate", "scope_miss"]
