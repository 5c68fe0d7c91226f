"""Code formloop did not write (problem files for `sol`, user templates for show/solve/run) runs in a
child process: exit, os._exit, signals, KeyboardInterrupt, endless sleeps and menus that would hang
the solver all end in a named verdict and exit status 2, never a result and never exit 0.
(Harness and integrity candidates: tests/test_measure_sandbox.py.)"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from formloop import api
from formloop.api import sol as api_sol
from formloop.cli import app
from formloop.errors import StructureError
from formloop.library import user
from formloop.measure.sandbox import UntrustedCodeFailed

ROOT = Path(__file__).resolve().parents[1]
ROWNORM = ROOT / "examples" / "templates" / "rownorm.py"
ADD = ROOT / "tests" / "fixtures" / "integrity" / "problems" / "add.py"
runner = CliRunner()

# name -> (code run at import of the file, verdict or message expected)
HOSTILE = {
    "sys_exit": ("import sys\nsys.exit(0)\n", "SystemExit"),
    "os_exit": ("import os\nos._exit(0)\n", "exited"),
    "signal": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "crashed"),
    "interrupt": ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
    "sleep": ("import time\ntime.sleep(3600)\n", "timed-out"),
    "memory_hog": ("_hog = bytearray(1 << 40)\n", "MemoryError"),
}
MENUS = {  # BLOCK's menu in rownorm replaced by ...
    "huge_menu": ("tuple(range(1, 200001))", "200000 menu values"),
    "huge_value": ("(128, 10**30)", "menu value 10000"),
    "string_menu": ('("a", "b")', "menu value 'a'"),
}
BLOCK_MENU = "(128, 256, 512, 1024, 2048, 4096, 8192)"


@pytest.fixture(autouse=True)
def _short_limits(monkeypatch):
    monkeypatch.setattr(user, "VET_WALL_S", 10.0)  # generous: a child starts in ~3 s on 2 busy cores
    monkeypatch.setattr(api_sol, "PROBLEM_WALL_S", 10.0)


def _short_for_sleep(monkeypatch, name: str) -> None:
    """The endless sleep runs out any limit, and then waits all of it: 3 s, not 10, for that case alone."""
    if name == "sleep":
        monkeypatch.setattr(user, "VET_WALL_S", 3.0)
        monkeypatch.setattr(api_sol, "PROBLEM_WALL_S", 3.0)


def _template_file(tmp_path: Path, name: str) -> str:
    text = ROWNORM.read_text()
    if name in MENUS:
        assert BLOCK_MENU in text
        text = text.replace(BLOCK_MENU, MENUS[name][0], 1)
    else:
        text = text + "\n\ndef hostile():\n" + "".join(f"    {line}\n" for line in HOSTILE[name][0].splitlines())
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return f"{path}:{'rownorm' if name in MENUS else 'hostile'}"


@pytest.mark.parametrize("name", sorted(HOSTILE) + sorted(MENUS))
def test_hostile_user_template_is_refused_with_a_named_verdict(tmp_path, monkeypatch, name):
    _short_for_sleep(monkeypatch, name)
    spec = _template_file(tmp_path, name)
    with pytest.raises(StructureError) as info:
        user.load_user_template(spec)
    expected = (HOSTILE.get(name) or MENUS[name])[1]
    assert expected in str(info.value)
    if isinstance(info.value, UntrustedCodeFailed):
        assert info.value.verdict in ("crashed", "timed-out", "exited")


@pytest.mark.parametrize("command", [["show"], ["solve", "--shape", "R=64,D=64"]])
def test_cli_refuses_a_template_that_exits_with_status_2(tmp_path, command):
    spec = _template_file(tmp_path, "os_exit")
    r = runner.invoke(app, [command[0], spec, *command[1:]])
    assert r.exit_code == 2 and "exited" in r.output and "Traceback" not in r.output, r.output


def test_the_loop_refuses_a_hostile_template_and_stores_nothing(tmp_path):
    store = tmp_path / "p.db"
    spec = _template_file(tmp_path, "signal")
    r = runner.invoke(app, ["run", "rmsnorm", "--shape", "R=64,D=64", "--template", spec, "--store", str(store)])
    assert r.exit_code == 2 and "crashed" in r.output and "Traceback" not in r.output, r.output
    assert not store.exists() or "hostile" not in store.read_bytes().decode("latin-1")


def test_a_good_user_template_still_loads():
    t = user.load_user_template(f"{ROWNORM}:rownorm")
    assert t.name == "rownorm"


def _problem(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(HOSTILE[name][0] + ADD.read_text())
    return path


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_problem_file_gets_a_named_verdict_from_sol(tmp_path, monkeypatch, name):
    _short_for_sleep(monkeypatch, name)
    with pytest.raises(StructureError) as info:
        api.sol_report(problem=str(_problem(tmp_path, name)), chip="h100")
    msg = str(info.value)
    assert re.search(r": (crashed|timed-out|exited|.*raised)", msg), msg
    r = runner.invoke(app, ["sol", "--problem", str(_problem(tmp_path, name)), "--json"])
    assert r.exit_code == 2 and "Traceback" not in r.output and not r.stdout.strip(), r.output


def test_a_good_problem_file_still_has_its_sol():
    d = api.sol_report(problem=str(ADD), chip="h100")
    assert d["flops"] is not None or d["report"]
    r = runner.invoke(app, ["sol", "--problem", str(ADD), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)


@pytest.mark.parametrize("old, new, code", [
    ("        return x + y", '        return "nonsense"', 0),            # no work: a 0 floor, rendered
    ("        return x + y", '        raise RuntimeError("boom")', 2),
    ("    return [torch.randn(N), torch.randn(N)]", "    return 5", 2),
    ("    return []", '    return ["x", {}]', 2),
])
def test_problem_code_that_raises_or_returns_nonsense_is_named(tmp_path, old, new, code):
    text = ADD.read_text()
    assert old in text
    path = tmp_path / "p.py"
    path.write_text(text.replace(old, new))
    r = runner.invoke(app, ["sol", "--problem", str(path)])
    assert r.exit_code == code and "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    if code:
        assert r.output.startswith("error: problem file"), r.output
