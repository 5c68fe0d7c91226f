"""Opening a population file for reading or for writing.

Writing: a missing store is created whole (built under a temporary name, migrated, then linked into
place, so no other process ever sees a half-made file); an existing one must pass the header
checks, hold its schema's tables and pass `PRAGMA quick_check` before anything is written to it.
Reading: the store must exist and pass the header and table checks; nothing is created, migrated or
written (see formloop.storefile.connect). The path ':memory:' is SQLite's private in-memory store (an
empty store for a reader whose file does not exist): no file is made."""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from formloop.errors import InvalidInput
from formloop.population.schema import check_tables, migrate, refuse_unreadable
from formloop.storefile import (StoreDamaged, StoreMissing, StoreReadOnly, as_store_error, connect, create_whole,
                                damage_in_header, inspect, quick_check)

MODES = ("read", "write")
IN_MEMORY = ":memory:"


@dataclass
class Opened:
    conn: sqlite3.Connection
    migrated: list[int]
    how: str  # read-write, read-only or immutable


def open_store(path: Path, *, mode: str, timeout_ms: int) -> Opened:
    """A checked connection to the store at `path` in `mode` ('read' or 'write')."""
    if mode not in MODES:
        raise InvalidInput("store mode", mode, MODES)
    try:
        return _open(path, mode, timeout_ms)
    except (sqlite3.Error, OSError) as exc:
        raise as_store_error(exc, path) from exc


def _open(path: Path, mode: str, timeout_ms: int) -> Opened:
    if str(path) == IN_MEMORY:
        conn = sqlite3.connect(IN_MEMORY)
        conn.execute("PRAGMA foreign_keys = ON")
        return Opened(conn, migrate(conn, path=IN_MEMORY), "in-memory")
    writing = mode == "write"
    state = inspect(path)
    created: list[int] = []
    if not state.exists:
        if not writing:
            raise StoreMissing(path)
        if not state.dir_writable:
            raise StoreReadOnly(path, f"its directory {path.parent} cannot be written, so the store cannot be made")
        created = create_whole(path, _new_store(path), timeout_s=timeout_ms / 1000) or []
        state = inspect(path)
    damage = damage_in_header(state)
    if damage:
        raise StoreDamaged(path, damage)
    if writing and not state.file_writable:
        raise StoreReadOnly(path, "the file is not writable by this user")
    if writing and not state.dir_writable:
        raise StoreReadOnly(path, f"its directory {path.parent} is not writable (SQLite keeps its journal there)")
    conn, how = connect(state, for_writing=writing, timeout_s=timeout_ms / 1000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
        check_tables(conn, str(path))
        if not writing:
            refuse_unreadable(conn, str(path))
            return Opened(conn, [], how)
        problems = quick_check(conn)
        if problems:
            raise StoreDamaged(path, "SQLite's quick_check found: " + "; ".join(problems[:3]))
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrated = migrate(conn, path=str(path))
    except BaseException:
        conn.close()
        raise
    return Opened(conn, created or migrated, how)


def _new_store(path: Path):
    def build(conn: sqlite3.Connection) -> list[int]:
        conn.execute("PRAGMA journal_mode = WAL")
        return migrate(conn, path=str(path))
    return build
