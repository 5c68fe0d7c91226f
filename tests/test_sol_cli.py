"""`formloop sol`: the A.2 report from the command line, problem files, and one-line errors (exit 2)."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from formloop.cli import app
from formloop.sol.ops import parse_op_shape
from formloop.errors import InvalidInput

runner = CliRunner()
PROBLEMS = Path(__file__).parent.parent / "problems"


def sol(*args):
    return runner.invoke(app, ["sol", *args])


def test_appendix_a2_json():
    out = sol("gemm", "--shape", "4096,4096,4096", "--dtype", "fp32", "--chip", "h100", "--clock-mhz", "1500", "--json")
    assert out.exit_code == 0, out.output
    r = json.loads(out.stdout)
    assert (r["flops"], r["bytes"], r["bound"], r["clock_mhz"]) == (2 * 4096 ** 3, 3 * 4 * 4096 ** 2, "compute", 1500)
    assert round(r["variants"]["fp16"] * 1e3, 4) == 0.1834 and round(r["t_memory_s"] * 1e3, 4) == 0.0601
    assert r["source"] == "model" and r["units"]["peak_flops"] == "FLOP/s"


def test_table_names_units_and_source():
    out = sol("gemm", "--shape", "4096,4096,4096", "--chip", "h100", "--clock-mhz", "1500")
    assert out.exit_code == 0
    for text in ("374.77", "TFLOP/s", "0.0601", "ms", "compute-bound", "hand formula"):
        assert text in out.stdout


def test_problem_file_and_named_shape_fields():
    out = sol("--problem", str(PROBLEMS / "level1" / "rmsnorm.py"), "--chip", "gb10", "--json")
    assert out.exit_code == 0, out.output
    r = json.loads(out.stdout)
    assert r["source"] == "dispatch" and r["chip"] == "gb10" and r["bound"] == "memory"
    out = sol("linear", "--shape", "64,256,512,act=gelu,residual=1", "--json")
    assert json.loads(out.stdout)["shape"] == {"M": 64, "N": 256, "K": 512, "bias": 1, "act": "gelu", "residual": 1}
    assert "decoder_layer" in sol("--ops").stdout


@pytest.mark.parametrize("args,message", [
    (("matmul", "--shape", "2,2,2"), "invalid op"),
    (("gemm", "--shape", "2,-3,2"), "gemm N"),
    (("gemm", "--shape", "2,2,2", "--chip", "tpu"), "invalid chip"),
    (("gemm", "--shape", "2,2,2", "--dtype", "int3"), "invalid dtype"),
    (("gemm", "--shape", "2,2,2", "--clock-mhz", "5000"), "clock_mhz"),
    (("gemm", "--shape", "2,2,2", "--chip", "ventus", "--precision", "fp16"), "precision for chip ventus"),
    (("gemm",), "--shape"),
    ((), "operator"),
    (("--problem", "no/such/file.py"), "invalid --problem"),
    (("gemm", "--shape", "2,2", "--problem", __file__), "not both"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    out = sol(*args)
    assert out.exit_code == 2, out.output
    assert message in out.output and "Traceback" not in out.output


def test_missing_get_inputs_is_one_line(tmp_path):
    f = tmp_path / "p.py"
    f.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_init_inputs():\n    return []\n")
    out = sol("--problem", str(f))
    assert out.exit_code == 2 and "get_inputs" in out.output


def test_parse_op_shape():
    assert parse_op_shape("attention", "1,8,2,1,256,64") == {"B": 1, "H": 8, "Hkv": 2, "Sq": 1, "Skv": 256, "D": 64}
    with pytest.raises(InvalidInput):
        parse_op_shape("gemm", "M=1,2,3")
    with pytest.raises(InvalidInput):
        parse_op_shape("gemm", "1,2,3,4")
