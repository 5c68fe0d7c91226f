"""The optimize recognizer and assembler, without running kernels: which regions a captured graph
splits into, what falls back (with its reason), and what the assembled ModelNew holds."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from formloop.optimize.capture import CaptureFailed, capture  # noqa: E402
from formloop.optimize.recognize import recognize  # noqa: E402
from formloop.sol.problem import load_problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems"


def _write(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text("import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n" + body)
    return p


def test_linear_bias_relu_is_one_gemm_region():
    cap = capture(load_problem(PROBLEMS / "level2" / "linear_bias_relu.py", small=True))
    rec = recognize(cap)
    assert rec.fallbacks == []
    assert len(rec.regions) == 1
    r = rec.regions[0]
    assert r.kind == "gemm-epilogue"
    assert [n.name for n in r.nodes] == ["proj", "relu"]
    assert r.params["chain"] == ["bias(axis=row,name=bias)", "relu"]
    assert r.params["lb"] == "col" and r.params["op"] == "gemm"
    assert r.params["dims"] == [64, 256, 512]          # SMALL M, N, K
    assert rec.covered_nodes == rec.compute_nodes == 2


def test_scale_and_clamp_join_the_chain_and_residual_is_a_tile_add():
    rec = recognize(capture(load_problem(PROBLEMS / "level2" / "gemm_scale_clamp.py", small=True)))
    assert rec.regions[0].params["chain"] == ["bias(axis=row,name=bias)", "scale(by=0.5)", "clamp(lo=-1.0,hi=1.0)"]
    rec = recognize(capture(load_problem(PROBLEMS / "level2" / "linear_residual.py", small=True)))
    r = rec.regions[0]
    assert r.params["chain"] == ["add(name=t0)"] and r.params["bias"] is None
    assert r.params["tensors"]["t0"].name == "residual"


def test_unknown_operator_falls_back_with_its_reason(tmp_path):
    p = _write(tmp_path, "fc_cumprod", '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 16)

    def forward(self, x):
        return torch.cumprod(torch.relu(self.fc(x)), dim=1)


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
''')
    rec = recognize(capture(load_problem(p)))
    assert [[n.name for n in r.nodes] for r in rec.regions] == [["fc", "relu"]]
    assert len(rec.fallbacks) == 1
    fb = rec.fallbacks[0]
    assert "cumprod" in fb["op"] and "no region implementer" in fb["reason"]


def test_unknown_operator_alone_keeps_the_reference():
    rec = recognize(capture(load_problem(PROBLEMS.parent / "tests" / "fixtures" / "optimize" / "row_cumprod.py",
                                         small=True)))
    assert rec.regions == [] and "cumprod" in rec.fallbacks[0]["op"]


def test_a_value_with_two_users_ends_the_chain(tmp_path):
    p = _write(tmp_path, "two_users", '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 16)

    def forward(self, x):
        h = self.fc(x)
        return torch.relu(h) + torch.sigmoid(h)


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
''')
    rec = recognize(capture(load_problem(p)))
    # h is read twice: the GEMM's chain stops at fc; the rest are elementwise regions reading h
    assert [(r.kind, [n.name for n in r.nodes]) for r in rec.regions] == [
        ("gemm-epilogue", ["fc"]), ("elementwise", ["relu", "add"]), ("elementwise", ["sigmoid"])]
    assert rec.regions[1].params["x"].name == "fc" and rec.regions[1].params["tensors"]["t0"].name == "sigmoid"
    assert rec.fallbacks == []


def test_bmm_with_transposed_operand_reads_it_by_columns(tmp_path):
    p = _write(tmp_path, "scores", '''
class Model(nn.Module):
    def forward(self, q, k):
        return torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.125, dim=-1)


def get_inputs():
    return [torch.randn(2, 16, 32), torch.randn(2, 64, 32)]


def get_init_inputs():
    return []
''')
    r = recognize(capture(load_problem(p))).regions[0]
    assert r.params["op"] == "batched_gemm" and r.params["lb"] == "col"
    assert r.params["dims"] == [2, 16, 64, 32]
    assert r.params["chain"] == ["scale(by=0.125)", "softmax"]


def test_untraceable_model_is_not_captured(tmp_path):
    p = _write(tmp_path, "branchy", '''
class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
''')
    with pytest.raises(CaptureFailed, match="torch.fx could not trace"):
        capture(load_problem(p))


def test_assembled_model_new_keeps_the_reference_parameters():
    from formloop.optimize.assemble import assemble

    cap = capture(load_problem(PROBLEMS / "level2" / "linear_bias_relu.py", small=True))
    asm = assemble(cap, recognize(cap), tier="interpreter", small=True)
    assert len(asm.regions) == 1 and not asm.skipped
    src = asm.source
    assert "class ModelNew(torch.nn.Module)" in src and "gemm_chain" in src
    assert "torch.relu" not in src                                   # the activation is fused
    d = asm.regions[0]["design"]
    assert d["config"]["KS"] == 1 and d["config"]["L"] == 0          # interpreter tier pins
    assert d["chain"] == "bias(axis=row,name=bias) >> relu"
    ns: dict = {}
    exec(compile(src, "<modelnew>", "exec"), ns)
    ref = cap.problem.build()
    new = ns["ModelNew"](*cap.init_inputs)
    assert list(new.state_dict()) == list(ref.state_dict())


def test_vector_regions_take_row_ops_and_elementwise_chains(tmp_path):
    p = _write(tmp_path, "mixed", '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(32)

    def forward(self, x, y):
        h = torch.sigmoid(x) * y                 # elementwise chain: sigmoid >> mul(y)
        a = torch.softmax(self.norm(h), dim=-1)  # two row-wise regions
        b = torch.softmax(x, dim=0)              # not the last dimension: stays PyTorch
        return a, b


def get_inputs():
    return [torch.randn(8, 32), torch.randn(8, 32)]


def get_init_inputs():
    return []
''')
    rec = recognize(capture(load_problem(p)))
    kinds = [(r.kind, [n.name for n in r.nodes]) for r in rec.regions]
    assert kinds == [("elementwise", ["sigmoid", "mul"]), ("rowwise", ["norm"]), ("rowwise", ["softmax"])]
    assert rec.regions[0].params["chain"] == ["sigmoid", "mul(name=t0)"]
    assert rec.regions[1].params["op"] == "layernorm" and rec.regions[1].params["weight"] == "norm.weight"
    assert [f["node"] for f in rec.fallbacks] == ["softmax_1"]


def test_rmsnorm_problem_is_one_rowwise_region():
    rec = recognize(capture(load_problem(PROBLEMS / "level1" / "rmsnorm.py", small=True)))
    assert [(r.kind, r.params["op"]) for r in rec.regions] == [("rowwise", "rmsnorm")]
    assert rec.fallbacks == []


def test_an_agents_spec_fixes_the_gemm_instance(tmp_path):
    from formloop.optimize.attempt import build

    spec = "kernel mine = gemm {\n a = fp32 row\n b = fp32 col\n c = fp32 row\n arch = sm90\n tile = 32 x 64 x 32\n" \
           " split_k = 1\n load = ptr\n}\n"
    r = build(str(PROBLEMS / "level2" / "linear_bias_relu.py"), small=True, tier="interpreter", attempt=0,
              out_dir=str(tmp_path), spec=spec, prefix="s")
    d = r["regions"][0]["design"]
    assert (d["config"]["Tm"], d["config"]["Tn"], d["config"]["Tk"]) == (32, 64, 32)
    assert d["solver"] == "agent spec" and d["chain"] == "bias(axis=row,name=bias) >> relu"   # the problem's chain
    assert Path(r["candidate"]).name == "linear_bias_relu_s0.py"
    bad = spec.replace("kernel mine = gemm", "kernel mine = batched_gemm")
    r = build(str(PROBLEMS / "level2" / "linear_bias_relu.py"), small=True, tier="interpreter", attempt=1,
              out_dir=str(tmp_path), spec=bad, prefix="s")
    assert r["candidate"] is None and "no region got an instance" in r["reason"]
