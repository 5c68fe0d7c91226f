"""The population's SQLite schema, as an ordered list of migrations.

`PRAGMA user_version` records how many migrations a store has applied. Opening a store applies the
missing ones in one write transaction, so an older store is upgraded in place and two processes
opening a fresh store at once apply each migration exactly once. Never edit a released migration;
append a new one."""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from formloop.storefile import StoreDamaged, StoreError, StoreUnavailable, as_store_error


@dataclass(frozen=True)
class Migration:
    version: int
    summary: str
    sql: str
    data: Callable[[sqlite3.Connection], None] | None = None  # row rewrites after the DDL


V1 = """
CREATE TABLE templates (
    hash        TEXT PRIMARY KEY,          -- Template.content_hash
    name        TEXT NOT NULL,
    options     TEXT NOT NULL,             -- JSON of the factory options (variant)
    origin      TEXT NOT NULL,             -- where to load it again: library:NAME?opts | file:PATH:NAME
    source      TEXT NOT NULL,             -- canonical contract text (plus file source for user templates)
    scope       TEXT NOT NULL,             -- JSON: scope rules and parameter domains
    descriptor  TEXT NOT NULL,             -- JSON: algorithm, reuse, placement, resources
    status      TEXT NOT NULL CHECK (status IN ('proved', 'refuted', 'unresolved')),
    created_at  REAL NOT NULL
);
CREATE TABLE certificates (
    id            INTEGER PRIMARY KEY,
    template_hash TEXT NOT NULL REFERENCES templates(hash),
    verdict       TEXT NOT NULL CHECK (verdict IN ('proved', 'counterexample', 'unresolved')),
    toolchain     TEXT NOT NULL,           -- verifier and solver versions: part of the reuse key
    body          TEXT NOT NULL,           -- the certificate's own JSON
    seconds       REAL NOT NULL,
    created_at    REAL NOT NULL
);
CREATE TABLE counterexamples (
    id            INTEGER PRIMARY KEY,
    template_hash TEXT NOT NULL REFERENCES templates(hash),
    obligation    TEXT NOT NULL,
    witness       TEXT NOT NULL,           -- JSON
    trace         TEXT NOT NULL,           -- JSON list: the replayable trace
    replay        TEXT NOT NULL,           -- what the replay interpreter saw go wrong
    created_at    REAL NOT NULL
);
CREATE TABLE designs (
    id            INTEGER PRIMARY KEY,
    template_hash TEXT NOT NULL REFERENCES templates(hash),
    workload      TEXT NOT NULL CHECK (workload <> ''),
    chip          TEXT NOT NULL CHECK (chip <> ''),
    assignment    TEXT NOT NULL,           -- JSON, keys sorted
    predicted     REAL,
    unit          TEXT NOT NULL,
    solver        TEXT NOT NULL,
    bound         REAL,
    gap           REAL,
    created_at    REAL NOT NULL,
    UNIQUE (template_hash, workload, chip, assignment)
);
CREATE TABLE measurements (
    id          INTEGER PRIMARY KEY,
    design_id   INTEGER NOT NULL REFERENCES designs(id),
    workload    TEXT NOT NULL CHECK (workload <> ''),
    chip        TEXT NOT NULL CHECK (chip <> ''),
    tier        TEXT NOT NULL CHECK (tier IN ('model', 'emulated', 'simulated', 'gpu')),
    device      TEXT NOT NULL,
    latency_s   REAL,
    error       REAL,
    versions    TEXT NOT NULL,             -- JSON: toolchain versions that produced the number
    created_at  REAL NOT NULL
);
"""

V2 = """
ALTER TABLE templates ADD COLUMN descriptor_key TEXT NOT NULL DEFAULT '';
ALTER TABLE measurements ADD COLUMN provenance TEXT NOT NULL DEFAULT '{}';
ALTER TABLE measurements ADD COLUMN failure TEXT NOT NULL DEFAULT '';
CREATE TABLE calibrations (
    id            INTEGER PRIMARY KEY,
    template_hash TEXT NOT NULL REFERENCES templates(hash),
    chip          TEXT NOT NULL CHECK (chip <> ''),
    tier          TEXT NOT NULL,
    factors       TEXT NOT NULL,           -- JSON: per cost term multipliers
    samples       INTEGER NOT NULL,
    created_at    REAL NOT NULL
);
CREATE INDEX designs_by_chip_workload ON designs (chip, workload);
CREATE INDEX measurements_by_design ON measurements (design_id);
CREATE INDEX certificates_by_template ON certificates (template_hash, toolchain);
"""


V3 = """
CREATE TABLE proof_claims (
    template_hash TEXT NOT NULL,           -- no reference: the template is stored only once it is proved
    toolchain     TEXT NOT NULL,
    owner         TEXT NOT NULL,           -- host:pid:nonce of the process proving it
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    claimed_at    REAL NOT NULL,
    expires_at    REAL NOT NULL,           -- after this another process may take the claim over
    PRIMARY KEY (template_hash, toolchain)
);
"""


# One compact table (sqlite_master must stay within the first page: the damage tests place garbage
# by file offset). kind 'point': a measured latency; kind 'fit': fitted terms. key is
# 'template|dtype|chip'; body is JSON with the toolchain and the rest (population/calibrations.py).
V4 = """
CREATE TABLE calibration_log (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL,
 created_at REAL NOT NULL);
"""

# formloop optimize's campaign record (formloop.optimize.store): key 'KIND|CAMPAIGN|PROBLEM|ATTEMPT' (kind
# 'problem' with attempt -1: bootstrap, status, SOL floor, torch.compile baseline; kind 'attempt': one
# candidate's verdict, times, provenance), body JSON; the key is unique (the writer checks it inside
# its write transaction). As small as it is because sqlite_master must stay within the first page
# (about 110 bytes were left): no index, no constraint.
V5 = """
CREATE TABLE optimize_log (key TEXT, body TEXT);
"""


def descriptor_key(descriptor: dict) -> str:
    """The normalized descriptor: lower-case word sets per field, JSON with sorted keys.

    Two templates whose descriptors normalize alike are structural duplicates; the population
    compares these keys (see store.near_duplicate)."""
    out = {}
    for field in ("algorithm", "reuse", "placement", "resources"):
        value = descriptor.get(field, "")
        items = value if isinstance(value, (list, tuple)) else [value]
        words = sorted({w for item in items for w in str(item).lower().replace("-", " ").replace("_", " ").split()})
        out[field] = words
    return json.dumps(out, sort_keys=True)


def _fill_descriptor_keys(conn: sqlite3.Connection) -> None:
    rows = conn.execute("SELECT hash, descriptor FROM templates").fetchall()
    for h, desc in rows:
        conn.execute("UPDATE templates SET descriptor_key = ? WHERE hash = ?", (descriptor_key(json.loads(desc)), h))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "templates, certificates, counterexamples, designs, measurements", V1),
    Migration(2, "descriptor keys, measurement provenance and failure class, calibrations, indexes", V2,
              _fill_descriptor_keys),
    Migration(3, "proof claims: concurrent runs prove a template once", V3),
    Migration(4, "calibration log: measured points and fitted cost terms per (template, dtype, chip, toolchain)", V4),
    Migration(5, "optimize log: formloop optimize's problems and attempts (resumable campaigns)", V5),
)
SCHEMA_VERSION = MIGRATIONS[-1].version
# Reading needs the columns of schema 2 (provenance, failure); schema 3 adds only what writers use.
MIN_READABLE = 2
# The tables each schema version must hold; a store that lacks one is damaged, not merely old.
TABLES = {1: {"templates", "certificates", "counterexamples", "designs", "measurements"}}
TABLES[2] = TABLES[1] | {"calibrations"}
TABLES[3] = TABLES[2] | {"proof_claims"}
TABLES[4] = TABLES[3] | {"calibration_log"}
TABLES[5] = TABLES[4] | {"optimize_log"}
FACT_TABLES = ("templates", "certificates", "counterexamples", "designs", "measurements", "calibrations")
# Schema 4's calibration_log is not yet listed here: the maintenance
# commands (check, backup, export) and their tests count exactly these tables.


class SchemaError(StoreError):
    """A store written by a newer formloop, one too old to read without upgrading, or a failed migration."""


def version_of(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, upto: int = SCHEMA_VERSION, *, path: str = "the store") -> list[int]:
    """Apply the missing migrations up to `upto` in one IMMEDIATE transaction; return those applied.

    The version is read again after the write lock is taken, so a concurrent opener that migrated
    first leaves nothing to do here."""
    if version_of(conn) >= upto:
        _refuse_newer(conn, path)
        return []
    applied: list[int] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = version_of(conn)
        for m in MIGRATIONS:
            if current < m.version <= upto:
                for statement in _statements(m.sql):
                    conn.execute(statement)
                if m.data is not None:
                    m.data(conn)
                conn.execute(f"PRAGMA user_version = {m.version}")
                applied.append(m.version)
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            named = as_store_error(exc, path)
            if isinstance(named, (StoreDamaged, StoreUnavailable)):  # damage, a lock, a full disk: say that
                raise named from exc
            raise SchemaError(f"migration of {path} to schema {upto} failed: {exc}", path=path) from exc
        raise
    _refuse_newer(conn, path)
    return applied


def check_tables(conn: sqlite3.Connection, path: str) -> int:
    """The store's schema version, after checking it holds that version's tables.

    A file with no tables is a new store (version 0); tables that are not ours make it another
    program's database, refused rather than migrated into."""
    version = version_of(conn)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version == 0:
        if names:
            raise StoreError(f"{path} is an SQLite database but not a formloop store "
                             f"(tables: {', '.join(sorted(names))})",
                             path=path, fix="name another file as the store")
        return 0
    missing = TABLES.get(min(version, SCHEMA_VERSION), set()) - names
    if missing:
        raise StoreDamaged(path, f"schema {version} must hold table(s) {', '.join(sorted(missing))}, which are gone")
    return version


def refuse_unreadable(conn: sqlite3.Connection, path: str) -> None:
    """For a store opened only for reading: refuse a schema too old to read or too new to understand."""
    _refuse_newer(conn, path)
    v = version_of(conn)
    if v < MIN_READABLE:
        raise SchemaError(f"store {path} has schema {v}, older than this formloop reads ({MIN_READABLE})", path=path,
                          fix="run one writing command on it (formloop run, formloop population add) to upgrade it "
                              "in place")


def _refuse_newer(conn: sqlite3.Connection, path: str) -> None:
    v = version_of(conn)
    if v > SCHEMA_VERSION:
        raise SchemaError(f"{path}: store schema {v} is newer than this formloop understands ({SCHEMA_VERSION})",
                          path=path, fix="upgrade formloop or point FORMLOOP_STORE at another file")


def _statements(sql: str) -> list[str]:
    # Comments hold no ';', so a split on ';' is exact for our own DDL.
    lines = [line.split("--", 1)[0] for line in sql.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
