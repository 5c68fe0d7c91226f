"""A design and its measurements commit together: a failure or a kill -9 in the middle of the
transaction leaves neither, and a writer killed at random moments leaves a store that passes
integrity_check with every design measured."""
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from formloop.errors import InvalidInput
from formloop.population import MeasurementFact, Population
from formloop.population.maintenance import check_store
from tests.storecases import CHIP, GEMM, ROOT, run_python, seed_store

PER_DESIGN = 3  # measurements written with each design


def facts(i: int) -> list[MeasurementFact]:
    return [MeasurementFact("model", "cpu", i * 1e-6), MeasurementFact("emulated", "cpu", i * 2e-6),
            MeasurementFact("gpu", "h200", None, failure="CompileError: out of shared memory")]


def design(p: Population, i: int):
    return p.add_design_with_measurements(GEMM.content_hash, workload=f"gemm fp32 M={i + 1} N=1 K=1", chip=CHIP,
                                          assignment={"i": i}, predicted=float(i), unit="us", solver="milp",
                                          measurements=facts(i))


def rows(path) -> tuple[int, int, list[int]]:
    conn = sqlite3.connect(path)
    try:
        n_d = conn.execute("SELECT COUNT(*) FROM designs").fetchone()[0]
        n_m = conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
        per = [r[0] for r in conn.execute("SELECT (SELECT COUNT(*) FROM measurements m WHERE m.design_id = d.id) "
                                          "FROM designs d")]
    finally:
        conn.close()
    return n_d, n_m, per


def test_design_and_measurements_are_stored_together(tmp_path):
    path = tmp_path / "p.db"
    seed_store(path, designs=0)
    with Population(path) as p:
        d, ms = design(p, 7)
        stored = p.measurements()
    assert [m["id"] for m in stored] == ms and {m["design_id"] for m in stored} == {d}
    assert [m["tier"] for m in stored] == ["model", "emulated", "gpu"]
    assert stored[2]["latency_s"] is None and stored[2]["failure"].startswith("CompileError")


def test_bad_measurement_stores_nothing(tmp_path):
    path = tmp_path / "p.db"
    seed_store(path, designs=0)
    with Population(path) as p:
        for bad, field in ((facts(1)[:1] + [MeasurementFact("guess", "cpu", 1e-6)], "tier"),
                           ([MeasurementFact("model", "cpu", float("nan"))], "latency"),
                           ([], "measurements"), ([{"tier": "model"}], "measurement")):
            with pytest.raises(InvalidInput, match=field):
                p.add_design_with_measurements(GEMM.content_hash, workload="gemm fp32 M=1 N=1 K=1", chip=CHIP,
                                               assignment={"i": 1}, predicted=1.0, unit="us", solver="milp",
                                               measurements=bad)
        with pytest.raises(InvalidInput, match="stored template"):
            p.add_design_with_measurements("0" * 16, workload="gemm fp32 M=1 N=1 K=1", chip=CHIP, assignment={"i": 1},
                                           predicted=1.0, unit="us", solver="milp", measurements=facts(1))
    assert rows(path)[:2] == (0, 0)


def test_failure_inside_the_transaction_rolls_the_design_back(tmp_path, monkeypatch):
    path = tmp_path / "p.db"
    seed_store(path, designs=0)
    real = Population._insert_measurement
    calls = []

    def fail_on_second(c, design_id, workload, chip, m):
        calls.append(design_id)
        if len(calls) == 2:
            raise OSError("the disk went away between two measurements")
        return real(c, design_id, workload, chip, m)

    monkeypatch.setattr(Population, "_insert_measurement", staticmethod(fail_on_second))
    with Population(path) as p:
        with pytest.raises(OSError, match="disk went away"):
            design(p, 3)
    assert len(calls) == 2 and rows(path)[:2] == (0, 0)


KILLED_MID_TRANSACTION = textwrap.dedent("""
    import os, signal, sys
    from formloop.population import Population
    from tests.test_population_atomic import design
    real = Population._insert_measurement
    def die_after_first(c, design_id, workload, chip, m):
        out = real(c, design_id, workload, chip, m)
        os.kill(os.getpid(), signal.SIGKILL)  # the design and one measurement are written, not committed
    with Population(sys.argv[1]) as p:
        design(p, 1)
        Population._insert_measurement = staticmethod(die_after_first)
        design(p, 2)
""")


def test_kill_9_inside_the_transaction_leaves_neither(tmp_path):
    path = tmp_path / "p.db"
    seed_store(path, designs=0)
    done = run_python(KILLED_MID_TRANSACTION, str(path))
    assert done.returncode == -signal.SIGKILL, done.stderr
    n_d, n_m, per = rows(path)
    assert (n_d, n_m, per) == (1, PER_DESIGN, [PER_DESIGN])  # design 1 whole, design 2 not at all
    assert check_store(path).ok


WRITER = textwrap.dedent("""
    import itertools, sys
    from formloop.population import Population
    from tests.test_population_atomic import design
    with Population(sys.argv[1]) as p:
        for i in itertools.count(int(sys.argv[2])):
            design(p, i)
            print(i, flush=True)  # printed only after the commit
""")


def test_kill_9_of_a_writer_loop_loses_no_commit_and_splits_no_design(tmp_path):
    path = tmp_path / "p.db"
    seed_store(path, designs=0)
    rng = random.Random(2024)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    committed: list[int] = []
    kills = 4
    for round_ in range(kills):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(round_ * 1_000_000)],
                                stdout=subprocess.PIPE, text=True, env=env)
        target = rng.randint(3, 60)
        seen = [int(proc.stdout.readline()) for _ in range(target)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        committed += seen
    report = check_store(path)
    assert report.ok and report.check_findings == [] and report.unmeasured_designs == 0
    n_d, n_m, per = rows(path)
    assert n_d >= len(committed) and set(per) == {PER_DESIGN} and n_m == PER_DESIGN * n_d
    with Population(path, mode="read") as p:
        stored = {d["assignment"]["i"] for d in p.designs()}
    assert set(committed) <= stored  # every design reported committed is there
