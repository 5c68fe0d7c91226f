"""Automatic SOL: dispatch-level counting agrees with the hand formula on every shipped problem
that names one, with torch's own FLOP counter on GEMM-class work, and problem files with defects
are refused with a message that names the defect."""
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from formloop.errors import FormloopError, InvalidInput, StructureError, UnknownName
from formloop.sol import sol_report
from formloop.sol.auto import count_module, sol_for_problem
from formloop.sol.problem import call_inputs, load_problem

PROBLEMS = sorted((Path(__file__).parent.parent / "problems").glob("*.py"))


def test_suite_size_and_hints():
    assert len(PROBLEMS) >= 20
    with_hint = [p for p in PROBLEMS if load_problem(p).SOL]
    assert len(with_hint) >= 20


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_auto_equals_hand_formula(path):
    problem = load_problem(path)
    auto = sol_for_problem(problem, "h100")
    assert auto.source == "dispatch" and not auto.notes      # every operator had a rule
    if problem.SOL is None:
        pytest.skip("no hand formula")
    hand = sol_report(problem.SOL["op"], problem.SOL["shape"], auto.dtype, "h100")
    assert (auto.matmul_flops, auto.vector_flops, auto.bytes) == (hand.matmul_flops, hand.vector_flops, hand.bytes)
    assert auto.time_floor_s == hand.time_floor_s and auto.bound == hand.bound


GEMM_CLASS = ["gemm_square", "gemm_skinny", "bmm_heads", "linear_bias_relu", "linear_residual",
              "conv2d_3x3", "conv2d_patch_embed", "swiglu_mlp"]


@pytest.mark.parametrize("name", GEMM_CLASS)
def test_torch_flop_counter_agrees_on_matmul_work(name):
    problem = load_problem(PROBLEMS[0].parent / f"{name}.py")
    model, inputs = problem.build(), call_inputs(problem)
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(*inputs)
    counts, _ = count_module(model, inputs)
    assert counts.matmul_flops == fc.get_total_flops()


def test_dtype_override_halves_bytes_only():
    p = PROBLEMS[0].parent / "swiglu_mlp.py"
    a, b = sol_for_problem(p, "h200"), sol_for_problem(p, "h200", dtype="bf16")
    assert (b.dtype, a.dtype) == ("bf16", "fp32")
    assert a.bytes == 2 * b.bytes and a.flops == b.flops
    assert b.compute_precision == "bf16" and a.compute_precision == "tf32"


def test_uncounted_operators_are_reported_not_dropped(tmp_path):
    f = tmp_path / "cumsum.py"
    f.write_text("import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n"
                 "    def forward(self, x):\n        return torch.cumsum(x, 0)\n\n"
                 "def get_inputs():\n    return [torch.randn(8)]\n\ndef get_init_inputs():\n    return []\n")
    r = sol_for_problem(f, "h100")
    assert any("cumsum" in n for n in r.notes) and r.bytes == 2 * 8 * 4


GOOD = "import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x + x\n\n"
CASES = {
    "no_inputs.py": (GOOD + "def get_init_inputs():\n    return []\n", "get_inputs"),
    "no_init.py": (GOOD + "def get_inputs():\n    return [torch.randn(2)]\n", "get_init_inputs"),
    "no_model.py": ("import torch\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n", "Model"),
    "not_module.py": ("class Model:\n    pass\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n",
                      "torch.nn.Module"),
    "syntax.py": ("def get_inputs(:\n", "syntax error at line 1"),
    "raises.py": ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
    "bad_hint.py": (GOOD + "SOL = {'op': 'gemm'}\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n",
                    "SOL hint"),
    "inputs_not_list.py": (GOOD + "def get_inputs():\n    return 3\ndef get_init_inputs():\n    return []\n",
                           "get_inputs\\(\\) returned int"),
}


@pytest.mark.parametrize("fname", sorted(CASES))
def test_malformed_problem_files(tmp_path, fname):
    text, message = CASES[fname]
    f = tmp_path / fname
    f.write_text(text)
    with pytest.raises(StructureError, match=message):
        sol_for_problem(f, "h100")


def test_bad_paths_and_names(tmp_path):
    with pytest.raises(InvalidInput, match="problem path"):
        load_problem(tmp_path / "missing.py")
    with pytest.raises(InvalidInput, match="problem path"):
        load_problem(tmp_path)
    (tmp_path / "h.py").write_text(GOOD + "SOL = {'op': 'gemmm', 'shape': {}}\n"
                                   "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    with pytest.raises(UnknownName, match="gemmm"):
        load_problem(tmp_path / "h.py")
    with pytest.raises(UnknownName, match="chip"):
        sol_for_problem(PROBLEMS[0], "z100")
    with pytest.raises(FormloopError, match="dtype"):
        sol_for_problem(PROBLEMS[0], "h100", dtype="int8")
