"""The campaign's record: one SQLite file in the output directory (`optimize.sqlite`), so an
interrupted campaign resumes where it stopped and a second call continues the first.

Per problem: its bootstrap (tier, SOL floor, coverage, the reason it keeps the reference if it
does) and every attempt (candidate file, harness verdict, integrity verdict, times, design,
provenance). A problem's best is its fastest attempt that is correct and integrity-accepted; a
candidate that is not both never counts. WAL journal and one transaction per write: concurrent
writers queue."""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS problems (
    name        TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    level       INTEGER,
    tier        TEXT NOT NULL,
    status      TEXT NOT NULL,          -- ready | reference (kept, with reason) | stopped:<rule>
    reason      TEXT NOT NULL DEFAULT '',
    sol_floor_s REAL,
    sol_note    TEXT NOT NULL DEFAULT '',
    compile_s   REAL,                   -- torch.compile of the reference, same harness (gpu tier only)
    bootstrap   TEXT NOT NULL,          -- JSON: coverage, regions, fallbacks
    updated_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    id          INTEGER PRIMARY KEY,
    problem     TEXT NOT NULL REFERENCES problems(name),
    attempt     INTEGER NOT NULL,
    candidate   TEXT NOT NULL,          -- path of the ModelNew file
    origin      TEXT NOT NULL,          -- formloop | agent
    correct     INTEGER NOT NULL,
    accepted    INTEGER NOT NULL,       -- correct and integrity-accepted
    verdict     TEXT NOT NULL,          -- integrity verdict, or the harness's failure
    time_s      REAL,
    ref_s       REAL,
    time_source TEXT,                   -- gpu | cpu (interpreter)
    sol_fraction REAL,
    detail      TEXT NOT NULL,          -- JSON: design, harness summary, integrity flags
    created_at  REAL NOT NULL,
    UNIQUE (problem, attempt)
);
"""


class OptimizeStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def _tx(self, sql: str, args: tuple) -> int:
        cur = self.db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(sql, args)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return cur.lastrowid

    def put_problem(self, name: str, *, path: str, level: int | None, tier: str, status: str, reason: str = "",
                    sol_floor_s: float | None = None, sol_note: str = "", bootstrap: dict | None = None) -> None:
        self._tx("INSERT OR REPLACE INTO problems (name, path, level, tier, status, reason, sol_floor_s, sol_note, "
                 "compile_s, bootstrap, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                 "(SELECT compile_s FROM problems WHERE name = ?), ?, ?)",
                 (name, path, level, tier, status, reason, sol_floor_s, sol_note, name,
                  json.dumps(bootstrap or {}, default=str), time.time()))

    def set_status(self, name: str, status: str, reason: str = "") -> None:
        self._tx("UPDATE problems SET status = ?, reason = ?, updated_at = ? WHERE name = ?",
                 (status, reason, time.time(), name))

    def set_compile(self, name: str, seconds: float | None) -> None:
        self._tx("UPDATE problems SET compile_s = ? WHERE name = ?", (seconds, name))

    def problem(self, name: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM problems WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        d = dict(row)
        d["bootstrap"] = json.loads(d["bootstrap"])
        return d

    def problems(self) -> list[dict[str, Any]]:
        return [self.problem(r["name"]) for r in self.db.execute("SELECT name FROM problems ORDER BY name")]

    def add_attempt(self, problem: str, *, candidate: str, origin: str, correct: bool, accepted: bool,
                    verdict: str, time_s: float | None, ref_s: float | None, time_source: str | None,
                    sol_fraction: float | None, detail: dict, attempt: int | None = None) -> int:
        if attempt is None:
            attempt = self.next_attempt(problem)
        return self._tx("INSERT INTO attempts (problem, attempt, candidate, origin, correct, accepted, verdict, "
                        "time_s, ref_s, time_source, sol_fraction, detail, created_at) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (problem, attempt, candidate, origin, int(correct), int(accepted), verdict, time_s, ref_s,
                         time_source, sol_fraction, json.dumps(detail, default=str), time.time()))

    def next_attempt(self, problem: str) -> int:
        row = self.db.execute("SELECT MAX(attempt) FROM attempts WHERE problem = ?", (problem,)).fetchone()
        return 0 if row[0] is None else row[0] + 1

    def attempts(self, problem: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM attempts WHERE problem = ? ORDER BY attempt", (problem,)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["detail"] = json.loads(d["detail"])
            out.append(d)
        return out

    def best(self, problem: str) -> dict[str, Any] | None:
        """The fastest correct, integrity-accepted attempt (None if there is none)."""
        ok = [a for a in self.attempts(problem) if a["accepted"] and a["time_s"] is not None]
        return min(ok, key=lambda a: a["time_s"]) if ok else None
