"""`formloop prove` and `formloop verify`: JSON contract, timelines, rechecks, one-line errors."""
import json
import subprocess
import sys


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "formloop.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_fault_json_lists_obligations_with_replays():
    out = run("verify", "gemm-tiling", "--fault", "double-buffer-no-trailing", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    by = {r["obligation"]: r for r in rows}
    assert set(by) == {"coverage", "exact-once", "no-phantom", "readiness", "lifetime"}
    assert all({"obligation", "verdict", "seconds", "replay"} <= set(r) for r in rows)
    assert by["lifetime"]["verdict"] == "counterexample" and "instead of" in by["lifetime"]["replay"]
    assert by["lifetime"]["trace"]


def test_schedule_table_shows_a_two_warp_timeline():
    out = run("verify", "gemm-tiling", "--schedule", "2,1,0")
    assert out.returncode == 0, out.stderr
    assert "warp 0" in out.stdout and "warp 1" in out.stdout and "✗ COMP" in out.stdout
    assert "counterexample" in out.stdout and "ms" in out.stdout


def test_safe_schedule_with_more_warps_is_proved():
    out = run("verify", "gemm-tiling", "--schedule", "3,1,0", "--warps", "3", "--phases", "6", "--json")
    assert [r["verdict"] for r in json.loads(out.stdout)] == ["proved", "proved"]


def test_prove_writes_a_certificate_that_rechecks(tmp_path):
    cert = tmp_path / "cert.json"
    out = run("prove", "gemm-tiling", "--out", str(cert))
    assert out.returncode == 0, out.stderr
    assert "certificate: proved" in out.stdout
    again = run("verify", "--recheck", str(cert), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["agrees"] is True


def test_prove_weak_reports_k1_counterexample_as_json():
    rows = json.loads(run("prove", "gemm-tiling", "--pre", "weak", "--json").stdout)
    k1 = next(r for r in rows if r["obligation"] == "K1")
    assert k1["verdict"] == "counterexample" and "breaks precondition lifetime" in k1["replay"]


def test_bad_input_is_one_line_with_exit_2():
    for args in (["verify", "gemm-tiling", "--fault", "nope"], ["verify", "gemm-tiling"],
                 ["verify", "gemm-tiling", "--schedule", "2,x,0"], ["verify", "gemm-tiling", "--schedule", "2,1,3"],
                 ["verify", "--recheck", "/nonexistent.json"], ["prove", "gemm-tiling", "--pre", "loose"]):
        out = run(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
