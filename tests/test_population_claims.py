"""Concurrent runs on one store prove a template once: separate processes started together on a
missing store, a claimant killed in the middle of its proof, a lease that runs out, a settled store."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from formloop.population import Population
from formloop.population.claims import HOST
from tests.storecases import GEMM, ROOT, cert, seed_store
from tests.test_population_store import ROWS, toy

CLAIMANT = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from formloop.population import Population
    from tests.storecases import GEMM, cert
    path, go, log, verdicts, hold = sys.argv[1], Path(sys.argv[2]), sys.argv[3], tuple(sys.argv[4].split(",")), \\
        float(sys.argv[5])
    Path(f"{go}.ready-{os.getpid()}").touch()
    while not go.exists():
        time.sleep(0.005)
    with Population(path) as p:  # all open a store that does not exist yet at once
        with p.claim_proof(GEMM.content_hash, "tc", on_wait=lambda msg: print("waiting", flush=True)) as c:
            if c.owned:  # stands in for the verifier: one line per proof attempt, then the certificate
                with open(log, "a") as f:
                    f.write(f"{os.getpid()}\\n")
                print("claimed", flush=True)
                time.sleep(hold)
                p.add_template(GEMM, origin="library:gemm-tiling", certificate=cert(GEMM, verdicts), toolchain="tc")
    print(json.dumps({"owned": c.owned, "status": c.status, "verdict": c.verdict, "took_over": c.took_over,
                      "pid": os.getpid()}), flush=True)
""")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def start(tmp_path, verdicts: str, hold: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLAIMANT, str(tmp_path / "cold.db"), str(tmp_path / "go"),
                             str(tmp_path / "attempts.log"), verdicts, str(hold)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def wait_ready(tmp_path, n: int) -> None:
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.ready-*"))) < n:
        assert time.monotonic() < deadline, "claimants did not start"
        time.sleep(0.01)


def certificates(path) -> list[str]:
    with Population(path, mode="read") as p:
        return [c["verdict"] for c in p.certificates(GEMM.content_hash)]


@pytest.mark.parametrize("n, verdicts, expect", [(6, "proved,proved,proved", ("proved", "proved")),
                                                 (3, "proved,unresolved,proved", ("unresolved", "unresolved"))])
def test_concurrent_runs_on_a_cold_store_prove_once(tmp_path, n, verdicts, expect):
    procs = [start(tmp_path, verdicts, hold=1.0) for _ in range(n)]
    wait_ready(tmp_path, n)
    (tmp_path / "go").touch()
    outs = []
    for pr in procs:
        stdout, stderr = pr.communicate(timeout=120)
        assert pr.returncode == 0, stderr
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    owners = [o for o in outs if o["owned"]]
    assert len(owners) == 1
    assert (tmp_path / "attempts.log").read_text().split() == [str(owners[0]["pid"])]
    assert all((o["status"], o["verdict"]) == expect for o in outs if not o["owned"])
    assert certificates(tmp_path / "cold.db") == [expect[1]]
    with Population(tmp_path / "cold.db", mode="read") as p:
        assert p.conn.execute("SELECT COUNT(*) FROM proof_claims").fetchone()[0] == 0


def test_a_killed_claimant_is_taken_over(tmp_path):
    (tmp_path / "go").touch()
    first = start(tmp_path, "proved,proved,proved", hold=300.0)
    assert first.stdout.readline().strip() == "claimed"
    second = start(tmp_path, "proved,proved,proved", hold=0.0)
    assert second.stdout.readline().strip() == "waiting"
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)  # reaped: a zombie would still look alive
    stdout, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["owned"] and out["took_over"].startswith(f"{HOST}:{first.pid}:")
    assert (tmp_path / "attempts.log").read_text().split() == [str(first.pid), str(second.pid)]
    assert certificates(tmp_path / "cold.db") == ["proved"]


def test_an_expired_lease_is_taken_over(tmp_path):
    path = tmp_path / "p.db"
    seed_store(path, designs=0)
    with Population(path) as p:
        # a live process (this one, under another owner name) whose lease ends in 0.4 s
        p.conn.execute("INSERT INTO proof_claims VALUES ('abc', 'tc', 'elsewhere:1:x', ?, ?, ?, ?)",
                       (HOST, os.getpid(), time.time(), time.time() + 0.4))
        start_t = time.monotonic()
        with p.claim_proof("abc", "tc") as c:
            assert c.owned and c.took_over == "elsewhere:1:x"
        assert time.monotonic() - start_t >= 0.35


def test_settled_store_is_not_claimed_and_unresolved_is_retried(tmp_path):
    path = tmp_path / "p.db"
    seed_store(path, designs=0)  # GEMM proved under toolchain 'tc'
    with Population(path) as p:
        with p.claim_proof(GEMM.content_hash, "tc") as c:
            assert not c.owned and (c.status, c.verdict) == ("proved", "proved")
        with p.claim_proof(GEMM.content_hash, "other toolchain") as c:  # the toolchain is part of the key
            assert c.owned
        rows = p.conn.execute("SELECT COUNT(*) FROM proof_claims").fetchone()[0]
        assert rows == 0  # released on leaving the block
        t = toy("unresolved-toy", ROWS)  # a template whose last attempt was unresolved
        p.add_template(t, origin="x", certificate=cert(t, ("proved", "unresolved", "proved")), toolchain="tc")
        with p.claim_proof(t.content_hash, "tc") as c:
            assert c.owned  # an old unresolved attempt settles nothing: prove again


def test_claim_is_released_when_the_prover_raises(tmp_path):
    path = tmp_path / "p.db"
    seed_store(path, designs=0)
    with Population(path) as p:
        with pytest.raises(RuntimeError, match="verifier crashed"):
            with p.claim_proof("abc", "tc") as c:
                assert c.owned
                raise RuntimeError("verifier crashed")
        assert p.conn.execute("SELECT COUNT(*) FROM proof_claims").fetchone()[0] == 0


def test_waiter_in_another_thread_reuses_the_proof(tmp_path):
    """Two Population objects in one process behave like two processes (no shared state)."""
    path = tmp_path / "p.db"
    seed_store(path, designs=0)
    t = toy("threaded-toy", ROWS)
    claimed, results = threading.Event(), {}

    def owner():
        with Population(path) as p, p.claim_proof(t.content_hash, "tc") as c:
            claimed.set()
            time.sleep(0.5)
            p.add_template(t, origin="x", certificate=cert(t), toolchain="tc")
            results["owner"] = c.owned

    th = threading.Thread(target=owner)
    th.start()
    assert claimed.wait(30)
    with Population(path) as p, p.claim_proof(t.content_hash, "tc") as c:
        results["waiter"] = (c.owned, c.status, c.verdict, c.waited_s > 0.2)
    th.join(30)
    assert results == {"owner": True, "waiter": (False, "proved", "proved", True)}
