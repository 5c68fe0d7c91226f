"""Automatic SOL never allocates: problems whose tensors total many GB are counted in a process whose
address space is capped far below that. Meta tensors count exactly what real tensors count. Causal
attention is counted causal however it is written; an operator without a rule makes the bound a
labelled lower bound. The SMALL-size convention rebinds constants and refuses what it cannot."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from formloop.errors import StructureError
from formloop.sol import sol_report
from formloop.sol.auto import count_module, sol_for_problem, traced_problem
from formloop.sol.problem import call_inputs, load_problem

ROOT = Path(__file__).parent.parent / "problems"
SRC = Path(__file__).parent.parent / "src"
PROBLEMS = sorted(p for p in ROOT.rglob("*.py") if not p.name.startswith("_"))

CAPPED = textwrap.dedent("""
    import json, resource, sys
    import torch
    from formloop.sol.auto import sol_for_problem
    from formloop.sol.problem import load_problem
    sol_for_problem(load_problem(sys.argv[1], small=True), "h100")          # first-use imports
    vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
    cap = vm + (512 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:                                    # the cap is real: one input of the problem does not fit
        torch.empty(4096, 393216)
        control = "allocated"
    except (MemoryError, RuntimeError):
        control = "refused"
    out = {"cap": cap, "control": control, "reports": []}
    for path in sys.argv[1:]:
        r = sol_for_problem(load_problem(path), "h100")
        out["reports"].append([r.matmul_flops, r.vector_flops, r.bytes])
    print(json.dumps(out))
""")


def test_never_allocates_under_an_address_space_cap():
    paths = [ROOT / "level1" / n for n in ("relu.py", "group_norm.py", "softmax_rows.py", "gemm_square.py")]
    paths += [ROOT / "level3" / n for n in ("vit.py", "decoder_layer_qwen3.py")]
    proc = subprocess.run([sys.executable, "-c", CAPPED, *map(str, paths)], capture_output=True, text=True,
                          timeout=600, env={"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["control"] == "refused"
    for path, counts in zip(paths, out["reports"]):
        uncapped = sol_for_problem(path, "h100")
        assert counts == [uncapped.matmul_flops, uncapped.vector_flops, uncapped.bytes]
    # relu, group_norm, softmax_rows: 12.9-15 GB of tensors each, counted in a few hundred MB more than torch
    assert all(counts[2] > 4 * out["cap"] for counts in out["reports"][:3])


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_meta_counts_equal_real_tensor_counts_at_small_size(path):
    """The same reference run on real CPU tensors (small size) is counted exactly like its meta run."""
    problem = load_problem(path, small=True)
    meta = sol_for_problem(problem, "h100")
    counts, mode = count_module(*traced_problem(problem, device="cpu"))
    assert not mode.uncounted
    assert (counts.matmul_flops, counts.vector_flops, counts.bytes) == \
        (meta.matmul_flops, meta.vector_flops, meta.bytes)


CAUSAL_FORMS = {
    "sdpa_is_causal": "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
    "sdpa_tril_bool_mask": "F.scaled_dot_product_attention(q, k, v,"
                           " attn_mask=torch.ones(S, S, dtype=torch.bool).tril())",
    "masked_fill_tril_eq_0": "torch.softmax((q @ k.transpose(-2, -1)).masked_fill(torch.tril(torch.ones(S, S)) == 0,"
                             " float('-inf')), -1) @ v",
    "inplace_masked_fill_triu": "torch.softmax((q @ k.transpose(-2, -1)).masked_fill_("
                                "torch.ones(S, S, dtype=torch.bool).triu(1), float('-inf')), -1) @ v",
    "additive_triu_minus_inf": "torch.softmax(q @ k.transpose(-2, -1) * 0.125"
                               " + torch.full((S, S), float('-inf')).triu(1), -1) @ v",
    "where_tril": "torch.softmax(torch.where(torch.ones(S, S).tril().bool(), q @ k.transpose(-2, -1), float('-inf')),"
                  " -1) @ v",
}


def _attention_problem(tmp_path, name, expr, extra=""):
    f = tmp_path / f"{name}.py"
    f.write_text("import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n"
                 "B, H, S, D = 2, 3, 40, 16\n" + extra +
                 "class Model(nn.Module):\n    def forward(self, q, k, v):\n        return " + expr + "\n"
                 "def get_inputs():\n    return [torch.randn(B, H, S, D) for _ in range(3)]\n"
                 "def get_init_inputs():\n    return []\n")
    return f


@pytest.mark.parametrize("form", sorted(CAUSAL_FORMS))
def test_causal_attention_counted_causal_however_written(tmp_path, form):
    f = _attention_problem(tmp_path, form, CAUSAL_FORMS[form])
    hand = sol_report("attention_prefill", {"B": 2, "H": 3, "Hkv": 3, "S": 40, "D": 16, "causal": 1}, "fp32", "h100")
    auto = sol_for_problem(f, "h100")
    assert auto.matmul_flops == hand.matmul_flops and not auto.lower_bound
    counts, _ = count_module(*traced_problem(load_problem(f), device="cpu"))   # real tensors agree
    assert counts.matmul_flops == hand.matmul_flops


def test_data_masks_are_counted_dense_with_a_note(tmp_path):
    f = _attention_problem(tmp_path, "data_mask", "F.scaled_dot_product_attention(q, k, v, attn_mask=self_mask(S))",
                           "def self_mask(s):\n    return torch.rand(s, s) > 0.5\n")
    auto = sol_for_problem(f, "h100")
    dense = sol_report("attention_prefill", {"B": 2, "H": 3, "Hkv": 3, "S": 40, "D": 16, "causal": 0}, "fp32", "h100")
    assert auto.matmul_flops == dense.matmul_flops
    assert any("data-dependent" in n for n in auto.notes)


def test_operator_without_rule_is_listed_and_the_bound_labelled_lower(tmp_path):
    f = tmp_path / "lgamma.py"
    f.write_text("import torch\nfrom torch import nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                 "        return torch.lgamma(x).relu()\n\ndef get_inputs():\n    return [torch.randn(8, 4)]\n\n"
                 "def get_init_inputs():\n    return []\n")
    r = sol_for_problem(f, "h100")
    assert r.lower_bound and r.uncounted == ("aten::lgamma x1",) and r.vector_flops == 32     # the relu only
    assert any("LOWER bound" in n for n in r.notes) and r.as_dict()["lower_bound"] is True
    assert r.bytes == 2 * 32 * 4


def test_small_convention_rebinds_constants(tmp_path):
    full, small = load_problem(ROOT / "level1" / "gemm_square.py"), load_problem(ROOT / "level1" / "gemm_square.py",
                                                                                 small=True)
    assert (full.module.M, small.module.M, small.small, full.small) == (8192, 256, True, False)
    assert small.SOL["shape"] == {"M": 256, "N": 256, "K": 256} and full.level == small.level == 1
    vit = load_problem(ROOT / "level3" / "vit.py", small=True)
    assert [t.shape[-1] for t in call_inputs(vit)] == [32]
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nM = 4\nSMALL = {'M': 2, 'Q': 3}\nclass Model(torch.nn.Module):\n    pass\n"
                   "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    with pytest.raises(StructureError, match="SMALL names Q"):
        load_problem(bad, small=True)
    assert load_problem(bad).module.M == 4                # without small=True the file runs as written
    bad.write_text(bad.read_text().replace("SMALL = {'M': 2, 'Q': 3}", "SMALL = dict(M=2)"))
    with pytest.raises(StructureError, match="literal"):
        load_problem(bad, small=True)
    bad.write_text(bad.read_text().replace("SMALL = dict(M=2)", "SMALL = {'M': 2}\nLEVEL = 4"))
    with pytest.raises(StructureError, match="LEVEL"):
        load_problem(bad)
