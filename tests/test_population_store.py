"""The population store: admission rule, facts with chip and workload, near-duplicates, restarts,
concurrent writers (separate processes) and migration of an older schema."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from formloop.errors import InvalidInput
from formloop.expr import decision, param
from formloop.library import get_template
from formloop.population import NearDuplicate, Population, SCHEMA_VERSION, migrate
from formloop.population.schema import descriptor_key
from formloop.template import Constraint, Template
from formloop.verify.outcome import ObligationResult, Verdict
from tests.storecases import CHIP, GEMM, WL, FakeCertificate, cert


def toy(name: str, descriptor: dict) -> Template:
    x, n = decision("x", (1, 2, 4)), param("n")
    return Template(name, "", (x,), (n,), (Constraint("small", n <= 4, "scope"),),
                    (Constraint("fits", x >= n),), (Constraint("covers", x >= n),), cost=x, descriptor=descriptor)


ROWS = {"algorithm": "rmsnorm", "reuse": "row in registers", "placement": "program per row",
        "resources": ("registers",)}


@pytest.fixture
def store(tmp_path):
    with Population(tmp_path / "p.db") as p:
        yield p


def test_fresh_store_is_wal_and_current(store):
    assert store.journal_mode == "wal"
    assert store.schema_version == SCHEMA_VERSION
    assert store.migrated == list(range(1, SCHEMA_VERSION + 1))


def test_status_comes_from_the_certificate(store):
    assert store.add_template(GEMM, origin="library:gemm-tiling", certificate=cert(GEMM)).status == "proved"
    t = toy("refuted-toy", ROWS)
    rec = store.add_template(t, origin="x", certificate=cert(t, ("counterexample", "proved", "proved")))
    assert rec.status == "refuted"
    assert store.counterexamples(t.content_hash) == [
        {"obligation": "K1", "witness": {"x": 1}, "trace": ["load x", "read x"], "replay": ""}]
    u = toy("unresolved-toy", {**ROWS, "algorithm": "softmax"})
    rec = store.add_template(u, origin="x", certificate=cert(u, ("proved", "unresolved", "proved")))
    assert rec.status == "unresolved"


def test_proved_needs_all_three_kinds(store):
    t = toy("k2-missing", ROWS)
    partial = FakeCertificate(t.content_hash, [ObligationResult(k, Verdict.PROVED, 0.0) for k in ("K1", "K3")])
    assert store.add_template(t, origin="x", certificate=partial).status == "unresolved"
    assert store.templates(status="proved") == []


def test_certificate_for_another_template_is_refused(store):
    with pytest.raises(InvalidInput, match="certificate template hash"):
        store.add_template(GEMM, origin="x", certificate=cert(toy("other", ROWS)))
    with pytest.raises(InvalidInput, match="certificate"):
        store.add_template(GEMM, origin="x", certificate=None)


def test_near_duplicate_structure_is_refused(store):
    store.add_template(GEMM, origin="library:gemm-tiling", certificate=cert(GEMM))
    strong = get_template("gemm-tiling", pre="strong")
    with pytest.raises(NearDuplicate, match="near-duplicate of stored template gemm-tiling"):
        store.add_template(strong, origin="x", certificate=cert(strong))
    # same words, different case and separators: still one structure
    renamed = toy("my-gemm", {"algorithm": "GEMM", "reuse": "shared_memory tiles", "placement": "Block per output tile",
                              "resources": ["accumulators", "smem"]})
    with pytest.raises(NearDuplicate):
        store.add_template(renamed, origin="x", certificate=cert(renamed))
    different = toy("rows", ROWS)
    assert store.add_template(different, origin="x", certificate=cert(different)).status == "proved"
    assert {r.name for r in store.templates(status="proved")} == {"gemm-tiling", "rows"}


def test_performance_facts_carry_chip_and_workload(store):
    store.add_template(GEMM, origin="library:gemm-tiling", certificate=cert(GEMM))
    with pytest.raises(InvalidInput, match="chip"):
        store.add_design(GEMM.content_hash, workload=WL, chip="", assignment={"Tm": 16}, predicted=1.0, unit="us",
                         solver="milp")
    d = store.add_design(GEMM.content_hash, workload=WL, chip=CHIP, assignment={"Tm": 16}, predicted=1.0, unit="us",
                         solver="milp")
    assert d == store.add_design(GEMM.content_hash, workload=WL, chip=CHIP, assignment={"Tm": 16}, predicted=1.0,
                                 unit="us", solver="milp")  # idempotent
    with pytest.raises(InvalidInput, match="measurement chip/workload"):
        store.add_measurement(d, workload="gemm fp32 M=1 N=1 K=1", chip=CHIP, tier="model", device="cpu",
                              latency_s=1e-6)
    with pytest.raises(InvalidInput, match="tier"):
        store.add_measurement(d, workload=WL, chip=CHIP, tier="guess", device="cpu", latency_s=1e-6)
    with pytest.raises(InvalidInput, match="failure"):
        store.add_measurement(d, workload=WL, chip=CHIP, tier="gpu", device="h200", latency_s=None)
    store.add_measurement(d, workload=WL, chip=CHIP, tier="gpu", device="h200", latency_s=None,
                          failure="CompileError: x")
    store.add_measurement(d, workload=WL, chip=CHIP, tier="model", device="cpu", latency_s=2e-6)
    # the schema itself refuses a fact without a chip, whatever the caller does
    with pytest.raises(sqlite3.IntegrityError):
        store.conn.execute("INSERT INTO measurements (design_id, workload, chip, tier, device, versions, created_at) "
                           "VALUES (?, ?, '', 'model', 'cpu', '{}', 0)", (d, WL))
    assert [m["tier"] for m in store.measurements(workload="gemm", chip=CHIP)] == ["gpu", "model"]
    assert store.measurements(tier="model")[0]["latency_s"] == 2e-6
    assert store.designs(workload="softmax") == []


def test_store_survives_restart(tmp_path):
    path = tmp_path / "p.db"
    with Population(path) as p:
        p.add_template(GEMM, origin="library:gemm-tiling", certificate=cert(GEMM), toolchain="tc1")
        d = p.add_design(GEMM.content_hash, workload=WL, chip=CHIP, assignment={"Tm": 32}, predicted=3.0, unit="us",
                         solver="milp")
    with Population(path) as p:
        assert p.migrated == []
        assert p.template(GEMM.content_hash[:8]).status == "proved"
        assert p.proof(GEMM.content_hash, "tc1") is not None
        assert p.proof(GEMM.content_hash, "another toolchain") is None  # the toolchain is part of the reuse key
        assert p.designs()[0]["id"] == d and p.designs()[0]["assignment"] == {"Tm": 32}


WRITER = textwrap.dedent("""
    import sys
    from formloop.population import Population
    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Population(path) as p:
        for i in range(n):
            d = p.add_design(sys.argv[4], workload=f"gemm fp32 M={i} N=1 K=1", chip=tag,
                             assignment={"i": i}, predicted=float(i), unit="us", solver="milp")
            p.add_measurement(d, workload=f"gemm fp32 M={i} N=1 K=1", chip=tag, tier="model",
                              device=tag, latency_s=i * 1e-6)
""")


def test_concurrent_writer_processes_lose_nothing(tmp_path):
    path = tmp_path / "p.db"
    with Population(path) as p:  # the template row the designs refer to
        p.add_template(GEMM, origin="library:gemm-tiling", certificate=cert(GEMM))
    n, tags = 60, ("w0", "w1", "w2")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), tag, str(n), GEMM.content_hash])
             for tag in tags]
    assert [pr.wait(timeout=120) for pr in procs] == [0, 0, 0]
    with Population(path) as p:
        for tag in tags:
            assert len(p.designs(chip=tag)) == n
            ms = p.measurements(chip=tag)
            assert sorted(m["latency_s"] for m in ms) == pytest.approx([i * 1e-6 for i in range(n)])
        assert p.counts()["measurements"] == n * len(tags)


def test_concurrent_first_open_migrates_once(tmp_path):
    path = tmp_path / "fresh.db"
    code = "import sys; from formloop.population import Population; print(Population(sys.argv[1]).schema_version)"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [pr.communicate(timeout=120)[0].strip() for pr in procs]
    assert outs == [str(SCHEMA_VERSION)] * 3


def test_older_store_is_migrated_in_place(tmp_path):
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, upto=1) == [1]
    desc = {"algorithm": "GEMM", "reuse": "Shared-memory tiles", "placement": "block", "resources": ["smem"]}
    conn.execute("INSERT INTO templates VALUES ('abc', 'old', '{}', 'library:old', 'src', '{}', ?, 'proved', 1.0)",
                 (json.dumps(desc),))
    conn.execute("INSERT INTO designs (template_hash, workload, chip, assignment, predicted, unit, solver, created_at) "
                 "VALUES ('abc', 'gemm fp32 M=1 N=1 K=1', 'illustrative', '{}', 1.0, 'us', 'milp', 1.0)")
    conn.execute("INSERT INTO measurements (design_id, workload, chip, tier, device, latency_s, versions, created_at) "
                 "VALUES (1, 'gemm fp32 M=1 N=1 K=1', 'illustrative', 'model', 'cpu', 1e-6, '{}', 1.0)")
    assert [r[1] for r in conn.execute("PRAGMA table_info(measurements)")].count("failure") == 0
    conn.close()
    with Population(path) as p:
        assert p.migrated == [2, 3, 4, 5] and p.schema_version == SCHEMA_VERSION == 5
        assert p.templates()[0].name == "old"
        key = p.conn.execute("SELECT descriptor_key FROM templates").fetchone()[0]
        assert json.loads(key)["reuse"] == ["memory", "shared", "tiles"]  # filled by the data migration
        assert key == descriptor_key(desc)
        m = p.measurements()[0]
        assert (m["latency_s"], m["failure"], m["provenance"]) == (1e-6, "", {})
        assert p.counts()["calibrations"] == 0


def test_newer_store_is_refused(tmp_path):
    path = tmp_path / "new.db"
    with Population(path):
        pass
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(Exception, match="newer than this formloop"):
        Population(path)


def test_reading_a_missing_store_makes_no_file(tmp_path, monkeypatch):
    from formloop.api.resolve import read_population
    from formloop.settings import Settings
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nowhere" / "population.db"
    pop, shown = read_population(Settings(store_path=missing))
    with pop:
        assert pop.schema_version == SCHEMA_VERSION and set(pop.counts().values()) == {0}
    assert shown == str(missing) and list(tmp_path.iterdir()) == []
