"""kill -9 of `formloop run` at random moments while it proves, solves, evaluates and stores: no
design is ever left without its measurements (they commit together), the store passes SQLite's
integrity_check, one proof serves every round, and the next run completes on the same store."""
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from formloop.population.maintenance import check_store

ROOT = Path(__file__).resolve().parents[1]


def _run(store: Path, sizes: list[int]) -> subprocess.Popen:
    shapes = [a for s in sizes for a in ("--shape", f"{s},{s + 1},{s + 2}")]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "FORMLOOP_TIER": "model"}
    return subprocess.Popen([sys.executable, "-m", "formloop.cli", "run", "gemm", *shapes, "--store", str(store)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def _designs(store: Path) -> int:
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as db:
            return db.execute("SELECT COUNT(*) FROM designs").fetchone()[0]
    except sqlite3.Error:  # not created yet, or its tables not yet written
        return 0


def _wait_for_progress(proc: subprocess.Popen, store: Path, before: int, limit_s: float = 120.0) -> None:
    """Until this run has stored a design (so the kill lands inside the loop, whatever the machine's speed)."""
    end = time.monotonic() + limit_s
    while proc.poll() is None and _designs(store) <= before and time.monotonic() < end:
        time.sleep(0.02)


def test_kill_9_of_the_run_loop_splits_no_design(tmp_path):
    store = tmp_path / "p.db"
    rng = random.Random(12)
    killed = 0
    for round_ in range(4):
        sizes = [64 + 32 * (8 * round_ + i) for i in range(8)]
        before = _designs(store)
        proc = _run(store, sizes)
        _wait_for_progress(proc, store, before)
        time.sleep(rng.uniform(0.0, 0.05))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait(timeout=120)
        assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.read().decode()[-2000:]
        if store.exists():
            rep = check_store(store)
            assert rep.ok and rep.check_findings == [], rep.problems
            assert rep.unmeasured_designs == 0, f"round {round_}: designs without measurements"
    final = _run(store, [48, 40])
    _, err = final.communicate(timeout=300)
    assert final.returncode == 0, err.decode()[-2000:]
    rep = check_store(store)
    assert rep.ok and rep.unmeasured_designs == 0 and rep.counts["designs"] >= 2
    assert rep.counts["certificates"] == 1  # proved once, reused after every kill
    assert rep.counts["measurements"] >= rep.counts["designs"]
    assert killed >= 1
