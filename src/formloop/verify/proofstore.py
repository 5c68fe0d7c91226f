"""Persistent store of proof-graph nodes, checked results and stored UNSAT queries (SQLite).

Two reuse levels read from it. Node reuse looks a proof node up by its content key (which already
hashes its statement, premises, solver and checker version). Query reuse looks a solver query up by
the hash of its normalized SMT-LIB text plus the solver context and the checker version, and only
UNSAT answers are ever stored there. Only `proved` results are handed back for reuse: a stored
counterexample or unresolved result is kept for the record and never returned as a proof.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable

import z3
from pathlib import Path

from formloop.errors import InvalidInput
from formloop.storefile import StoreDamaged, StoreReadOnly, create_whole, damage_in_header, inspect, mapped_errors, \
    maps_errors, quick_check
from formloop.verify.outcome import ObligationResult, Verdict

DEFAULT_PROOF_STORE = Path(".formloop") / "proofs.sqlite"
SCHEMA_VERSION = 1
CACHE_FIX = "the proof store only saves time: move it aside (or delete it) and the proofs are redone"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
    key TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL,
    premises TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS proofs (
    key TEXT PRIMARY KEY, name TEXT NOT NULL, verdict TEXT NOT NULL, seconds REAL NOT NULL,
    solver TEXT NOT NULL, checker TEXT NOT NULL, result TEXT NOT NULL, stored_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS queries (
    key TEXT PRIMARY KEY, verdict TEXT NOT NULL CHECK (verdict = 'unsat'), solver TEXT NOT NULL,
    checker TEXT NOT NULL, seconds REAL NOT NULL, stored_at REAL NOT NULL);
"""

def normalized_query(assertions) -> str:
    """Normalized text of a Z3 query: its declarations (sorted) and, per assertion in order, a
    structural digest of the let-free SMT-LIB term. Z3's own printer introduces let names that
    depend on internal AST ids, so two processes print one query differently; the digest is taken
    over the term tree (operator, sort and children's digests), which is what the query means."""
    memo: dict[int, str] = {}
    decls: set[str] = set()

    def digest(e) -> str:
        key = e.get_id()
        d = memo.get(key)
        if d is None:
            kids = e.children() if not z3.is_quantifier(e) else [e.body()]
            if not kids and z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
                decls.add(f"(declare-fun {e.decl().name()} () {e.sort().sexpr()})")
            if not kids:
                head = e.sexpr()
            else:
                head = e.decl().sexpr() if not z3.is_quantifier(e) else "quantifier " + e.sexpr()
            h = hashlib.blake2b(digest_size=16)
            h.update(head.encode())
            h.update(e.sort().sexpr().encode())
            for k in kids:
                h.update(digest(k).encode())
            d = h.hexdigest()
            memo[key] = d
        return d

    asserted = [f"(assert #{digest(a)})" for a in assertions]
    return " ".join(sorted(decls) + asserted)


def query_key(normalized: str, solver_context: str, checker_version: str) -> str:
    h = hashlib.sha256()
    for part in (normalized, solver_context, checker_version):
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


class ProofStore:
    """SQLite file (or ':memory:') holding nodes, proof results and UNSAT queries.

    Writes are batched in one transaction per run; call `commit()` (the checker does) to persist.
    A file that fails the header checks or quick_check is refused (StoreDamaged) and never written;
    every sqlite3 error becomes a named formloop.storefile error."""

    def __init__(self, path: str | Path | None = None):
        self.path = DEFAULT_PROOF_STORE if path is None else path
        with mapped_errors(self.path):
            self._open()

    def _open(self) -> None:
        if str(self.path) != ":memory:":
            state = inspect(self.path)  # a directory is refused here
            if not state.dir_writable or (state.exists and not state.file_writable):
                raise StoreReadOnly(self.path, "the file or its directory is not writable")
            if not state.exists:  # made whole under another name, so an empty file is always damage
                create_whole(Path(self.path), lambda db: db.executescript(_SCHEMA), timeout_s=30.0)
                state = inspect(self.path)
            damage = damage_in_header(state)
            if damage:
                raise StoreDamaged(self.path, damage, fix=CACHE_FIX)
        self.db = sqlite3.connect(str(self.path), timeout=30.0)
        found = quick_check(self.db)
        if found:
            self.db.close()
            raise StoreDamaged(self.path, "quick_check found: " + "; ".join(found[:3]), fix=CACHE_FIX)
        self.db.executescript(_SCHEMA)
        row = self.db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if row is None:
            self.db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise InvalidInput("proof store schema", row[0], [SCHEMA_VERSION],
                               fix=f"use a fresh file instead of {self.path}")
        self.db.commit()

    # -- proof nodes ------------------------------------------------------------------------
    @maps_errors
    def proved(self, key: str) -> ObligationResult | None:
        """The stored result for `key` if and only if it is a proof."""
        row = self.db.execute("SELECT verdict, result FROM proofs WHERE key = ?", (key,)).fetchone()
        if row is None or row[0] != Verdict.PROVED.value:
            return None
        return _result_from_json(row[1])

    @maps_errors
    def result(self, key: str) -> ObligationResult | None:
        """The stored result for `key`, whatever its verdict (for inspection, never for reuse)."""
        row = self.db.execute("SELECT result FROM proofs WHERE key = ?", (key,)).fetchone()
        return None if row is None else _result_from_json(row[0])

    @maps_errors
    def put_result(self, key: str, name: str, result: ObligationResult, checker: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO proofs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key, name, result.verdict.value, result.seconds, result.solver, checker,
             json.dumps(result.as_dict(), default=str), time.time()))

    @maps_errors
    def put_nodes(self, rows: Iterable[tuple[str, str, str, str, tuple[str, ...]]]) -> None:
        """(key, name, kind, text, premise keys) per node; content-addressed, so re-puts are no-ops."""
        self.db.executemany("INSERT OR IGNORE INTO nodes VALUES (?, ?, ?, ?, ?)",
                            [(k, n, kind, text, json.dumps(list(p))) for k, n, kind, text, p in rows])

    # -- queries ----------------------------------------------------------------------------
    @maps_errors
    def has_unsat(self, key: str) -> bool:
        return self.db.execute("SELECT 1 FROM queries WHERE key = ?", (key,)).fetchone() is not None

    @maps_errors
    def put_unsat(self, key: str, solver: str, checker: str, seconds: float) -> None:
        self.db.execute("INSERT OR IGNORE INTO queries VALUES (?, 'unsat', ?, ?, ?, ?)",
                        (key, solver, checker, seconds, time.time()))

    # -- housekeeping -----------------------------------------------------------------------
    @maps_errors
    def counts(self) -> dict[str, int]:
        return {t: self.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("nodes", "proofs", "queries")}

    @maps_errors
    def commit(self) -> None:
        self.db.commit()

    @maps_errors
    def close(self) -> None:
        self.db.commit()
        self.db.close()

    def __enter__(self) -> "ProofStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _result_from_json(text: str) -> ObligationResult:
    d = json.loads(text)
    d["verdict"] = Verdict(d["verdict"])
    d["trace"] = tuple(d.get("trace", ()))
    return ObligationResult(**d)
