"""Looking after a population file: an integrity report, a backup, a JSON export.

None of these writes to the store. The report never raises for damage (finding it is its purpose);
the backup refuses a damaged store (a copy of damage is no backup); the export salvages every row
it can read and lists what it could not."""
from __future__ import annotations

import json
import math
import os
import sqlite3
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from formloop.errors import InvalidInput
from formloop.population.claims import stale_claims
from formloop.population.schema import FACT_TABLES, SCHEMA_VERSION, check_tables, version_of
from formloop.storefile import (FileState, StoreDamaged, StoreError, StoreMissing, as_store_error, connect,
                                damage_in_header, inspect, quick_check)

# Columns holding JSON text: the export writes them as JSON values, not as strings of JSON.
JSON_COLUMNS = {"options", "scope", "descriptor", "descriptor_key", "body", "witness", "trace", "assignment",
                "versions", "provenance", "factors"}


@dataclass
class StoreReport:
    """The integrity report of one store file. ok: no problem found (warnings do not count)."""

    path: str
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    check: str = ""                                  # quick_check or integrity_check
    check_findings: list[str] = field(default_factory=list)
    schema_version: int | None = None
    current_schema: int = SCHEMA_VERSION
    counts: dict[str, int] = field(default_factory=dict)
    orphans: dict[str, int] = field(default_factory=dict)  # rows whose referenced row is gone, per table
    unmeasured_designs: int = 0
    stale_claims: list[dict] = field(default_factory=list)
    size_bytes: int = 0
    wal_bytes: int = 0
    page_size: int = 0
    opened_as: str = ""
    seconds: float = 0.0

    def problem(self, text: str) -> None:
        self.problems.append(text)
        self.ok = False

    def as_dict(self) -> dict:
        return asdict(self)


def check_store(path: str | Path, *, full: bool = True) -> StoreReport:
    """Inspect the store at `path` without writing to it; `full` runs integrity_check, else quick_check.

    Raises only when there is no file to inspect (StoreMissing, or StoreUnavailable for a directory)."""
    start = time.perf_counter()
    state = _existing(path)
    rep = StoreReport(str(path), size_bytes=state.size, wal_bytes=state.wal_bytes, page_size=state.page_size)
    damage = damage_in_header(state)
    if damage:
        rep.problem(damage)
        rep.seconds = time.perf_counter() - start
        return rep
    try:
        conn, rep.opened_as = connect(state, for_writing=False, timeout_s=30.0)
    except StoreError as exc:  # connect names every sqlite3 error
        rep.problem(f"cannot be opened for reading: {exc}")
        rep.seconds = time.perf_counter() - start
        return rep
    try:
        _inspect_sql(conn, rep, str(path), full)
    finally:
        conn.close()
    rep.seconds = time.perf_counter() - start
    return rep


def _inspect_sql(conn: sqlite3.Connection, rep: StoreReport, path: str, full: bool) -> None:
    rep.check = "integrity_check" if full else "quick_check"
    rep.check_findings = quick_check(conn, full=full)
    if rep.check_findings:
        rep.problem(f"{rep.check} found: " + "; ".join(rep.check_findings[:5]))
    try:
        rep.schema_version = check_tables(conn, path)
    except StoreError as exc:
        rep.problem(str(exc))
        return
    except sqlite3.Error as exc:
        rep.problem(f"its schema cannot be read: {exc}")
        return
    if rep.schema_version > SCHEMA_VERSION:
        rep.problem(f"schema {rep.schema_version} is newer than this formloop understands ({SCHEMA_VERSION})")
    elif rep.schema_version < SCHEMA_VERSION:
        rep.warnings.append(f"schema {rep.schema_version} is older than {SCHEMA_VERSION}: the next writing command "
                            "upgrades it in place")
    for table in FACT_TABLES:
        try:
            rep.counts[table] = int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        except sqlite3.Error as exc:
            rep.problem(f"table {table} cannot be counted: {exc}")
    try:
        for table, _rowid, parent, _fk in conn.execute("PRAGMA foreign_key_check").fetchall():
            key = f"{table} -> {parent}"
            rep.orphans[key] = rep.orphans.get(key, 0) + 1
        rep.unmeasured_designs = int(conn.execute(
            "SELECT COUNT(*) FROM designs d WHERE NOT EXISTS (SELECT 1 FROM measurements m WHERE m.design_id = d.id)"
        ).fetchone()[0])
        if rep.schema_version >= 3:
            rep.stale_claims = stale_claims(conn)
    except sqlite3.Error as exc:
        rep.problem(f"references cannot be checked: {exc}")
    for key, n in rep.orphans.items():
        rep.problem(f"{n} row(s) of {key.split(' -> ')[0]} refer to {key.split(' -> ')[1]} rows that are gone")
    if rep.unmeasured_designs:
        rep.warnings.append(f"{rep.unmeasured_designs} design(s) have no measurement (stored by add_design alone, "
                            "or by a formloop older than schema 3 that was stopped between design and measurement)")
    if rep.stale_claims:
        rep.warnings.append(f"{len(rep.stale_claims)} proof claim(s) were left by processes that are gone; the next "
                            "run takes them over")


def backup_store(path: str | Path, dest: str | Path) -> dict[str, Any]:
    """Copy the store at `path` to the new file `dest` with SQLite's backup API (a consistent
    snapshot, safe while other processes write), check the copy, and return what was copied."""
    start = time.perf_counter()
    dest = _new_file(dest, "backup destination")
    state = _existing(path)
    damage = damage_in_header(state)
    if damage:
        raise StoreDamaged(path, damage)
    src, _how = connect(state, for_writing=False, timeout_s=30.0)
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        check_tables(src, str(path))
        found = quick_check(src)
        if found:
            raise StoreDamaged(path, "quick_check found: " + "; ".join(found[:3]) + " (a copy would carry the damage; "
                               "`formloop population export` salvages the rows that can be read)")
        copy = sqlite3.connect(tmp)
        try:
            src.backup(copy)
            found = quick_check(copy, full=True)
            counts = {t: int(copy.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in FACT_TABLES}
            version = version_of(copy)
        finally:
            copy.close()
        if found:
            raise StoreDamaged(tmp, "the copy failed integrity_check: " + "; ".join(found[:3]))
        _place(tmp, dest)
    except sqlite3.Error as exc:
        raise as_store_error(exc, path) from exc
    finally:
        src.close()
        tmp.unlink(missing_ok=True)
    return {"source": str(path), "backup": str(dest), "bytes": dest.stat().st_size, "schema_version": version,
            "counts": counts, "integrity_check": "ok", "seconds": time.perf_counter() - start}


def export_store(path: str | Path, dest: str | Path | None = None) -> dict[str, Any]:
    """Every readable row of every table, as JSON-ready data; written to the new file `dest` if given.

    Rows are read one at a time, so a damaged table yields the rows before the damage; `unreadable`
    names each table where reading stopped and why. Non-finite numbers become the strings
    'inf', '-inf' and 'nan' (strict JSON has none)."""
    out_path = None if dest is None else _new_file(dest, "export destination")
    state = _existing(path)
    damage = damage_in_header(state)
    if damage:
        raise StoreDamaged(path, damage)
    conn, _how = connect(state, for_writing=False, timeout_s=30.0)
    try:
        version = check_tables(conn, str(path))
        tables: dict[str, list[dict]] = {}
        unreadable: dict[str, str] = {}
        for table in FACT_TABLES:
            tables[table] = rows = []
            try:
                cur = conn.execute(f"SELECT * FROM {table} ORDER BY rowid")
                cols = [d[0] for d in cur.description]
                for r in cur:
                    rows.append({c: _value(c, v) for c, v in zip(cols, r)})
            except sqlite3.Error as exc:
                unreadable[table] = f"stopped after {len(rows)} row(s): {exc}"
    except sqlite3.Error as exc:
        raise as_store_error(exc, path) from exc
    finally:
        conn.close()
    data = {"format": "formloop population export", "source": str(path), "schema_version": version,
            "exported_at": time.time(), "counts": {t: len(rows) for t, rows in tables.items()},
            "unreadable": unreadable, "tables": tables}
    if out_path is not None:
        tmp = out_path.with_name(f".{out_path.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            tmp.write_text(json.dumps(data, allow_nan=False, indent=1) + "\n")
            _place(tmp, out_path)
        finally:
            tmp.unlink(missing_ok=True)
    return data


def _existing(path: str | Path) -> FileState:
    state = inspect(path)
    if not state.exists:
        raise StoreMissing(path)
    return state


def _new_file(dest: str | Path, field_name: str) -> Path:
    d = Path(dest)
    if d.exists() or d.is_symlink():
        raise InvalidInput(field_name, str(d), "a path where no file exists yet (nothing is overwritten)")
    if not d.parent.is_dir():
        raise InvalidInput(field_name, str(d), "a new file in an existing directory")
    return d


def _place(tmp: Path, dest: Path) -> None:
    """Move a finished file into place without replacing anything that appeared there meanwhile."""
    try:
        os.link(tmp, dest)
    except FileExistsError:
        raise InvalidInput("destination", str(dest),
                           "a path where no file exists yet (one appeared meanwhile)") from None


def _value(column: str, v: Any) -> Any:
    if column in JSON_COLUMNS and isinstance(v, str):
        try:
            return _finite(json.loads(v))
        except ValueError:
            return v
    return _finite(v)


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v
