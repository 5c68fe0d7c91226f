"""`formloop dsl check|emit|run`: human and JSON output, one line per diagnostic and exit 2 on a
refused spec, the emitted source, and a run in the interpreter."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from formloop.cli import app  # noqa: E402

runner = CliRunner()
EXAMPLES = Path(__file__).parent.parent / "examples" / "dsl"
GELU = str(EXAMPLES / "linear_bias_gelu.fl")


def dsl(*args):
    return runner.invoke(app, ["dsl", *args])


def test_check_prints_the_design_with_units_and_sources():
    out = dsl("check", GELU, "--solver", "enumerate")
    assert out.exit_code == 0, out.output
    assert "ok: kernel linear_gelu" in out.stdout
    assert "design: tile = 128 x 128 x 64" in out.stdout and "us (model)" in out.stdout
    assert "instance check: ok" in out.stdout and "certificate proved" in out.stdout


def test_check_json_keeps_the_fixed_fields():
    out = dsl("check", GELU, "--json", "--solver", "enumerate", "--shape", "512x1024x256")
    assert out.exit_code == 0, out.output
    r = json.loads(out.stdout)
    assert r["ok"] and r["design"]["workload"]["M"] == 512
    a = r["design"]["assignment"]
    assert (a["Tm"], a["Tn"], a["Tk"], a["KS"], a["L"]) == (128, 128, 64, 1, 1)
    assert set(r["design"]["solved"]) == {"S", "W", "G"}


def test_refused_spec_prints_one_line_per_diagnostic(tmp_path):
    bad = tmp_path / "bad.fl"
    bad.write_text(Path(GELU).read_text().replace("warps  = ?", "warps  = 2").replace("gelu(tanh)", "gelu(fast)"))
    out = dsl("check", str(bad))
    assert out.exit_code == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 2
    assert f"{bad}:11:14: warps (W) = 2" in lines[0] and "allowed: 4, 8, ?" in lines[0]
    assert "gelu argument approx = fast" in lines[1] and "allowed: erf, tanh" in lines[1]
    js = dsl("check", str(bad), "--json")
    assert js.exit_code == 2 and len(json.loads(js.stdout)["diagnostics"]) == 2


def test_emit_prints_a_triton_module():
    out = dsl("emit", GELU, "--solver", "enumerate")
    assert out.exit_code == 0, out.output
    src = out.stdout
    assert src.startswith("# formloop dsl: kernel linear_gelu") and "# design: tile = 128 x 128 x 64" in src
    # the copy-engine main loop is the GEMM family's own (imported, not copied)
    assert "@triton.jit" in src and "def linear_gelu(" in src and "_tma_mainloop(a_desc, b_desc" in src
    compile(src, "emitted.py", "exec")


def test_emit_needs_a_load_path_or_a_shape(tmp_path):
    spec = tmp_path / "noshape.fl"
    text = Path(GELU).read_text().replace("    load   = tma\n", "")
    spec.write_text(text.replace("    shape  = 4096 x 4096 x 4096\n", ""))
    out = dsl("emit", str(spec))
    assert out.exit_code == 2 and "load = ?" in out.stderr


def test_unknown_file_is_one_line():
    out = dsl("check", "/nonexistent/spec.fl")
    assert out.exit_code == 2 and "spec file" in out.stderr


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the interpreter")
def test_run_in_the_interpreter_is_labelled():
    out = dsl("run", str(EXAMPLES / "fp16_bias_tanh.fl"), "--shape", "70x40x64", "--json", "--solver", "enumerate")
    assert out.exit_code == 0, out.output
    r = json.loads(out.stdout)
    assert r["ok"] and r["correct"] and r["tier"] == "interpreter" and r["timing"] is None
    assert r["correctness"]["rel_error"] <= r["correctness"]["tolerance"]
    assert r["requested_shape"]["M"] == 70
