"""The campaign's record, kept in the population store (schema 5's `optimize_log`, formloop.population;
keys 'KIND|CAMPAIGN|PROBLEM|ATTEMPT', JSON bodies):
the default store is the population of the settings (FORMLOOP_STORE, `.formloop/population.db`),
`--store PATH` names another. An interrupted campaign resumes where it stopped and a second call
with the same store continues the first (finished attempts are not run again).

A store holds any number of campaigns; `campaign` names one (the dtype variant and the sizes, e.g.
`fp32/full`, `bf16/small`): its problems and attempts are its own. Per problem: its bootstrap
(tier, SOL floor, coverage, the reason it keeps the reference if it does, the torch.compile
baseline) and every attempt (candidate file, harness verdict, integrity verdict, times, phase times,
design, provenance). A problem's best is its fastest attempt that is correct and integrity-accepted;
a candidate that is not both never counts. One `BEGIN IMMEDIATE` transaction per write: concurrent
writers queue."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from formloop.population.opening import open_store
from formloop.settings import load_settings

PROBLEM_FIELDS = ("path", "level", "tier", "status", "reason", "sol_floor_s", "sol_note", "compile_s", "compile",
                  "bootstrap")
ATTEMPT_FIELDS = ("candidate", "origin", "correct", "accepted", "verdict", "time_s", "ref_s", "time_source",
                  "sol_fraction", "detail")


def default_store() -> Path:
    """The population store of the settings (FORMLOOP_STORE or .formloop/population.db)."""
    return load_settings().store_path


def campaign_key(dtype: str = "fp32", small: bool = False) -> str:
    return f"{dtype}/{'small' if small else 'full'}"


class OptimizeStore:
    """One campaign (`campaign`) in the population store at `path` (opened for writing, or for
    reading with mode='read')."""

    def __init__(self, path: str | Path | None = None, campaign: str = "fp32/full", *, mode: str = "write"):
        settings = load_settings()
        self.path = Path(path) if path is not None else settings.store_path
        self.campaign = campaign
        if mode == "write":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = open_store(self.path, mode=mode, timeout_ms=max(settings.busy_timeout_ms, 30000)).conn
        # a store of schema < 5 opened for reading has no campaign yet (writing migrates it)
        self.blank = self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'optimize_log'").fetchone() is None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "OptimizeStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _tx(self, fn) -> Any:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(self.db)
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        return out

    def _key(self, kind: str, problem: str, attempt: int) -> str:
        return f"{kind}|{self.campaign}|{problem}|{attempt}"

    def _get(self, conn, kind: str, problem: str, attempt: int) -> tuple[int, dict] | None:
        if self.blank:
            return None
        row = conn.execute("SELECT rowid, body FROM optimize_log WHERE key = ?",
                           (self._key(kind, problem, attempt),)).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def _rows(self, conn, kind: str, problem: str | None = None) -> list[tuple[int, str, int, dict]]:
        """(rowid, problem, attempt, body) of this campaign's `kind` rows (of `problem`, if given)."""
        if self.blank:
            return []
        head = f"{kind}|{self.campaign}|" + ("" if problem is None else f"{problem}|")
        rows = conn.execute("SELECT rowid, key, body FROM optimize_log WHERE substr(key, 1, ?) = ?",
                            (len(head), head)).fetchall()
        out = []
        for rowid, key, body in rows:
            name, number = key[len(f"{kind}|{self.campaign}|"):].rsplit("|", 1)
            out.append((rowid, name, int(number), json.loads(body)))
        return sorted(out, key=lambda r: (r[1], r[2]))

    def _put(self, conn, kind: str, problem: str, attempt: int, body: dict) -> int:
        key = self._key(kind, problem, attempt)
        text = json.dumps(body, default=str)
        got = conn.execute("SELECT rowid FROM optimize_log WHERE key = ?", (key,)).fetchone()
        if got is not None:
            conn.execute("UPDATE optimize_log SET body = ? WHERE rowid = ?", (text, got[0]))
            return got[0]
        return conn.execute("INSERT INTO optimize_log (key, body) VALUES (?, ?)", (key, text)).lastrowid

    def _update_problem(self, name: str, change: dict) -> None:
        def write(conn):
            got = self._get(conn, "problem", name, -1)
            if got is None:
                raise KeyError(f"problem {name} is not in campaign {self.campaign}")
            body = {**got[1], **change, "updated_at": time.time()}
            self._put(conn, "problem", name, -1, body)
        self._tx(write)

    def put_problem(self, name: str, *, path: str, level: int | None, tier: str, status: str, reason: str = "",
                    sol_floor_s: float | None = None, sol_note: str = "", bootstrap: dict | None = None) -> None:
        """Record a problem's bootstrap (a torch.compile baseline already stored is kept)."""
        def write(conn):
            got = self._get(conn, "problem", name, -1)
            body = {"path": path, "level": level, "tier": tier, "status": status, "reason": reason,
                    "sol_floor_s": sol_floor_s, "sol_note": sol_note,
                    "compile_s": got[1].get("compile_s") if got else None,
                    "compile": got[1].get("compile") if got else None, "bootstrap": bootstrap or {},
                    "updated_at": time.time()}
            self._put(conn, "problem", name, -1, body)
        self._tx(write)

    def set_status(self, name: str, status: str, reason: str = "") -> None:
        self._update_problem(name, {"status": status, "reason": reason})

    def set_compile(self, name: str, seconds: float | None, detail: dict | None = None) -> None:
        """torch.compile's time (0.0: no baseline could be had) and the run's account (`detail`:
        eager's time of the same run `ref_s`, the time source, the warm-up, a note)."""
        self._update_problem(name, {"compile_s": seconds, "compile": detail})

    def problem(self, name: str) -> dict[str, Any] | None:
        got = self._get(self.db, "problem", name, -1)
        return None if got is None else {"name": name, **got[1]}

    def problems(self) -> list[dict[str, Any]]:
        return [{"name": name, **body} for _, name, _, body in self._rows(self.db, "problem")]

    def add_attempt(self, problem: str, *, candidate: str, origin: str, correct: bool, accepted: bool,
                    verdict: str, time_s: float | None, ref_s: float | None, time_source: str | None,
                    sol_fraction: float | None, detail: dict, attempt: int | None = None) -> int:
        body = {"candidate": candidate, "origin": origin, "correct": bool(correct), "accepted": bool(accepted),
                "verdict": verdict, "time_s": time_s, "ref_s": ref_s, "time_source": time_source,
                "sol_fraction": sol_fraction, "detail": detail, "created_at": time.time()}

        def write(conn):
            number = self._next(conn, problem) if attempt is None else attempt
            if self._get(conn, "attempt", problem, number) is not None:
                raise ValueError(f"attempt {number} of {problem} is already recorded in campaign {self.campaign}")
            return self._put(conn, "attempt", problem, number, body)
        return self._tx(write)

    def _next(self, conn, problem: str) -> int:
        numbers = [r[2] for r in self._rows(conn, "attempt", problem) if r[1] == problem]
        return max(numbers) + 1 if numbers else 0

    def next_attempt(self, problem: str) -> int:
        return self._next(self.db, problem)

    def attempts(self, problem: str) -> list[dict[str, Any]]:
        return [{"id": rowid, "problem": name, "attempt": number, **body}
                for rowid, name, number, body in self._rows(self.db, "attempt", problem) if name == problem]

    def retire_attempts(self, problem: str, reason: str) -> int:
        """Set `problem`'s attempts aside (kept under 'retired' with `reason`, no longer counted) and make it
        ready again: after its kernels changed, it starts over from attempt 0 (the MILP's design). Returns
        how many were retired."""
        if self.problem(problem) is None:
            raise KeyError(f"problem {problem} is not in campaign {self.campaign}")

        def write(conn):
            rows = [r for r in self._rows(conn, "attempt", problem) if r[1] == problem]
            base = max((r[2] for r in self._rows(conn, "retired", problem) if r[1] == problem), default=-1) + 1
            for i, (rowid, _, number, body) in enumerate(rows):
                self._put(conn, "retired", problem, base + i, {**body, "attempt": number, "retired_for": reason,
                                                                "retired_at": time.time()})
                conn.execute("DELETE FROM optimize_log WHERE rowid = ?", (rowid,))
            return len(rows)
        n = self._tx(write)
        self.set_status(problem, "ready", "")
        return n

    def retired(self, problem: str) -> list[dict[str, Any]]:
        """`problem`'s retired attempts (retire_attempts), oldest first."""
        return [{"id": rowid, "problem": name, **body}
                for rowid, name, _, body in self._rows(self.db, "retired", problem) if name == problem]

    def best(self, problem: str) -> dict[str, Any] | None:
        """The fastest correct, integrity-accepted attempt (None if there is none)."""
        ok = [a for a in self.attempts(problem) if a["accepted"] and a["time_s"] is not None]
        return min(ok, key=lambda a: a["time_s"]) if ok else None
