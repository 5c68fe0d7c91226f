"""The fp32 attention path of `formloop optimize`: the flash kernel in the Triton interpreter against a
float64 reference (causal tails, GQA, decode, odd head dims, strided views), the precision bound and
the MILP's instance, and the recognizer on every shipped attention problem (SDPA and written-out),
including masks it must refuse."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.library.attention_fp32 import choose_config, precision_for, predicted_error  # noqa: E402
from formloop.optimize.capture import capture  # noqa: E402
from formloop.optimize.recognize import recognize  # noqa: E402
from formloop.sol.problem import load_problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
P = ROOT / "problems"
F = torch.nn.functional


def _ref(q, k, v, causal, scale=None):
    g = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        lq, lk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(lq, lk, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


CASES = [  # B, Hq, Hkv, Lq, Lk, D, causal, Br, Bc
    (1, 4, 2, 37, 37, 64, True, 16, 16),      # causal, GQA, tails in both tiles
    (2, 2, 2, 50, 50, 32, False, 32, 16),     # full, tail
    (2, 8, 2, 1, 70, 64, False, 16, 32),      # decode: four heads packed into one tile, KV tail
    (1, 2, 1, 40, 40, 24, True, 32, 16),      # head dim not a power of two (padded, masked)
    (1, 2, 2, 20, 33, 16, True, 16, 16),      # causal with more keys than queries (top-left aligned)
]


@pytest.mark.parametrize("case", CASES)
def test_kernel_matches_float64(case):
    from formloop.library.attention_fp32_kernel import fp32_attention

    b, hq, hkv, lq, lk, d, causal, br, bc = case
    g = torch.Generator().manual_seed(hash(case) % 1000)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for h, n in ((hq, lq), (hkv, lk), (hkv, lk)))
    out = fp32_attention(q, k, v, causal=causal, config={"Br": br, "Bc": bc})
    ref = _ref(q, k, v, causal)
    assert (out.double() - ref).abs().max().item() < 2e-5
    if causal and lq > 1:   # the mask is real: the full softmax differs where it matters
        assert (out.double() - _ref(q, k, v, False)).abs().max().item() > 1e-2


def test_kernel_reads_strided_views_and_scale():
    from formloop.library.attention_fp32_kernel import fp32_attention

    x = torch.randn(2, 45, 3, 4, 32)                 # [b, n, 3, heads, d]: a fused qkv projection
    q, k, v = x.permute(2, 0, 3, 1, 4)
    assert not q.is_contiguous()
    out = fp32_attention(q, k, v, causal=True, scale=0.3, config={"Br": 16, "Bc": 16})
    assert (out.double() - _ref(q, k, v, True, 0.3)).abs().max().item() < 2e-5


def test_kernel_refuses_bad_input():
    from formloop.errors import InvalidInput
    from formloop.library.attention_fp32_kernel import fp32_attention

    q = torch.randn(1, 3, 8, 16)
    with pytest.raises(InvalidInput, match="heads"):
        fp32_attention(q, torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))
    with pytest.raises(InvalidInput, match="dtype"):
        fp32_attention(q.half(), q, q)                  # mixed storage types
    with pytest.raises(InvalidInput, match="dtype"):
        fp32_attention(q.double(), q.double(), q.double())
    with pytest.raises(InvalidInput, match="Bc"):
        fp32_attention(q, q, q, config={"Bc": 24})


def test_precision_bound_refuses_tf32_at_kernelbench_tolerance():
    prec, preds = precision_for()                    # KernelBench fp32: atol = rtol = 1e-4
    assert prec == "tf32x3" and preds["tf32"] > 1e-4 > preds["tf32x3"]
    assert precision_for(1e-1)[0] == "tf32"
    assert precision_for(1e-1, floor="tf32x3")[0] == "tf32x3"
    assert predicted_error("tf32") / predicted_error("tf32x3") == 2.0 ** 11


def test_tf32_rounding_really_exceeds_the_tolerance():
    """The bound's premise checked by emulation: q and K rounded to TF32 (10 mantissa bits) move the
    output by more than 1e-4, the 3xTF32 split does not."""
    def tf32(x):
        return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 64, 128, generator=g) for _ in range(3))
    ref = _ref(q, k, v, True)
    err_tf32 = (_ref(tf32(q), tf32(k), v, True) - ref).abs().max().item()
    split = lambda x: (tf32(x).double(), (x - tf32(x)).double())  # noqa: E731
    (qh, ql), (kh, kl) = split(q), split(k)
    s3 = (qh @ kh.transpose(-2, -1) + qh @ kl.transpose(-2, -1) + ql @ kh.transpose(-2, -1)) / 128 ** 0.5
    s3 = s3.masked_fill(~torch.ones(64, 64, dtype=torch.bool).tril(), float("-inf"))
    err_x3 = (torch.softmax(s3, -1) @ v.double() - ref).abs().max().item()
    assert err_tf32 > 1e-4 > 1e2 * err_x3


def test_milp_instance_fits_the_chip_for_fp32():
    for shape in ((16, 32, 32, 2048, 2048, 128, True), (8, 32, 8, 4096, 4096, 128, True),
                  (32, 16, 16, 1024, 1024, 64, False)):
        inst = choose_config(*shape, "tf32x3")
        c, d = inst["config"], shape[5]
        assert (c["Br"] + c["S"] * 2 * c["Bc"]) * d * 4 + 1024 <= 227 * 1024   # C1 with 4-byte elements
        assert c["Br"] % c["Bc"] == 0 and "MILP" in inst["source"]
    dec = choose_config(64, 32, 8, 1, 8192, 128, False, "tf32x3")
    assert "outside the prefill template" in dec["source"]


def test_an_attempt_whose_pinned_tile_breaks_a_wall_takes_the_next_feasible_tile():
    """attention_causal (d 128, tf32x3): attempt 3 pins 128x128, which the shared-memory wall rules out (measured on
    the H200: 'no instance'); it takes the next tile, 128x32, inside the wall. Each attempt's tile is the one named."""
    shape = (16, 32, 32, 2048, 2048, 128, True)
    tiles = {k: choose_config(*shape, "tf32x3", attempt=k) for k in range(5)}
    got = {k: (t["config"]["Br"], t["config"]["Bc"]) for k, t in tiles.items()}
    assert got[1] == (128, 64) and got[2] == (64, 32) and got[3] == (128, 32) == got[4]
    for t in tiles.values():
        c = t["config"]
        assert (c["Br"] + c["S"] * 2 * c["Bc"]) * 128 * 4 + 1024 <= 227 * 1024
    assert "tile 128x32 pinned (attempt 3)" in tiles[3]["source"]


EXPECT = {  # problem: (attention regions, causal, Hq // Hkv)
    "level1/attention_causal.py": (1, True, 1), "level1/attention_decode_gqa.py": (1, False, 4),
    "level1/attention_gqa_causal.py": (1, True, 4), "level1/attention_prefill.py": (1, False, 1),
    "level3/mingpt_attention.py": (1, True, 1), "level3/gpt_block.py": (1, True, 1), "level3/vit.py": (2, False, 1),
}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_every_shipped_attention_problem_is_recognized(name):
    rec = recognize(capture(load_problem(P / name, small=True)))
    att = [r for r in rec.regions if r.kind == "attention"]
    n, causal, g = EXPECT[name]
    assert len(att) == n
    for r in att:
        b, hq, hkv, lq, lk, d = r.params["dims"]
        assert r.params["causal"] is causal and hq // hkv == g
    assert not [f for f in rec.fallbacks if f["op"].endswith(("softmax", "matmul", "masked_fill", "triu",
                                                              "scaled_dot_product_attention"))]


def _write(tmp_path: Path, name: str, mask_line: str, fill: str = 'float("-inf")') -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(f'''import math
import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", {mask_line}.view(1, 1, 16, 16))

    def forward(self, q, k, v):
        t = q.size(2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, {fill})
        return F.softmax(att, dim=-1) @ v


def get_inputs():
    return [torch.randn(2, 2, 16, 16) for _ in range(3)]


def get_init_inputs():
    return []
''')
    return p


@pytest.mark.parametrize("mask,ok", [("torch.tril(torch.ones(16, 16))", True),
                                     ("torch.tril(torch.ones(16, 16), diagonal=-1) + torch.eye(16)", True),
                                     ("torch.triu(torch.ones(16, 16))", False),
                                     ("torch.tril(torch.ones(16, 16), diagonal=1)", False),
                                     ("torch.ones(16, 16)", True)])
def test_mask_is_evaluated_not_assumed(tmp_path, mask, ok):
    """A wrong mask (upper triangle, one diagonal too many) is never taken for causal."""
    rec = recognize(capture(load_problem(_write(tmp_path, "masked", mask))))
    att = [r for r in rec.regions if r.kind == "attention"]
    assert bool(att) is ok
    if ok:
        assert att[0].params["causal"] is (mask != "torch.ones(16, 16)")


def test_a_finite_fill_is_not_a_mask(tmp_path):
    rec = recognize(capture(load_problem(_write(tmp_path, "fill", "torch.tril(torch.ones(16, 16))", "-1e4"))))
    assert not [r for r in rec.regions if r.kind == "attention"]


@pytest.mark.parametrize("name", ["level3/gpt_block.py", "level3/vit.py"])
def test_whole_models_assemble_with_attention_and_match_float64(name, tmp_path):
    """Attention inside a model: its q/k/v come from a GEMM region fed by a LayerNorm region, its output
    feeds the projection GEMM; the assembled ModelNew matches the float64 reference."""
    import importlib.util

    from formloop.optimize.assemble import assemble
    from formloop.sol.problem import call_inputs

    prob = load_problem(P / name, small=True)
    cap = capture(prob)
    asm = assemble(cap, recognize(cap), tier="interpreter", small=True)
    assert "attention" in [r["kind"] for r in asm.regions] and not asm.skipped
    f = tmp_path / "model_new.py"
    f.write_text(asm.source)
    spec = importlib.util.spec_from_file_location("model_new", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    init = call_inputs(prob, "get_init_inputs")
    ref = prob.Model(*init).eval()
    new = mod.ModelNew(*init).eval()
    new.load_state_dict(ref.state_dict())
    x = call_inputs(prob, "get_inputs")
    r64 = prob.Model(*init).double().eval()
    r64.load_state_dict(ref.state_dict())
    with torch.no_grad():
        out, truth = new(*x).double(), r64(*[a.double() for a in x])
    assert (out - truth).abs().max().item() < 1e-4


def test_sdpa_with_dropout_or_a_mask_tensor_stays_pytorch(tmp_path):
    p = tmp_path / "sdpa_dropout.py"
    p.write_text('''import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def forward(self, q, k, v, m):
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
        b = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        c = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, scale=0.5)
        return a + b + c


def get_inputs():
    return [torch.randn(1, 2, 16, 16) for _ in range(3)] + [torch.randn(16, 16)]


def get_init_inputs():
    return []
''')
    rec = recognize(capture(load_problem(p)))
    att = [r for r in rec.regions if r.kind == "attention"]
    assert len(att) == 1 and att[0].params["scale"] == 0.5


def test_repeat_interleave_gqa_and_zero_dropout_are_one_region(tmp_path):
    """K/V widened by repeat_interleave (SDPA), and a written-out attention with nn.Dropout(0.0) between
    softmax and P·V: one attention region each, and the assembled ModelNew matches float64."""
    import importlib.util

    from formloop.optimize.assemble import assemble

    p = tmp_path / "gqa_repeat.py"
    p.write_text('''import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)

    def forward(self, q, k, v):
        a = F.scaled_dot_product_attention(q, k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1),
                                           is_causal=True)
        kk, vv = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)
        s = torch.softmax((q @ kk.transpose(-2, -1)) / 4.0, dim=-1)
        return a + self.drop(s) @ vv


def get_inputs():
    return [torch.randn(2, 6, 21, 16), torch.randn(2, 2, 21, 16), torch.randn(2, 2, 21, 16)]


def get_init_inputs():
    return []
''')
    prob = load_problem(p)
    cap = capture(prob)
    rec = recognize(cap)
    att = [r for r in rec.regions if r.kind == "attention"]
    assert len(att) == 2 and att[0].params["dims"][2] == 2 and att[0].params["causal"] is True
    assert att[1].params["scale"] == 0.25 and not att[1].params["causal"]
    asm = assemble(cap, rec, tier="interpreter")
    f = tmp_path / "new.py"
    f.write_text(asm.source)
    spec = importlib.util.spec_from_file_location("gqa_new", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 6, 21, 16, generator=g), torch.randn(2, 2, 21, 16, generator=g), \
        torch.randn(2, 2, 21, 16, generator=g)
    truth = _ref(q, k, v, True) + _ref(q, k, v, False, 0.25)
    assert (mod.ModelNew()(q, k, v).double() - truth).abs().max().item() < 2e-5
