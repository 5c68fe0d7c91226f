"""`formloop solve` and `formloop templates`: output contract and bad-input handling."""
import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "formloop.cli", *args], capture_output=True, text=True, timeout=120)


def test_json_report_has_the_documented_fields():
    out = run("solve", "gemm-tiling", "--shape", "1000,1000,1000", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    for key in ("design", "objective_us", "bound_us", "gap", "ties", "bound_class", "smem_bytes", "solve_seconds", "model"):
        assert key in report
    assert report["design"] == {"Tm": 128, "Tn": 128, "Tk": 32, "S": 3, "P": 1, "beta": 0}
    assert report["ties"] == 1 and report["bound_class"] == "compute" and report["smem_bytes"] == 98304
    assert set(report["model"]) == {"variables", "binaries", "rows"}


def test_enumerate_solver_agrees_with_milp():
    a = json.loads(run("solve", "gemm-tiling", "--shape", "64,4096,4096", "--json").stdout)
    b = json.loads(run("solve", "gemm-tiling", "--shape", "64,4096,4096", "--solver", "enumerate", "--json").stdout)
    assert a["design"] == b["design"] and a["objective_us"] == pytest.approx(b["objective_us"])


def test_table_output_labels_units_and_sources():
    out = run("solve", "gemm-tiling", "--shape", "4096,4096,4096")
    assert out.returncode == 0
    assert "1826.9" in out.stdout and "(us, model)" in out.stdout and "memory" in out.stdout


@pytest.mark.parametrize("args, field, allowed", [
    (("--shape", "0,10,10"), "shape M", ">= 1"),
    (("--shape", "10,-3,10"), "shape N", ">= 1"),
    (("--shape", "10,10,2.5"), "shape K", "positive integers"),
    (("--shape", "10,10"), "shape", "3 positive integers"),
    (("--shape", "8,8,8", "--pre", "loose"), "contract (--pre)", "exact, strong, weak"),
    (("--shape", "8,8,8", "--chip", "z100"), "chip", "illustrative"),
    (("--shape", "8,8,8", "--solver", "cplex"), "solver", "enumerate, milp"),
])
def test_bad_input_is_one_line_naming_the_field(args, field, allowed):
    out = run("solve", "gemm-tiling", *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert field in lines[0] and allowed in lines[0]


def test_unknown_template_lists_the_library():
    out = run("solve", "gemm-tilling", "--shape", "8,8,8")
    assert out.returncode == 2 and "gemm-tiling" in out.stderr and "template" in out.stderr


def test_templates_lists_gemm_tiling():
    out = run("templates")
    assert out.returncode == 0 and "gemm-tiling" in out.stdout
