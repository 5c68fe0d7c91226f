"""The population: an SQLite store of templates, proofs, counterexamples, designs, measurements.

Rules kept by this module, not by its callers:
  * a template is stored as `proved` only with a certificate that proves K1, K2 and K3 for it;
  * every design, measurement and calibration names its chip and workload;
  * a proved template whose structural descriptor nearly equals that of another proved template
    (a different name or variant) is refused: the population keeps structures, not variants.

Concurrency: WAL journal, a busy timeout, and every write in one `BEGIN IMMEDIATE` transaction,
so concurrent writers (threads or processes) queue instead of failing or losing rows. A design and
its measurements go in one transaction (`add_design_with_measurements`); concurrent runs prove a
template once (`claim_proof`).

Damage: a store is opened for reading or for writing (see opening.py); a store opened for writing
passed SQLite's quick_check first. Every sqlite3 error a method meets becomes a named
formloop.storefile error; once one says the store is damaged, this object writes nothing more."""
from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from formloop.errors import FormloopError, InvalidInput
from formloop.population import claims
from formloop.population.certify import certificate_status, obligation_failures
from formloop.population.opening import open_store
from formloop.population.records import (NEAR_DUPLICATE, TCOLS, MeasurementFact, NearDuplicate, TemplateRecord, canon,
                                         near_duplicate, record, require_fact, scope_miss, scope_summary)
from formloop.population.schema import FACT_TABLES, SCHEMA_VERSION, descriptor_key, version_of
from formloop.settings import load_settings
from formloop.storefile import StoreDamaged, StoreReadOnly, as_store_error
from formloop.template import Template


def _mapped(method: Callable) -> Callable:
    """Every sqlite3 error in `method` becomes the store's named error; damage is remembered."""
    @functools.wraps(method)
    def wrapper(self: "Population", *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise self._named(exc) from exc
    return wrapper


class Population:
    """One store file, opened for `mode` 'write' (the default: created if missing, checked with
    quick_check, migrated) or 'read' (must exist; never written). Use as a context manager or call
    `close()`."""

    def __init__(self, path: str | Path | None = None, *, busy_timeout_ms: int | None = None, mode: str = "write"):
        settings = load_settings()
        self.path = Path(path) if path is not None else settings.store_path
        self.mode = mode
        self.prove_timeout_s = settings.prove_timeout_s
        self.damaged: StoreDamaged | None = None
        opened = open_store(self.path, mode=mode, timeout_ms=busy_timeout_ms or settings.busy_timeout_ms)
        self.conn, self.migrated, self.opened_as = opened.conn, opened.migrated, opened.how

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Population":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    @_mapped
    def schema_version(self) -> int:
        return version_of(self.conn)

    @property
    @_mapped
    def journal_mode(self) -> str:
        return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])

    def _named(self, exc: sqlite3.Error) -> Exception:
        named = as_store_error(exc, self.path)
        if isinstance(named, StoreDamaged):  # from now on this object refuses to write
            self.damaged = named
        return named

    def _writable(self) -> None:
        if self.damaged is not None:
            raise self.damaged
        if self.mode != "write":
            raise StoreReadOnly(self.path, "it was opened for reading; open it with mode='write' to change it")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._writable()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            if self.conn.in_transaction:
                try:
                    self.conn.execute("ROLLBACK")
                except sqlite3.Error:  # the first error is the one to report
                    pass
            raise
        self.conn.execute("COMMIT")

    # -- templates and proofs ---------------------------------------------------------------
    @_mapped
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
                    (template.content_hash, template.name, canon(template.options), origin,
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
            same_variant = name == template.name and options == canon(template.options)
            if same_variant:
                continue  # a revision of the same template, not a second structure
            sim = near_duplicate(descriptor, json.loads(desc))
            if sim >= NEAR_DUPLICATE:
                raise NearDuplicate(f"{template.name}{dict(template.options) or ''}", name, h, sim)

    @_mapped
    def proof(self, template_hash: str, toolchain: str) -> str | None:
        """The JSON of a stored proved certificate for this template and toolchain (the reuse key)."""
        row = self.conn.execute(
            "SELECT body FROM certificates WHERE template_hash = ? AND toolchain = ? AND verdict = 'proved' "
            "ORDER BY id DESC LIMIT 1", (template_hash, toolchain)).fetchone()
        return None if row is None else row[0]

    @_mapped
    def latest_certificate(self, template_hash: str, toolchain: str) -> tuple[str, str] | None:
        """(verdict, JSON) of the newest certificate for this template and toolchain, if any."""
        row = self.conn.execute("SELECT verdict, body FROM certificates WHERE template_hash = ? AND toolchain = ? "
                                "ORDER BY id DESC LIMIT 1", (template_hash, toolchain)).fetchone()
        return None if row is None else (row[0], row[1])

    @_mapped
    def find(self, template_hash: str) -> TemplateRecord | None:
        row = self.conn.execute(f"SELECT {TCOLS} FROM templates WHERE hash = ?", (template_hash,)).fetchone()
        return None if row is None else record(row)

    @_mapped
    def template(self, template_hash: str) -> TemplateRecord:
        row = self.conn.execute(f"SELECT {TCOLS} FROM templates WHERE hash = ? OR hash LIKE ? || '%'",
                                (template_hash, template_hash)).fetchall()
        if len(row) != 1:
            known = [r[0] for r in self.conn.execute("SELECT hash FROM templates").fetchall()]
            raise InvalidInput("template hash", template_hash, known or "no templates are stored yet")
        return record(row[0])

    @_mapped
    def templates(self, *, name: str | None = None, status: str | None = None) -> list[TemplateRecord]:
        q, args = f"SELECT {TCOLS} FROM templates WHERE 1=1", []
        if name:
            q, args = q + " AND name = ?", [*args, name]
        if status:
            q, args = q + " AND status = ?", [*args, status]
        return [record(r) for r in self.conn.execute(q + " ORDER BY created_at, hash", args)]

    @_mapped
    def certificates(self, template_hash: str) -> list[dict]:
        rows = self.conn.execute("SELECT id, verdict, toolchain, seconds, created_at FROM certificates "
                                 "WHERE template_hash = ? ORDER BY id", (template_hash,)).fetchall()
        return [dict(zip(("id", "verdict", "toolchain", "seconds", "created_at"), r)) for r in rows]

    @_mapped
    def counterexamples(self, template_hash: str) -> list[dict]:
        rows = self.conn.execute("SELECT obligation, witness, trace, replay FROM counterexamples "
                                 "WHERE template_hash = ? ORDER BY id", (template_hash,)).fetchall()
        return [{"obligation": o, "witness": json.loads(w), "trace": json.loads(t), "replay": r} for o, w, t, r in rows]

    # -- designs, measurements, calibrations --------------------------------------------------
    @_mapped
    def add_design(self, template_hash: str, *, workload: str, chip: str, assignment: Mapping[str, Any],
                   predicted: float | None, unit: str, solver: str, bound: float | None = None,
                   gap: float | None = None) -> int:
        """Store a design (idempotent on template, workload, chip and assignment); return its id.
        A design that was measured is stored with `add_design_with_measurements` instead."""
        require_fact(workload, chip)
        with self._write() as c:
            return self._insert_design(c, template_hash, workload, chip, canon(assignment), predicted, unit, solver,
                                       bound, gap)

    @_mapped
    def add_design_with_measurements(self, template_hash: str, *, workload: str, chip: str,
                                     assignment: Mapping[str, Any], predicted: float | None, unit: str, solver: str,
                                     measurements: Sequence[MeasurementFact], bound: float | None = None,
                                     gap: float | None = None) -> tuple[int, list[int]]:
        """Store a design and its measurements in one transaction: (design id, measurement ids).

        A process killed at any point leaves either both or neither. The design is idempotent as in
        `add_design`; the measurements are always added."""
        require_fact(workload, chip)
        if not measurements:
            raise InvalidInput("measurements", [], "at least one MeasurementFact (a design measured by nothing is "
                               "stored with add_design)")
        for m in measurements:
            if not isinstance(m, MeasurementFact):
                raise InvalidInput("measurement", type(m).__name__, "a formloop.population.MeasurementFact")
            m.validate()
        with self._write() as c:
            d = self._insert_design(c, template_hash, workload, chip, canon(assignment), predicted, unit, solver,
                                    bound, gap)
            return d, [self._insert_measurement(c, d, workload, chip, m) for m in measurements]

    @_mapped
    def add_measurement(self, design_id: int, *, workload: str, chip: str, tier: str, device: str,
                        latency_s: float | None, error: float | None = None, versions: Mapping[str, str] | None = None,
                        provenance: Mapping[str, Any] | None = None, failure: str = "") -> int:
        """Store one measurement of a stored design; its chip and workload must be the design's."""
        require_fact(workload, chip)
        m = MeasurementFact(tier, device, latency_s, error, dict(versions or {}), dict(provenance or {}), failure)
        m.validate()
        with self._write() as c:
            row = c.execute("SELECT workload, chip FROM designs WHERE id = ?", (design_id,)).fetchone()
            if row is None:
                raise InvalidInput("design id", design_id, "the id of a stored design")
            if (row[0], row[1]) != (workload, chip):
                raise InvalidInput("measurement chip/workload", (chip, workload),
                                   f"those of design {design_id}: ({row[1]}, {row[0]})")
            return self._insert_measurement(c, design_id, workload, chip, m)

    @staticmethod
    def _insert_design(c: sqlite3.Connection, template_hash: str, workload: str, chip: str, key: str,
                       predicted: float | None, unit: str, solver: str, bound: float | None, gap: float | None) -> int:
        if c.execute("SELECT 1 FROM templates WHERE hash = ?", (template_hash,)).fetchone() is None:
            raise InvalidInput("design template hash", template_hash, "the hash of a stored template",
                               fix="store the template with its certificate before its designs")
        row = c.execute("SELECT id FROM designs WHERE template_hash=? AND workload=? AND chip=? AND assignment=?",
                        (template_hash, workload, chip, key)).fetchone()
        if row is not None:
            return int(row[0])
        cur = c.execute("INSERT INTO designs (template_hash, workload, chip, assignment, predicted, unit, solver, "
                        "bound, gap, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (template_hash, workload, chip, key, predicted, unit, solver, bound, gap, time.time()))
        return int(cur.lastrowid)

    @staticmethod
    def _insert_measurement(c: sqlite3.Connection, design_id: int, workload: str, chip: str, m: MeasurementFact) -> int:
        cur = c.execute("INSERT INTO measurements (design_id, workload, chip, tier, device, latency_s, error, "
                        "versions, created_at, provenance, failure) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (design_id, workload, chip, m.tier, m.device, m.latency_s, m.error,
                         json.dumps(dict(m.versions)), time.time(), json.dumps(dict(m.provenance), default=str),
                         m.failure))
        return int(cur.lastrowid)

    @_mapped
    def add_calibration(self, template_hash: str, *, chip: str, tier: str, factors: Mapping[str, float],
                        samples: int) -> int:
        require_fact("calibration", chip)
        with self._write() as c:
            cur = c.execute("INSERT INTO calibrations (template_hash, chip, tier, factors, samples, created_at) "
                            "VALUES (?,?,?,?,?,?)",
                            (template_hash, chip, tier, json.dumps(dict(factors)), samples, time.time()))
            return int(cur.lastrowid)

    @_mapped
    def designs(self, *, chip: str | None = None, workload: str | None = None,
                template: str | None = None) -> list[dict]:
        q, args = _filters("SELECT d.id, t.name, d.template_hash, d.workload, d.chip, d.assignment, d.predicted, "
                           "d.unit, d.solver, d.bound, d.gap, d.created_at FROM designs d "
                           "JOIN templates t ON t.hash = d.template_hash WHERE 1=1", "d", chip, workload, template)
        cols = ("id", "template", "template_hash", "workload", "chip", "assignment", "predicted", "unit", "solver",
                "bound", "gap", "created_at")
        out = [dict(zip(cols, r)) for r in self.conn.execute(q + " ORDER BY d.id", args)]
        for d in out:
            d["assignment"] = json.loads(d["assignment"])
        return out

    @_mapped
    def measurements(self, *, chip: str | None = None, workload: str | None = None, template: str | None = None,
                     tier: str | None = None) -> list[dict]:
        q, args = _filters("SELECT m.id, m.design_id, t.name, d.template_hash, m.workload, m.chip, m.tier, m.device, "
                           "m.latency_s, m.error, m.versions, m.provenance, m.failure, m.created_at "
                           "FROM measurements m "
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

    @_mapped
    def counts(self) -> dict[str, int]:
        return {t: int(self.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in FACT_TABLES}

    # -- proving once across processes ------------------------------------------------------
    @contextmanager
    def claim_proof(self, template_hash: str, toolchain: str, *, lease_s: float | None = None,
                    on_wait: Callable[[str], None] | None = None) -> Iterator[claims.ProofClaim]:
        """Prove a template once across every process sharing this store.

        Yields a ProofClaim. If `owned`, this process proves the template and stores the certificate
        (add_template) inside the block; the claim is released on leaving it. If not owned, a
        certificate decides the template (a settled one, or one stored by the process this one waited
        for) and the caller reuses it. `lease_s` (default: 4 x prove_timeout_s, at least 10 minutes)
        bounds how long a live but silent claimant is waited for; a dead one is replaced at once."""
        self._writable()
        lease = lease_s if lease_s is not None else max(600.0, 4 * self.prove_timeout_s)
        try:
            with claims.claim(self.conn, template_hash, toolchain, lease_s=lease, on_wait=on_wait) as found:
                yield found
        except sqlite3.Error as exc:
            raise self._named(exc) from exc

    # -- retrieval --------------------------------------------------------------------------
    @_mapped
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


def _filters(q: str, alias: str, chip, workload, template) -> tuple[str, list]:
    args: list = []
    if chip:
        q, args = q + f" AND {alias}.chip = ?", [*args, chip]
    if workload:  # an exact key, or an operator name matching every workload of that operator
        q, args = q + f" AND ({alias}.workload = ? OR {alias}.workload LIKE ? || ' %')", [*args, workload, workload]
    if template:
        q, args = q + " AND (t.name = ? OR t.hash LIKE ? || '%')", [*args, template, template]
    return q, args


__all__ = ["MeasurementFact", "NearDuplicate", "Population", "SCHEMA_VERSION", "TemplateRecord", "near_duplicate",
           "scope_miss"]
