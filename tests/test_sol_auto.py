"""Automatic SOL of the shipped problems at their full (KernelBench) sizes, on meta tensors: it agrees
with the hand formula wherever a problem names one, with torch's own FLOP counter on all matmul-class
work (causal attention adjusted by the hand formula), and with independent per-problem formulas for the
fused and whole-model problems. Problem files with defects are refused with a message naming the defect."""
import functools
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from formloop.errors import FormloopError, InvalidInput, StructureError, UnknownName
from formloop.sol import sol_report
from formloop.sol.auto import meta_problem, sol_for_problem
from formloop.sol.ops import causal_pairs
from formloop.sol.problem import load_problem

ROOT = Path(__file__).parent.parent / "problems"
PROBLEMS = sorted(p for p in ROOT.rglob("*.py") if not p.name.startswith("_"))
BY_NAME = {p.stem: p for p in PROBLEMS}


@functools.lru_cache(maxsize=None)
def auto_sol(path: Path, small: bool = False):
    """One automatic SOL per problem and size, shared by the checks below."""
    return sol_for_problem(load_problem(path, small=small), "h100")


def test_suite_size_levels_and_hints():
    assert len(PROBLEMS) >= 40
    levels = [load_problem(p).level for p in PROBLEMS]
    assert {1, 2, 3} <= set(levels) and None not in levels
    assert sum(bool(load_problem(p).SOL) for p in PROBLEMS) >= 30


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_auto_equals_hand_formula_full_and_small(path):
    for small in (False, True):
        problem = load_problem(path, small=small)
        auto = auto_sol(path, small)
        assert auto.source == "dispatch" and not auto.uncounted and not auto.lower_bound
        if small:   # CPU tests run the reference at this size
            assert auto.bytes <= 16 << 20 and auto.flops <= 1e8
        else:       # the GPU table runs it at this size
            assert auto.bytes <= 32e9
        if problem.SOL is None:
            continue
        hand = sol_report(problem.SOL["op"], problem.SOL["shape"], auto.dtype, "h100")
        assert (auto.matmul_flops, auto.vector_flops, auto.bytes) == (hand.matmul_flops, hand.vector_flops, hand.bytes)
        assert auto.time_floor_s == hand.time_floor_s and auto.bound == hand.bound


# Causal attention sites per problem, (batch x heads, Sq, Skv, head dim) from the problem's constants:
# torch's counter charges them dense; the kept pairs are the hand formula's.
CAUSAL = {
    "attention_causal": lambda m: [(m.B * m.H, m.S, m.S, m.D)],
    "attention_gqa_causal": lambda m: [(m.B * m.H, m.S, m.S, m.D)],
    "decoder_layer_qwen3": lambda m: [(m.B * m.H, m.S, m.S, m.DH)],
    "mingpt_attention": lambda m: [(m.B * m.H, m.T, m.T, m.C // m.H)],
    "gpt_block": lambda m: [(m.B * m.H, m.T, m.T, m.C // m.H)],
}


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_torch_flop_counter_agrees_on_matmul_work(path):
    problem = load_problem(path)
    model, inputs, _ = meta_problem(problem)
    with torch.device("meta"), FlopCounterMode(display=False) as fc, torch.no_grad():
        model(*inputs)
    expected = fc.get_total_flops()
    for heads, sq, skv, d in CAUSAL.get(path.stem, lambda m: [])(problem.module):
        expected += 4 * heads * d * (causal_pairs(sq, skv) - sq * skv)
    assert auto_sol(path).matmul_flops == expected


def _linear_vec(m, n, bias=True):
    return m * n if bias else 0


def _ln(rows, d, affine=2):
    return rows * ((5 + affine) * d + 2)


def _bn(n, c, hw):
    return c * (5 * n * hw + 2) + 2 * n * c * hw + 7 * c + 1


def _causal_softmax_vec(heads, t):
    return heads * (5 * causal_pairs(t, t) - 2 * t)


def _vector_gpt_block(m):
    bt, c, heads = m.B * m.T, m.C, m.B * m.H
    pairs = heads * causal_pairs(m.T, m.T)
    return (2 * _ln(bt, c) + _linear_vec(bt, 3 * c) + pairs + pairs + _causal_softmax_vec(heads, m.T)
            + _linear_vec(bt, c) + bt * c + _linear_vec(bt, 4 * c) + 9 * bt * 4 * c + _linear_vec(bt, c) + bt * c)


def _vector_mingpt(m):
    bt, c, heads = m.B * m.T, m.C, m.B * m.H
    return (_linear_vec(bt, 3 * c) + heads * causal_pairs(m.T, m.T) + _causal_softmax_vec(heads, m.T)
            + _linear_vec(bt, c))


def _vector_resnet(m):
    hw = m.H * m.H
    return (2 * _bn(m.N, m.WIDTH, hw) + _bn(m.N, m.C, hw) + 2 * m.N * m.WIDTH * hw
            + 2 * m.N * m.C * hw)   # three BNs, two ReLUs on the narrow maps, add and ReLU on the wide one


# Vector FLOPs of the problems with no single hand formula, written from their definitions.
VECTOR = {
    "gemm_scale_clamp": lambda m: m.M * m.N * (1 + 1 + 2),                       # bias, scale, two-sided clamp
    "gateup_silu_mul": lambda m: m.M * m.FF * 3,                                  # silu 2, multiply 1
    "gemm_logsumexp": lambda m: m.M * m.N + 4 * m.M * m.N,                        # bias, logsumexp
    "gemm_softmax": lambda m: m.M * (5 * m.N - 2),
    "linear_residual_layernorm": lambda m: 2 * m.M * m.D + _ln(m.M, m.D),         # bias, residual, norm
    "conv_bn_relu": lambda m: _bn(m.N, m.K, m.H * m.W) + m.N * m.K * m.H * m.W,
    "mlp": lambda m: sum(m.BATCH * n for n in m.SIZES[1:]) + sum(m.BATCH * n for n in m.SIZES[1:-1]),
    "resnet_bottleneck": _vector_resnet,
    "mingpt_attention": _vector_mingpt,
    "gpt_block": _vector_gpt_block,
    "unfold_patches": lambda m: 0,
}
# A causal softmax is charged on its kept share of each row (rows differ in length): allow 0.1%.
VECTOR_TOLERANCE = {"mingpt_attention": 1e-3, "gpt_block": 1e-3}


@pytest.mark.parametrize("name", sorted(VECTOR))
def test_vector_flops_of_composite_problems(name):
    problem = load_problem(BY_NAME[name])
    got = auto_sol(BY_NAME[name]).vector_flops
    assert got == pytest.approx(VECTOR[name](problem.module), rel=VECTOR_TOLERANCE.get(name, 0))


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_bytes_are_inputs_weights_and_outputs(path):
    """Independent of the tracer: module introspection on the meta device plus the output's size."""
    problem = load_problem(path)
    model, inputs, _ = meta_problem(problem)
    with torch.device("meta"), torch.no_grad():
        out = model(*inputs)
    expected = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    expected += sum(p.numel() * p.element_size() for p in model.parameters())
    for name, b in model.named_buffers():
        if name.endswith(("running_mean", "running_var", "num_batches_tracked")):
            expected += 2 * b.numel() * b.element_size()        # read and updated in place
    outs = out if isinstance(out, (tuple, list)) else [out]
    expected += sum(t.numel() * t.element_size() for t in outs)
    assert auto_sol(path).bytes == expected


def test_dtype_override_halves_bytes_only():
    p = BY_NAME["swiglu_mlp"]
    a, b = sol_for_problem(p, "h200"), sol_for_problem(p, "h200", dtype="bf16")
    assert (b.dtype, a.dtype) == ("bf16", "fp32")
    assert a.bytes == 2 * b.bytes and a.flops == b.flops
    assert b.compute_precision == "bf16" and a.compute_precision == "tf32"


def test_floor_note_names_data_and_arithmetic_apart():
    # a bf16 elementwise problem stores bf16 and computes in fp32 on the SIMT units: the note says both
    relu = sol_for_problem(BY_NAME["relu"], "h200", dtype="bf16")
    assert (relu.dtype, relu.compute_precision) == ("bf16", "fp32")
    assert relu.precision_words == "bf16 data, fp32 arithmetic"
    assert sol_for_problem(BY_NAME["swiglu_mlp"], "h200", dtype="bf16").precision_words == "bf16"


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
    "needs_data.py": ("import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                      "        return x[x > 0]\n\ndef get_inputs():\n    return [torch.randn(4)]\n"
                      "def get_init_inputs():\n    return []\n", "Model.forward failed on meta tensors"),
    "cpu_tensor.py": (GOOD + "def get_inputs():\n    return [torch.randn(4, device='cpu')]\n"
                      "def get_init_inputs():\n    return []\n", "made on cpu"),
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


def test_training_mode_by_default_eval_on_request():
    """KernelBench never calls .eval(): batch statistics by default, running statistics in eval mode."""
    p = BY_NAME["batch_norm"]
    train, evaluated = sol_for_problem(p, "h100"), sol_for_problem(p, "h100", eval_mode=True)
    m = load_problem(p).module
    n = m.N * m.C * m.H * m.W
    assert evaluated.vector_flops == 2 * m.C + 4 * n           # (x - mean) * rsqrt(var + eps), scale, shift
    assert train.vector_flops == m.C * (5 * n // m.C + 2) + 2 * n + 7 * m.C + 1   # batch statistics
    assert train.bytes - evaluated.bytes == 2 * m.C * 4 + 16  # running stats written back, step counter
