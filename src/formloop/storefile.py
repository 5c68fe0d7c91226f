"""SQLite store files: what may be opened, how, and what a failure is called.

Shared by the population and the verifier's proof store. Four rules live here:
  * a file is inspected before SQLite touches it (a directory, a missing file, an empty file, a
    header that is not SQLite's, a file shorter than its header says) and refused with a named error;
  * a store is opened for reading without writing to it (see `connect` for how: query-only,
    `mode=ro`, or `immutable=1` where SQLite cannot create its WAL index);
  * a new store is made whole under a temporary name and linked into place (`create_whole`), so
    an empty file is always damage, never a store being born;
  * every sqlite3 error becomes one `StoreError` subclass that names the path and what to do.

Why a header check at all: SQLite reads lazily, so a truncated or garbled file is noticed only when
a damaged page is reached, which may be after rows were written elsewhere in the file."""
from __future__ import annotations

import functools
import os
import sqlite3
import struct
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from formloop.errors import FormloopError

T = TypeVar("T")
MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100


class StoreError(FormloopError, RuntimeError):
    """A store file that cannot be used as asked; `path` names it, the message says what to do."""

    def __init__(self, message: str, *, path: str | Path | None = None, fix: str | None = None):
        self.path = None if path is None else str(path)
        super().__init__(message, fix=fix)


class StoreMissing(StoreError):
    """A reading command named a store that does not exist (reading never creates one)."""

    def __init__(self, path: str | Path):
        super().__init__(f"no store at {path}", path=path,
                         fix="reading commands never create a store; a writing command (formloop run, "
                             "formloop population add) creates it, or name an existing store with --store or "
                             "FORMLOOP_STORE")


class StoreUnavailable(StoreError):
    """The store cannot be opened or used: a directory, an I/O error, a full disk, a foreign database."""

    def __init__(self, path: str | Path, reason: str, *, fix: str | None = None):
        self.reason = reason
        super().__init__(f"store {path} cannot be used: {reason}", path=path, fix=fix)


class StoreReadOnly(StoreUnavailable):
    """A writing command on a store this process may not write (file or directory not writable)."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(path, f"it is read-only ({reason})",
                         fix="reading commands still work; to write, give this user write access to the file "
                             "and its directory, or copy the store to a writable place")


class StoreBusy(StoreUnavailable):
    """Another process held the store's write lock for longer than the busy timeout."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(path, f"it stayed locked by another process ({reason})",
                         fix="retry when the other run finishes, or raise FORMLOOP_BUSY_TIMEOUT_MS")


class StoreDamaged(StoreError):
    """The file is not an intact store: truncated, garbled, empty, or failing SQLite's own checks.
    A damaged store is never written."""

    def __init__(self, path: str | Path, reason: str, *, fix: str | None = None):
        self.reason = reason
        super().__init__(f"store {path} is damaged: {reason}; formloop does not write to a damaged store",
                         path=path,
                         fix=fix or f"run `formloop population check --store {path}` for a report, then restore it "
                                    "from a backup (`formloop population backup` makes one) or move it aside to start "
                                    "a new store")


class StoreConstraint(StoreError):
    """The store refused a row that breaks one of its constraints (a caller's mistake, not damage)."""


@dataclass(frozen=True)
class FileState:
    """What the file system says about a store path, before SQLite opens it."""

    path: Path
    exists: bool
    size: int = 0
    page_size: int = 0
    header_pages: int = 0      # the in-header database size, 0 when the header does not vouch for it
    wal_bytes: int = 0         # size of PATH-wal: committed pages the main file does not hold yet
    file_writable: bool = False
    dir_writable: bool = False

    @property
    def writable(self) -> bool:
        return self.file_writable and self.dir_writable


def inspect(path: str | Path) -> FileState:
    """The file's state; a directory, or a path whose parent is a file, is refused here."""
    p = Path(path)
    if p.is_dir():
        raise StoreUnavailable(p, "it is a directory, not a file", fix=f"name a file, e.g. {p / 'population.db'}")
    ancestor = _nearest_existing(p.parent)
    if not ancestor.is_dir():
        raise StoreUnavailable(p, f"{ancestor} is a file, not a directory")
    dir_writable = os.access(ancestor, os.W_OK | os.X_OK)
    if not p.exists():
        return FileState(p, False, dir_writable=dir_writable)
    if not p.is_file():
        raise StoreUnavailable(p, "it is not a regular file")
    size = p.stat().st_size
    wal = Path(f"{p}-wal")
    wal_bytes = wal.stat().st_size if wal.is_file() else 0
    page_size = header_pages = 0
    if size >= HEADER_BYTES:
        try:
            with open(p, "rb") as f:
                head = f.read(HEADER_BYTES)
        except OSError as exc:
            raise StoreUnavailable(p, f"it cannot be read ({exc.strerror or exc})") from None
        if head[:16] == MAGIC:
            raw = struct.unpack(">H", head[16:18])[0]
            page_size = 65536 if raw == 1 else raw
            counter, pages = struct.unpack(">II", head[24:32])
            (valid_for,) = struct.unpack(">I", head[92:96])
            header_pages = pages if counter == valid_for else 0
    return FileState(p, True, size, page_size, header_pages, wal_bytes, os.access(p, os.W_OK), dir_writable)


def damage_in_header(state: FileState) -> str:
    """Why the file cannot be an intact SQLite database ('' when the cheap checks pass)."""
    if not state.exists:
        return ""
    if state.size == 0:
        return "the file is empty (0 bytes), so it holds no store"
    if state.size < HEADER_BYTES:
        return f"the file is {state.size} bytes, shorter than SQLite's {HEADER_BYTES}-byte header"
    if state.page_size == 0:
        return "its header is not SQLite's ('SQLite format 3'): it is not a database, or its first page was overwritten"
    if state.page_size < 512 or state.page_size & (state.page_size - 1):
        return f"its header names a page size of {state.page_size} bytes, which SQLite never writes"
    if state.size % state.page_size:
        return (f"the file is {state.size} bytes, not a whole number of {state.page_size}-byte pages "
                "(truncated or appended to)")
    # Pages not yet checkpointed live in PATH-wal; only without one must the file hold every page.
    if state.wal_bytes == 0 and state.header_pages * state.page_size > state.size:
        return (f"its header counts {state.header_pages} pages ({state.header_pages * state.page_size} bytes) but the "
                f"file holds {state.size} bytes: it was truncated")
    return ""


def connect(state: FileState, *, for_writing: bool, timeout_s: float) -> tuple[sqlite3.Connection, str]:
    """A connection in autocommit mode and how it was opened: 'read-write', or for reading
    'query-only', 'read-only' or 'immutable'.

    Reading a WAL store needs PATH-shm. Where this user may write the file and its directory and
    PATH-wal holds no pages, an ordinary connection with `query_only` reads it and, closing last,
    removes the PATH-wal and PATH-shm it made (a `mode=ro` connection would leave them behind).
    A WAL with pages in it is read with `mode=ro`, which never checkpoints them into the file.
    `immutable` is the last resort, where SQLite cannot make PATH-shm; it does not see PATH-wal."""
    with mapped_errors(state.path):
        return _connect(state, for_writing, timeout_s)


def _connect(state: FileState, for_writing: bool, timeout_s: float) -> tuple[sqlite3.Connection, str]:
    if for_writing:
        conn = sqlite3.connect(state.path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        return conn, "read-write"
    if state.writable and state.wal_bytes == 0:
        conn = sqlite3.connect(state.path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
        return conn, "query-only"
    uri = state.path.resolve().as_uri()
    kinds = ["mode=ro"] if state.writable else (["mode=ro", "mode=ro&immutable=1"] if state.wal_bytes
                                                   else ["mode=ro&immutable=1"])
    last: sqlite3.Error | None = None
    for query in kinds:
        conn = sqlite3.connect(f"{uri}?{query}", uri=True, timeout=timeout_s, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:  # the WAL index could not be opened here: try the next way
            conn.close()
            last = exc
            continue
        except BaseException:
            conn.close()
            raise
        return conn, "immutable" if "immutable" in query else "read-only"
    assert last is not None
    raise last


def create_whole(path: Path, build: Callable[[sqlite3.Connection], T], *, timeout_s: float) -> T | None:
    """Make a new store at `path`: `build` fills a file under a temporary name, which is then linked
    into place, so no process ever sees a half-made store (an empty file is therefore damage, never
    a store being born). Returns what `build` returned, or None if another process made it first
    (its file is kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        conn = sqlite3.connect(tmp, timeout=timeout_s, isolation_level=None)
        try:
            made = build(conn)
        finally:
            conn.close()  # the last connection checkpoints and removes tmp-wal and tmp-shm
        try:
            os.link(tmp, path)  # fails if the path exists: never replaces another opener's store
        except FileExistsError:
            return None
        except OSError:  # a file system without hard links: a rename, which loses only a rare race
            if path.exists():
                return None
            os.replace(tmp, path)
        return made
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
            leftover.unlink(missing_ok=True)


def quick_check(conn: sqlite3.Connection, *, full: bool = False, limit: int = 20) -> list[str]:
    """SQLite's own structural check: [] when it passes, else what it found (at most `limit` lines).
    `full` runs integrity_check (also compares every index with its table)."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}({int(limit)})").fetchall()]
    except sqlite3.DatabaseError as exc:  # the check stops at a page it cannot even parse
        return [str(exc)]
    return [] if rows == ["ok"] else rows


def as_store_error(exc: BaseException, path: str | Path) -> StoreError:
    """The named error for an sqlite3 (or OS) error met while using the store at `path`."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, OSError):
        if isinstance(exc, PermissionError):
            return StoreReadOnly(path, exc.strerror or str(exc))
        return StoreUnavailable(path, exc.strerror or str(exc))
    code = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        return StoreDamaged(path, f"SQLite reports '{text}'")
    if code.startswith("SQLITE_READONLY") or "readonly" in text:
        return StoreReadOnly(path, f"SQLite reports '{text}'")
    if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return StoreBusy(path, f"SQLite reports '{text}'")
    if code.startswith("SQLITE_CONSTRAINT") or isinstance(exc, sqlite3.IntegrityError):
        return StoreConstraint(f"store {path} refused a row: {text}", path=path,
                               fix="store the row it refers to first (a template before its designs, a design "
                                   "before its measurements)")
    if "no such table" in text or "no such column" in text:
        return StoreDamaged(path, f"its schema lacks what this formloop reads ('{text}')")
    if code.startswith(("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_NOLFS")):
        return StoreUnavailable(path, f"SQLite reports '{text}'",
                                fix="check the disk (space, permissions, a mounted file system) and retry")
    return StoreError(f"store {path}: SQLite reports '{text}'", path=path)


@contextmanager
def mapped_errors(path: str | Path) -> Iterator[None]:
    """Run a block with every sqlite3 and OS error turned into the store's named error."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise as_store_error(exc, path) from exc


def maps_errors(method: Callable) -> Callable:
    """Decorate a method of an object with a `path`: its sqlite3 errors become named store errors."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with mapped_errors(self.path):
            return method(self, *args, **kwargs)
    return wrapper


def _nearest_existing(d: Path) -> Path:
    # A missing directory is created by a writing open: what counts is the nearest existing ancestor.
    while not d.exists() and d != d.parent:
        d = d.parent
    return d


__all__ = ["FileState", "StoreBusy", "StoreConstraint", "StoreDamaged", "StoreError", "StoreMissing", "StoreReadOnly",
           "StoreUnavailable", "as_store_error", "connect", "create_whole", "damage_in_header", "inspect",
           "mapped_errors", "maps_errors", "quick_check"]
