"""`formloop population check|backup|export` over the api: an integrity report (exit 1 on a problem),
a checked backup that refuses damage, a JSON export; none creates or writes the store."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from formloop.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"FORMLOOP_TIER": "model"})


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("upkeep") / "p.db"
    r = invoke("run", "gemm", "--shape", "64,64,64", "--store", path)
    assert r.exit_code == 0, r.output
    return path


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_check_backup_export_of_a_good_store(store, tmp_path):
    before = digest(store)
    r = invoke("population", "check", "--store", store, "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["ok"] and rep["check"] == "integrity_check" and rep["counts"]["designs"] >= 1
    b = invoke("population", "backup", tmp_path / "b.db", "--store", store, "--json")
    assert b.exit_code == 0, b.output
    again = invoke("population", "check", "--store", tmp_path / "b.db", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["counts"] == rep["counts"]
    e = invoke("population", "export", "--store", store)
    data = json.loads(e.stdout)
    assert e.exit_code == 0 and data["counts"] == rep["counts"] and not data["unreadable"]
    assert len(data["tables"]["designs"]) == rep["counts"]["designs"]
    assert digest(store) == before


def test_backup_and_export_never_overwrite(store, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("mine")
    for cmd in (("backup", taken), ("export", taken)):
        r = invoke("population", *cmd, "--store", store)
        assert r.exit_code == 2 and "invalid DEST" in r.output and "Traceback" not in r.output
    assert taken.read_text() == "mine"


def test_damage_is_reported_and_never_copied(store, tmp_path):
    bad = tmp_path / "bad.db"
    data = bytearray(store.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 65536] = os.urandom(min(65536, len(data) - mid))
    bad.write_bytes(bytes(data))
    before = digest(bad)
    r = invoke("population", "check", "--store", bad, "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["ok"] is False, r.output
    b = invoke("population", "backup", tmp_path / "copy.db", "--store", bad)
    assert b.exit_code == 2 and "damaged" in b.output and not (tmp_path / "copy.db").exists()
    w = invoke("run", "gemm", "--shape", "32,32,32", "--store", bad)
    assert w.exit_code == 2 and "damaged" in w.output and "Traceback" not in w.output
    assert digest(bad) == before


@pytest.mark.parametrize("cmd", [("check",), ("export",), ("ls",), ("designs",), ("backup", "B")])
def test_reading_a_missing_store_creates_nothing(tmp_path, cmd):
    missing = tmp_path / "missing.db"
    args = [tmp_path / a if a == "B" else a for a in cmd]
    r = invoke("population", *args, "--store", missing)
    assert "Traceback" not in r.output and r.exit_code in (0, 2), r.output
    assert not missing.exists() and not (tmp_path / "B").exists()
