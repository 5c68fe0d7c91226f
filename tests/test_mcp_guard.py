"""The MCP server's guard (formloop.agent.guard): file arguments only from the configured roots (a
file outside is never opened, let alone run), every tool in a child under a time limit (exit,
os._exit, signals, sleep, KeyboardInterrupt become named errors and the server goes on), strict JSON."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from formloop.agent import guard
from formloop.agent.server import TOOL_NAMES, Tools, structured
from formloop.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
ROWNORM = ROOT / "examples" / "templates" / "rownorm.py"
STUDY = ROOT / "studies" / "wall_relaxation_capacity.toml"


def _guarded(tmp_path, monkeypatch, limit_s: str) -> dict:
    monkeypatch.setenv(guard.ROOTS_ENV, str(tmp_path / "root"))
    monkeypatch.setenv(guard.TIMEOUT_ENV, limit_s)
    settings = load_settings({"FORMLOOP_STORE": str(tmp_path / "store" / "p.db"), "FORMLOOP_TIER": "model"})
    tools = Tools(settings)
    return {name: guard.guarded(settings, name, getattr(tools, name)) for name in TOOL_NAMES}


@pytest.fixture
def server(tmp_path, monkeypatch):
    """guarded tools with tmp_path/root as the extra root, a 10 s tool limit, the store in tmp_path/store."""
    (tmp_path / "root").mkdir()
    (tmp_path / "store").mkdir()
    return _guarded(tmp_path, monkeypatch, "10")  # generous: a child starts in ~3 s on 2 busy cores


def _hostile(path: Path, body: str) -> str:
    path.write_text(ROWNORM.read_text() + "\n\ndef hostile():\n" + "".join(f"    {b}\n" for b in body.splitlines()))
    return f"{path}:hostile"


def test_a_template_outside_the_roots_is_never_run(server, tmp_path):
    marker = tmp_path / "ran"
    spec = _hostile(tmp_path / "evil.py", f"open({str(marker)!r}, 'w').write('x')")
    (tmp_path / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n" + (tmp_path / "evil.py").read_text())
    for tool, args in (("show_template", {"template": spec}), ("solve", {"template": spec, "shape": "R=64,D=64"}),
                       ("add_template", {"spec": spec}), ("prove", {"template": spec})):
        out = server[tool](**args)
        assert out["ok"] is False and out["error"]["type"] == "OutsideRoots", out
        assert "FORMLOOP_TEMPLATE_ROOTS" in out["error"]["message"]
    assert not marker.exists()


def test_a_link_inside_a_root_to_a_file_outside_is_refused(server, tmp_path):
    target = Path(_hostile(tmp_path / "outside.py", "pass").rsplit(":", 1)[0])
    (tmp_path / "root" / "link.py").symlink_to(target)
    out = server["show_template"](template=f"{tmp_path / 'root' / 'link.py'}:rownorm")
    assert out["error"]["type"] == "OutsideRoots"


def test_wall_relax_opens_only_toml_files_under_the_roots(server, tmp_path):
    for study in ("/etc/passwd", str(tmp_path / "root" / "x.txt"), str(tmp_path / "s.toml")):
        out = server["wall_relax"](study=study, objective="prefill")
        assert out["ok"] is False and out["error"]["type"] == "OutsideRoots", out
    ok = server["wall_relax"](study=str(STUDY), objective="prefill", start="small")
    assert ok["ok"] is True and ok["steps"] is not None if "steps" in ok else ok["ok"] is True


@pytest.mark.parametrize("body, kind", [
    ("import os\nos._exit(0)", "ToolExited"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "ToolCrashed"),
    ("import time\ntime.sleep(3600)", "ToolTimedOut"),
])
def test_a_tool_that_dies_or_hangs_is_a_named_error_and_the_server_goes_on(server, tmp_path, monkeypatch, body,
                                                                           kind):
    spec = _hostile(tmp_path / "root" / "t.py", body)
    # the endless sleep runs out any limit and then waits all of it: a 3 s one for that call alone
    hostile = _guarded(tmp_path, monkeypatch, "3") if kind == "ToolTimedOut" else server
    out = hostile["show_template"](template=spec)
    assert out["ok"] is False and out["error"]["type"] == kind, out
    json.dumps(out, allow_nan=False)
    again = server["show_template"](template="gemm-tiling")
    assert again["ok"] is True and again["name"] == "gemm-tiling"


@pytest.mark.parametrize("body", ["import sys\nsys.exit(0)", "raise KeyboardInterrupt", "return hostile()"])
def test_exit_interrupt_and_recursion_in_a_template_are_refused(server, tmp_path, body):
    out = server["show_template"](template=_hostile(tmp_path / "root" / "t.py", body))
    assert out["ok"] is False and out["error"]["type"] in ("StructureError", "ToolCrashed", "ToolExited"), out


def test_every_base_exception_in_process_is_data(monkeypatch):
    tools = Tools(load_settings({"FORMLOOP_TIER": "model"}))
    for exc in (SystemExit(0), KeyboardInterrupt(), GeneratorExit(), RecursionError("deep"), MemoryError()):
        def boom(exc=exc):
            raise exc
        monkeypatch.setattr(tools, "list_templates", boom)
        out = structured(tools.list_templates)()
        assert out["ok"] is False and out["error"]["type"] == "InternalError"


def test_answers_are_strict_json():
    out = guard.strict({"ok": True, "latency": math.inf, "rows": [{"x": math.nan}]})
    text = json.dumps(out, allow_nan=False)
    assert "null" in text and out["non_finite"]
    assert guard.strict("not a dict")["ok"] is False


def test_bad_tool_timeout_setting_is_named(monkeypatch):
    for bad in ("nan", "-1", "inf", "x"):
        with pytest.raises(guard.InvalidInput, match=guard.TIMEOUT_ENV):
            guard.tool_timeout({guard.TIMEOUT_ENV: bad})


def test_the_stdio_server_survives_hostile_calls(tmp_path, monkeypatch):
    anyio = pytest.importorskip("anyio")
    pytest.importorskip("mcp")
    from tests.test_mcp_server import session_run

    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv(guard.ROOTS_ENV, str(root))
    monkeypatch.setenv(guard.TIMEOUT_ENV, "10")
    marker = tmp_path / "ran"
    outside = tmp_path / "evil.py"
    outside.write_text(f"import os\nos.system('touch {marker}')\n")
    calls = [("outside", "show_template", {"template": f"{outside}:x"}),
             ("exit", "show_template", {"template": _hostile(root / "a.py", "import os\nos._exit(3)")}),
             ("interrupt", "show_template", {"template": _hostile(root / "b.py", "raise KeyboardInterrupt")}),
             ("sleep", "show_template", {"template": _hostile(root / "c.py", "import time\ntime.sleep(600)")}),
             ("passwd", "wall_relax", {"study": "/etc/passwd", "objective": "x"}),
             ("after", "show_template", {"template": "gemm-tiling"})]
    out = anyio.run(session_run, tmp_path / "p.db", calls)
    kinds = {k: json.loads(out[k].content[0].text) for k, *_ in calls}
    assert kinds["outside"]["error"]["type"] == "OutsideRoots" and not marker.exists(), kinds
    assert kinds["exit"]["error"]["type"] == "ToolExited"
    assert kinds["interrupt"]["ok"] is False
    assert kinds["sleep"]["error"]["type"] == "ToolTimedOut"
    assert kinds["passwd"]["error"]["type"] == "OutsideRoots"
    assert kinds["after"]["ok"] is True and kinds["after"]["name"] == "gemm-tiling"
