"""The integrity report, the backup and the JSON export, each checked against rows read with plain
sqlite3 (not through the code under test)."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading

import pytest

from formloop.errors import InvalidInput
from formloop.population import MeasurementFact, Population, StoreDamaged, StoreMissing
from formloop.population.maintenance import backup_store, check_store, export_store
from formloop.population.schema import FACT_TABLES, SCHEMA_VERSION
from tests.storecases import CHIP, DAMAGE, GEMM, seed_store, snapshot


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    path = tmp_path_factory.mktemp("seed") / "population.db"
    return path, seed_store(path, designs=120)


@pytest.fixture
def store_copy(seeded, tmp_path):
    src, counts = seeded
    dst = tmp_path / "population.db"
    shutil.copy(src, dst)
    return dst, counts


def raw_rows(path, table: str) -> list[tuple]:
    conn = sqlite3.connect(path)  # a plain connection: closing last, it removes the -wal and -shm it made
    try:
        return conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    finally:
        conn.close()


def test_report_on_a_healthy_store(store_copy):
    path, counts = store_copy
    with Population(path) as p:  # one design stored without a measurement: a warning, not a problem
        p.add_design(GEMM.content_hash, workload="gemm fp32 M=9 N=9 K=9", chip=CHIP, assignment={"Tm": 32},
                     predicted=1.0, unit="us", solver="milp")
    before = snapshot(path)
    rep = check_store(path)
    assert rep.ok and rep.problems == [] and rep.check_findings == []
    assert rep.counts == {**counts, "designs": counts["designs"] + 1}
    assert rep.counts == {t: len(raw_rows(path, t)) for t in FACT_TABLES}
    assert rep.schema_version == SCHEMA_VERSION and rep.orphans == {} and rep.unmeasured_designs == 1
    assert any("no measurement" in w for w in rep.warnings)
    assert json.loads(json.dumps(rep.as_dict()))["counts"] == rep.counts
    assert snapshot(path) == before


def test_report_names_orphans_and_stale_claims(store_copy):
    path, _ = store_copy
    conn = sqlite3.connect(path)  # foreign keys are off by default in plain sqlite3: orphans can be made
    conn.execute("INSERT INTO measurements (design_id, workload, chip, tier, device, latency_s, versions, created_at) "
                 "VALUES (99999, 'w', 'c', 'model', 'cpu', 1.0, '{}', 0)")
    conn.execute("INSERT INTO proof_claims VALUES ('abc', 'tc', 'gone:1:x', 'gone-host', 1, 0, 0)")
    conn.commit()
    conn.close()
    rep = check_store(path, full=False)
    assert not rep.ok and rep.check == "quick_check"
    assert rep.orphans == {"measurements -> designs": 1}
    assert [c["owner"] for c in rep.stale_claims] == ["gone:1:x"]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_report_names_each_damage(store_copy, damage):
    path, _ = store_copy
    DAMAGE[damage](path)
    before = snapshot(path)
    rep = check_store(path)
    assert not rep.ok and rep.problems
    assert snapshot(path) == before


def test_backup_is_a_checked_copy(store_copy, tmp_path):
    path, counts = store_copy
    dest = tmp_path / "backup.db"
    out = backup_store(path, dest)
    assert out["counts"] == counts and out["integrity_check"] == "ok" and out["bytes"] == dest.stat().st_size
    for t in FACT_TABLES:
        assert raw_rows(dest, t) == raw_rows(path, t)
    with Population(dest) as p:  # the copy is a store in its own right
        assert p.counts() == counts
    assert sorted(os.listdir(tmp_path)) == ["backup.db", "population.db"]  # no partial file left
    with pytest.raises(InvalidInput, match="backup destination"):
        backup_store(path, dest)  # never overwrites
    with pytest.raises(InvalidInput, match="existing directory"):
        backup_store(path, tmp_path / "no-such-dir" / "b.db")
    with pytest.raises(StoreMissing):
        backup_store(tmp_path / "missing.db", tmp_path / "b2.db")


def test_backup_while_another_thread_writes(store_copy, tmp_path):
    path, counts = store_copy
    stop = threading.Event()

    def write():
        with Population(path) as p:
            i = 10_000
            while not stop.is_set():
                p.add_design_with_measurements(GEMM.content_hash, workload=f"gemm fp32 M={i} N=1 K=1", chip=CHIP,
                                               assignment={"i": i}, predicted=1.0, unit="us", solver="milp",
                                               measurements=[MeasurementFact("model", "cpu", 1e-6)])
                i += 1

    th = threading.Thread(target=write)
    th.start()
    try:
        out = backup_store(path, tmp_path / "live.db")
    finally:
        stop.set()
        th.join(60)
    assert out["counts"]["designs"] >= counts["designs"]
    assert check_store(tmp_path / "live.db").ok and check_store(tmp_path / "live.db").unmeasured_designs == 0


def test_damaged_store_is_not_backed_up(store_copy, tmp_path):
    path, _ = store_copy
    DAMAGE["garbage-middle"](path)
    with pytest.raises(StoreDamaged, match="export"):
        backup_store(path, tmp_path / "b.db")
    assert not (tmp_path / "b.db").exists()
    assert sorted(os.listdir(tmp_path)) == ["population.db"]


def test_export_is_strict_json_of_every_row(store_copy, tmp_path):
    path, counts = store_copy
    with Population(path) as p:
        p.add_design(GEMM.content_hash, workload="gemm fp32 M=2 N=2 K=2", chip=CHIP, assignment={"Tm": 16},
                     predicted=float("inf"), unit="us", solver="milp")
    dest = tmp_path / "export.json"
    export_store(path, dest)

    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    data = json.loads(dest.read_text(), parse_constant=refuse)
    assert data["schema_version"] == SCHEMA_VERSION and data["unreadable"] == {}
    assert data["counts"] == {t: len(raw_rows(path, t)) for t in FACT_TABLES}
    first = raw_rows(path, "measurements")[0]
    cols = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(measurements)")]
    exported = data["tables"]["measurements"][0]
    assert exported["id"] == first[cols.index("id")] and exported["latency_s"] == first[cols.index("latency_s")]
    assert exported["provenance"] == json.loads(first[cols.index("provenance")])
    assert data["tables"]["designs"][-1]["predicted"] == "inf"
    with pytest.raises(InvalidInput, match="export destination"):
        export_store(path, dest)


def test_export_salvages_the_rows_before_the_damage(store_copy):
    path, counts = store_copy
    DAMAGE["garbage-middle"](path)
    data = export_store(path)
    assert data["unreadable"]  # the damage is named per table
    for table, why in data["unreadable"].items():
        assert "malformed" in why and data["counts"][table] < counts[table]
    assert data["counts"]["templates"] == 1
