"""`formloop problems DIR`: the problem set is found by level, one row per problem with its SOL (the
same numbers `formloop sol --problem` gives), every reference time labelled "not measured: no CUDA
device" on a CPU, JSON with units; a bad directory or a duplicated name is one line, exit 2."""
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from formloop.cli import app
from formloop.errors import InvalidInput, StructureError
from formloop.evaluate.reference import NO_CUDA, problem_rows, time_reference
from formloop.sol.auto import sol_for_problem
from formloop.sol.problemset import find_problem_files, load_problem_set, problem_id

ROOT = Path(__file__).parent.parent / "problems"
runner = CliRunner()


def test_shipped_set_by_level():
    problems = load_problem_set(ROOT)
    by_level = {lvl: [p.name for p in problems if p.level == lvl] for lvl in (1, 2, 3)}
    assert len(problems) >= 40 and all(len(v) >= 5 for v in by_level.values())
    assert {"relu", "gemm_square", "log_softmax", "argmax_dim", "cumsum", "group_norm", "instance_norm"} \
        <= set(by_level[1])
    assert {"gemm_scale_clamp", "gemm_softmax", "gateup_silu_mul", "linear_residual"} <= set(by_level[2])
    assert {"mlp", "gpt_block", "vit", "mingpt_attention"} <= set(by_level[3])
    assert [problem_id(p, ROOT) for p in load_problem_set(ROOT, levels=(3,))][0].startswith("level3/")
    assert (ROOT / "README.md").is_file()


def test_bad_sets(tmp_path):
    with pytest.raises(InvalidInput, match="problem directory"):
        find_problem_files(tmp_path / "missing")
    with pytest.raises(InvalidInput, match="at least one problem"):
        find_problem_files(tmp_path)
    src = (ROOT / "level1" / "relu.py").read_text()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "relu.py").write_text(src)
    (tmp_path / "b" / "relu.py").write_text(src)
    with pytest.raises(StructureError, match="two problems named relu"):
        find_problem_files(tmp_path)
    with pytest.raises(InvalidInput, match="level"):
        load_problem_set(ROOT, levels=(4,))


def test_cli_json_rows_match_sol_and_say_not_measured():
    out = runner.invoke(app, ["problems", str(ROOT / "level3"), "--chip", "h200", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["units"]["floor_s"] == "s (sol)" and data["units"]["eager_s"].startswith("s (gpu")
    rows = {r["id"]: r for r in data["rows"]}
    assert set(rows) == {p.stem for p in (ROOT / "level3").glob("*.py")}
    vit = sol_for_problem(ROOT / "level3" / "vit.py", "h200")
    assert (rows["vit"]["flops"], rows["vit"]["bytes"], rows["vit"]["floor_s"]) == \
        (vit.flops, vit.bytes, vit.time_floor_s)
    if not torch.cuda.is_available():
        assert all(r["eager_s"] is None and r["eager_note"] == NO_CUDA == r["compiled_note"] for r in rows.values())


def test_cli_table_small_and_errors(tmp_path):
    out = runner.invoke(app, ["problems", str(ROOT), "--small", "--level", "2", "--chip", "h100"],
                        env={"COLUMNS": "160"})
    assert out.exit_code == 0, out.output
    assert "gemm_scale_clamp" in out.stdout and "floor" in out.stdout and "…" not in out.stdout
    if not torch.cuda.is_available():
        assert NO_CUDA in out.stdout
    for args, message in [((str(tmp_path / "none"),), "invalid DIRECTORY"), ((str(ROOT), "--chip", "tpu"), "chip"),
                          ((str(ROOT), "--level", "7"), "level")]:
        bad = runner.invoke(app, ["problems", *args])
        assert bad.exit_code == 2 and message in bad.output and "Traceback" not in bad.output


def test_broken_problem_is_a_row_not_a_crash(tmp_path):
    (tmp_path / "ok.py").write_text((ROOT / "level1" / "relu.py").read_text())
    (tmp_path / "broken.py").write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                        "        return x[x > 0]\ndef get_inputs():\n    return [torch.randn(4)]\n"
                                        "def get_init_inputs():\n    return []\n")
    rows = {r["id"]: r for r in problem_rows(tmp_path, "h100", small=True)}
    assert "meta tensors" in rows["broken"]["sol_error"] and rows["ok"]["sol_error"] == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path")
def test_timing_refuses_without_cuda():
    from formloop.sol.problem import load_problem

    assert time_reference(load_problem(ROOT / "level1" / "relu.py", small=True)) == (None, NO_CUDA, None)
