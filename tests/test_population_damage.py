"""Damaged, missing, foreign and read-only stores: each is named (path and what to do), a damaged
store is never written, and a read-only store still serves reads.

'Never written' is checked on the bytes: the file's digest and its directory's listing are the
same before and after every attempt."""
from __future__ import annotations

import os
import shutil
import sqlite3

import pytest

from formloop.errors import FormloopError, InvalidInput
from formloop.population import (Population, SchemaError, StoreDamaged, StoreError, StoreMissing, StoreReadOnly,
                                 StoreUnavailable, migrate)
from formloop.population.maintenance import check_store
from formloop.storefile import StoreBusy, StoreConstraint, as_store_error
from formloop.verify.proofstore import ProofStore
from tests.storecases import CHIP, DAMAGE, GEMM, NOBODY, run_unprivileged, seed_store, shared_dir, snapshot

MODES = ("read", "write")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    path = tmp_path_factory.mktemp("seed") / "population.db"
    return path, seed_store(path)


@pytest.fixture
def store_copy(seeded, tmp_path):
    src, counts = seeded
    dst = tmp_path / "population.db"
    shutil.copy(src, dst)
    return dst, counts


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_store_is_named_and_never_written(store_copy, damage):
    path, _ = store_copy
    DAMAGE[damage](path)
    before = snapshot(path)
    with pytest.raises(StoreDamaged) as caught:
        Population(path, mode="write").close()
    assert caught.value.path == str(path) and "population check" in str(caught.value)
    assert snapshot(path) == before
    # Reading: refused at the header, or (garbage past the header) when a damaged page is read.
    try:
        with Population(path, mode="read") as p:
            p.designs()
            p.measurements()
        survived_read = True
    except StoreDamaged:
        survived_read = False
    assert not survived_read
    assert snapshot(path) == before
    report = check_store(path)
    assert not report.ok and report.problems
    assert snapshot(path) == before


def test_garbage_in_the_middle_is_caught_by_quick_check_not_the_header(store_copy):
    """The case that used to go unnoticed: the header is intact, so only SQLite's check finds it."""
    path, _ = store_copy
    DAMAGE["garbage-middle"](path)
    with pytest.raises(StoreDamaged, match="quick_check"):
        Population(path)
    report = check_store(path)
    assert report.check == "integrity_check" and report.check_findings


def test_missing_store_is_not_created_by_reading(tmp_path):
    path = tmp_path / "nested" / "missing.db"
    with pytest.raises(StoreMissing, match=f"no store at {path}"):
        Population(path, mode="read")
    assert not path.exists() and not path.parent.exists()
    with pytest.raises(StoreMissing):
        check_store(path)
    with Population(path, mode="write") as p:  # writing creates it, whole
        assert p.counts()["templates"] == 0 and p.schema_version >= 3
    assert sorted(os.listdir(path.parent)) == ["missing.db"]  # no temporary file left beside it


@pytest.mark.parametrize("mode", MODES)
def test_directory_as_store_is_named(tmp_path, mode):
    with pytest.raises(StoreUnavailable, match="is a directory"):
        Population(tmp_path, mode=mode)
    with pytest.raises(StoreUnavailable, match="is a directory"):
        check_store(tmp_path)
    assert os.listdir(tmp_path) == []


def test_path_under_a_file_is_named(tmp_path):
    (tmp_path / "plain").write_text("x")
    with pytest.raises(StoreUnavailable, match="is a file, not a directory"):
        Population(tmp_path / "plain" / "p.db")


def test_foreign_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    before = snapshot(path)
    for mode in MODES:
        with pytest.raises(StoreError, match="not a formloop store"):
            Population(path, mode=mode)
    assert snapshot(path) == before


def test_store_missing_a_table_of_its_schema_is_damaged(store_copy):
    path, _ = store_copy
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE calibrations")
    conn.commit()
    conn.close()
    for mode in MODES:
        with pytest.raises(StoreDamaged, match="calibrations"):
            Population(path, mode=mode)


def test_store_opened_for_reading_refuses_every_write(store_copy):
    path, counts = store_copy
    before = snapshot(path)
    with Population(path, mode="read") as p:
        assert p.counts() == counts
        with pytest.raises(StoreReadOnly, match="opened for reading"):
            p.add_design(GEMM.content_hash, workload="gemm fp32 M=1 N=1 K=1", chip=CHIP, assignment={"Tm": 16},
                         predicted=1.0, unit="us", solver="milp")
        with pytest.raises(StoreReadOnly):
            with p.claim_proof(GEMM.content_hash, "tc"):
                pass
    assert snapshot(path)[0] == before[0]


def test_bad_mode_is_named(tmp_path):
    with pytest.raises(InvalidInput, match="store mode"):
        Population(tmp_path / "p.db", mode="append")


def read_then_try_writing(path: str) -> dict:
    out: dict = {}
    with Population(path, mode="read") as p:
        out["counts"] = p.counts()
        out["latencies"] = sorted(m["latency_s"] for m in p.measurements(tier="model"))
        out["templates"] = [r.name for r in p.templates(status="proved")]
        out["opened_as"] = p.opened_as
    try:
        Population(path, mode="write").close()
        out["write"] = "opened"
    except StoreError as exc:
        out["write"] = type(exc).__name__
        out["message"] = str(exc)
    return out


@pytest.mark.parametrize("what", ["file", "directory"])
def test_read_only_store_serves_reads_and_names_writes(seeded, what):
    src, counts = seeded
    root = shared_dir()
    try:
        store_dir = root / "store"
        store_dir.mkdir(mode=0o755)
        path = store_dir / "population.db"
        shutil.copy(src, path)
        if what == "file":
            path.chmod(0o444)
            if os.geteuid() == 0:  # the directory stays writable for the reader, only the file is not
                os.chown(store_dir, NOBODY, NOBODY)
        else:
            path.chmod(0o644)
            if os.geteuid() == 0:
                os.chown(path, NOBODY, NOBODY)
            store_dir.chmod(0o555)
        before = snapshot(path)
        out = run_unprivileged(read_then_try_writing, str(path))
        assert out["counts"] == counts
        assert out["latencies"] == pytest.approx([i * 1e-6 for i in range(counts["designs"])])
        assert out["templates"] == ["gemm-tiling"] and out["opened_as"] == "immutable"
        assert out["write"] == "StoreReadOnly" and str(path) in out["message"]
        assert snapshot(path) == before  # no -wal or -shm left behind by the reader either
    finally:
        for d in (root / "store", root):
            d.chmod(0o755)
        shutil.rmtree(root)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_proof_store_damage_is_named_and_never_written(store_copy, tmp_path, damage):
    path, _ = store_copy
    DAMAGE[damage](path)
    before = snapshot(path)
    with pytest.raises(StoreDamaged, match="proof store only saves time"):
        ProofStore(path)
    assert snapshot(path) == before
    with pytest.raises(StoreUnavailable, match="is a directory"):
        ProofStore(tmp_path)


def test_sqlite_errors_map_to_named_errors(tmp_path):
    """Real sqlite3 errors, produced on purpose, each become one named formloop error."""
    path = tmp_path / "p.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t (x INTEGER NOT NULL)")
    caught = {}
    for name, action in {
        "constraint": lambda: conn.execute("INSERT INTO t VALUES (NULL)"),
        "readonly": lambda: sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True).execute("INSERT INTO t VALUES (1)"),
        "missing-table": lambda: conn.execute("SELECT * FROM gone"),
    }.items():
        with pytest.raises(sqlite3.Error) as exc:
            action()
        caught[name] = as_store_error(exc.value, path)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.Error) as exc:
        other.execute("BEGIN IMMEDIATE")
    caught["busy"] = as_store_error(exc.value, path)
    conn.execute("ROLLBACK")
    assert isinstance(caught["constraint"], StoreConstraint)
    assert isinstance(caught["readonly"], StoreReadOnly)
    assert isinstance(caught["missing-table"], StoreDamaged)
    assert isinstance(caught["busy"], StoreBusy)
    assert all(isinstance(e, FormloopError) and e.path == str(path) for e in caught.values())


def test_store_that_breaks_while_open_stops_writing(store_copy):
    """Damage met by a live Population (a read reaching a garbled page) ends its writing."""
    path, _ = store_copy
    with Population(path) as p:
        p.conn.execute("PRAGMA cache_size = 0")  # re-read pages from the file, not a cache
        DAMAGE["garbage-middle"](path)
        with pytest.raises(StoreDamaged):
            p.measurements()
        before = snapshot(path)
        with pytest.raises(StoreDamaged):
            p.add_design(GEMM.content_hash, workload="gemm fp32 M=1 N=1 K=1", chip=CHIP, assignment={"Tm": 64},
                         predicted=1.0, unit="us", solver="milp")
        assert snapshot(path)[0] == before[0]


def count_designs(path: str) -> dict:
    with Population(path, mode="read") as p:
        return {"designs": p.counts()["designs"], "opened_as": p.opened_as}


def test_reader_sees_a_live_writers_rows_without_checkpointing_them(seeded):
    """Rows a live writer committed sit in PATH-wal; a reader (also one without write access) sees
    them and leaves the main file as it was."""
    src, counts = seeded
    root = shared_dir()
    try:
        path = root / "population.db"
        shutil.copy(src, path)
        with Population(path) as writer:
            for i in range(5):
                writer.add_design(GEMM.content_hash, workload=f"gemm fp32 M={i + 1} N=7 K=7", chip=CHIP,
                                  assignment={"Tm": 16}, predicted=1.0, unit="us", solver="milp")
            main_file = snapshot(path)[0]
            assert os.path.getsize(f"{path}-wal") > 0
            assert count_designs(str(path)) == {"designs": counts["designs"] + 5, "opened_as": "read-only"}
            if os.geteuid() == 0:  # and as a user who may write neither the file nor the directory
                out = run_unprivileged(count_designs, str(path))
                assert out == {"designs": counts["designs"] + 5, "opened_as": "read-only"}
            assert snapshot(path)[0] == main_file
    finally:
        shutil.rmtree(root)


def test_reading_an_older_store_never_migrates_it(tmp_path):
    for version in (1, 2):
        path = tmp_path / f"v{version}.db"
        conn = sqlite3.connect(path, isolation_level=None)
        migrate(conn, upto=version)
        conn.close()
        before = snapshot(path)
        if version == 1:  # lacks the columns reads need: named, with the way to upgrade it
            with pytest.raises(SchemaError, match="writing command"):
                Population(path, mode="read")
        else:
            with Population(path, mode="read") as p:
                assert p.counts()["designs"] == 0 and p.schema_version == 2
        assert snapshot(path) == before
