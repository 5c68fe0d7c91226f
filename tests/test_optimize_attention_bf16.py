"""Attention at 16-bit storage (the `--dtype bf16` problem set): both programs of
formloop.library.attention_16bit in the Triton interpreter against a float64 reference computed from
the same bf16 (fp16) inputs, under the harness's bf16 rule (KernelBench's allclose, atol = rtol =
1e-2, formloop.measure.compare.KERNELBENCH_TOLERANCE); wrong kernels (causal flag dropped, scale off,
an off-by-one causal bound) are caught by the same check; the region on the bf16-cast shipped problems
(recognized, the proved prefill or decode program where it applies, the flash kernel elsewhere, the
ModelNew matching float64) and the families' MILP instances on the gpu tier."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.library.attention_16bit import (  # noqa: E402
    attention16, choose_decode, choose_prefill, decode_scope, interpreter_decode, prefill_scope,
)
from formloop.measure.compare import KERNELBENCH_TOLERANCE  # noqa: E402
from formloop.optimize.assemble import assemble  # noqa: E402
from formloop.optimize.capture import capture  # noqa: E402
from formloop.optimize.recognize import recognize  # noqa: E402
from formloop.sol.problem import call_inputs, load_problem  # noqa: E402

P = Path(__file__).resolve().parents[1] / "problems"
PREFILL_TILES = {"Br": 32, "Bc": 16, "S": 1, "W": 4, "GQ": 1, "TM": 0}


def _ref(q, k, v, causal, scale=None, diagonal=0):
    g = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        lq, lk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(lq, lk, dtype=torch.bool).tril(diagonal), float("-inf"))
    return torch.softmax(s, -1) @ v


def _ok(out, ref) -> bool:
    """The harness's rule for the output's type (bf16: allclose at atol = rtol = 1e-2)."""
    tol = KERNELBENCH_TOLERANCE[out.dtype]
    return out.dtype != torch.float32 and torch.allclose(out.double(), ref, atol=tol, rtol=tol)


def _qkv(b, hq, hkv, lq, lk, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g).to(dtype) for h, n in ((hq, lq), (hkv, lk), (hkv, lk))]


CASES = [  # program, B, Hq, Hkv, Lq, Lk, D, causal, scale, dtype
    ("prefill", 1, 4, 2, 37, 37, 32, True, None, torch.bfloat16),    # causal, GQA, tails
    ("prefill", 2, 2, 2, 40, 40, 16, False, None, torch.bfloat16),   # full
    ("prefill", 1, 4, 1, 33, 33, 64, True, None, torch.float16),     # fp16, GQA 4
    ("decode", 2, 8, 2, 1, 70, 64, False, None, torch.bfloat16),     # decode family: GQA packed, 2 splits, tail
    ("decode", 1, 4, 4, 1, 33, 32, False, None, torch.float16),      # decode family, fp16, no GQA
    ("flash", 2, 8, 2, 1, 70, 64, False, None, torch.bfloat16),      # decode, GQA packed, KV tail
    ("flash", 1, 2, 1, 20, 33, 16, True, None, torch.bfloat16),      # cross length, causal top-left
    ("flash", 1, 2, 2, 24, 24, 24, True, 0.3, torch.bfloat16),       # custom scale, head dim 24
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_16bit_kernels_match_float64_under_the_bf16_rule(case):
    prog, b, hq, hkv, lq, lk, d, causal, scale, dtype = case
    q, k, v = _qkv(b, hq, hkv, lq, lk, d, dtype, seed=len(CASES) + lq)
    cfg = {"prefill": PREFILL_TILES, "decode": interpreter_decode(hq, hkv)}.get(prog, {"Br": 16, "Bc": 16})
    out = attention16(q, k, v, program=prog, causal=causal, scale=scale, config=cfg)
    assert out.dtype == dtype and out.shape == q.shape
    ref = _ref(q, k, v, causal, scale)
    assert _ok(out, ref), (out.double() - ref).abs().max().item()
    if causal and lq > 1:   # wrong kernels fail the same check: the mask dropped, the bound off by one
        assert not _ok(attention16(q, k, v, program=prog, causal=False, scale=scale, config=cfg), ref)
        assert not _ok(out, _ref(q, k, v, causal, scale, diagonal=1))
    wrong = 1.25 * (scale if scale is not None else d ** -0.5)
    assert not _ok(attention16(q, k, v, program="flash", causal=causal, scale=wrong, config={"Br": 16, "Bc": 16}),
                   ref)


def test_prefill_reads_views_through_a_copy():
    x = torch.randn(2, 48, 3, 2, 32).to(torch.bfloat16)          # [b, n, 3, heads, d]: a fused qkv projection
    q, k, v = x.permute(2, 0, 3, 1, 4)
    assert not q.is_contiguous()
    out = attention16(q, k, v, program="prefill", causal=True, config=PREFILL_TILES)
    assert _ok(out, _ref(q, k, v, True))


@pytest.mark.parametrize("prog,shape", [("prefill", (1, 2, 2, 20, 20, 24)), ("decode", (1, 8, 2, 1, 12, 32))])
def test_shapes_outside_the_family_run_the_flash_kernel(prog, shape):
    """The integrity battery calls a ModelNew at other shapes: a head dim the prefill family refuses, a
    cache too short for the decode config's splits; the call runs the flash kernel, still correct."""
    b, hq, hkv, lq, lk, d = shape
    q, k, v = _qkv(b, hq, hkv, lq, lk, d, torch.bfloat16, seed=3)
    cfg = PREFILL_TILES if prog == "prefill" else {**interpreter_decode(hq, hkv), "KS": 4}
    out = attention16(q, k, v, program=prog, causal=prog == "prefill", config=cfg)
    assert _ok(out, _ref(q, k, v, prog == "prefill"))


def test_scopes_name_why_not():
    assert prefill_scope(1, 4, 4, 64, 64, 64, None) == prefill_scope(1, 4, 4, 64, 64, 64, 64 ** -0.5) == ""
    assert "Lq=1" in prefill_scope(1, 4, 4, 1, 64, 64, None)
    assert "head dim" in prefill_scope(1, 4, 4, 64, 64, 24, None)
    assert "scale" in prefill_scope(1, 4, 4, 64, 64, 64, 0.3)
    assert decode_scope(1, 8, 2, 1, 64, 64, False, None) == ""
    assert "key 0" in decode_scope(1, 8, 2, 1, 64, 64, True, None)
    assert "Lq=5" in decode_scope(1, 8, 2, 5, 64, 64, False, None)
    assert "query heads" in decode_scope(1, 6, 4, 1, 64, 64, False, None)


def test_prefill_instance_is_the_milp_and_attempts_pin_other_tiles():
    from formloop.library.attention_service import solve

    a0 = choose_prefill(2, 8, 2, 1024, 64, True, "bf16")
    assert a0["config"] == {k: int(v) for k, v in solve("attention-prefill", "2,8,2,64,1024", causal=1)["design"].items()}
    a1 = choose_prefill(2, 8, 2, 1024, 64, True, "bf16", attempt=1)
    assert (a1["config"]["Br"], a1["config"]["Bc"]) != (a0["config"]["Br"], a0["config"]["Bc"])
    assert "pinned" in a1["source"] and a1["predicted_us"] >= a0["predicted_us"] - 1e-9


def test_decode_instance_is_the_milp_and_attempts_pin_other_splits():
    from formloop.library.attention_service import solve

    d0 = choose_decode(4, 32, 8, 4096, 128, "bf16")
    assert d0["config"] == {k: int(v) for k, v in solve("attention-decode", "4,32,8,128,4096", page=0)["design"].items()}
    d1 = choose_decode(4, 32, 8, 4096, 128, "bf16", attempt=1)
    assert (d1["config"]["Bn"], d1["config"]["KS"]) != (d0["config"]["Bn"], d0["config"]["KS"])
    assert "pinned" in d1["source"] and d1["predicted_us"] >= d0["predicted_us"] - 1e-9


EXPECT = {  # problem: (program, causal, Hq // Hkv)
    "attention_causal": ("prefill", True, 1), "attention_gqa_causal": ("prefill", True, 4),
    "attention_prefill": ("prefill", False, 1), "attention_decode_gqa": ("decode", False, 4),
}


def _bf16(prob):
    torch.manual_seed(0)
    return prob.Model(*call_inputs(prob, "get_init_inputs")).to(torch.bfloat16).eval()


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_bf16_problem_gets_the_region_and_matches_float64(name, tmp_path):
    prob = load_problem(P / "level1" / f"{name}.py", small=True)
    cap = capture(prob, torch.bfloat16)
    rec = recognize(cap)
    att = [r for r in rec.regions if r.kind == "attention"]
    prog, causal, g = EXPECT[name]
    assert len(att) == 1 and att[0].implementer == "attention-16bit" and att[0].params["dtype"] == "bf16"
    b, hq, hkv, lq, lk, d = att[0].params["dims"]
    assert att[0].params["causal"] is causal and hq // hkv == g
    asm = assemble(cap, rec, tier="interpreter", small=True)
    assert not asm.skipped and [r["design"]["program"] for r in asm.regions] == [prog]
    assert "scaled_dot_product_attention" not in asm.source.split("def _graph_forward", 1)[1]
    notes = " ".join(n for r in asm.regions for n in r["notes"])
    assert (f"proved attention-{prog} program" in notes) is (prog != "flash")
    assert ("not the proved" in notes) is (prog == "flash")
    f = tmp_path / "model_new.py"
    f.write_text(asm.source)
    spec = importlib.util.spec_from_file_location("model_new", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    new = mod.ModelNew(*call_inputs(prob, "get_init_inputs")).to(torch.bfloat16).eval()
    x = [t.to(torch.bfloat16) for t in call_inputs(prob, "get_inputs")]
    with torch.no_grad():
        out = new(*x)
        truth = prob.Model(*call_inputs(prob, "get_init_inputs")).double().eval()(*[t.double() for t in x])
    assert _ok(out, truth)


@pytest.mark.parametrize("name", ["mingpt_attention", "vit", "decoder_layer_qwen3"])
def test_bf16_models_keep_attention_as_a_region(name):
    rec = recognize(capture(load_problem(P / "level3" / f"{name}.py", small=True), torch.bfloat16))
    att = [r for r in rec.regions if r.kind == "attention"]
    assert att and all(r.implementer == "attention-16bit" for r in att)
    assert not [f for f in rec.fallbacks if f["op"].endswith(("softmax", "scaled_dot_product_attention"))]
