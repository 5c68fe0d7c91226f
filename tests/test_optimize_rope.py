"""Rotate-half RoPE as one `formloop optimize` region (formloop.optimize.rope_region) and its family
(formloop.library.rope, rope_kernel), at SMALL sizes in the Triton interpreter: the region and its nodes on
problems/level2/rope.py and on written variants (commuted, sliced, split, [1, S, 1, D] tables, bf16), the
assembled ModelNew against the float64 reference on random and scaled inputs, the named refusals, and the
MILP's design against brute-force enumeration."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.errors import InvalidInput  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library.rope import rope, solved_design, workload  # noqa: E402
from formloop.library.rope_kernel import RopeConfig, RopeProgram, reference, rope_apply, table_view  # noqa: E402
from formloop.optimize.assemble import assemble  # noqa: E402
from formloop.optimize.capture import capture  # noqa: E402
from formloop.optimize.recognize import recognize  # noqa: E402
from formloop.sol.problem import load_problem  # noqa: E402
from formloop.solve import enumerate_designs, solve_milp  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "problems"
HEAD = '''import torch
from torch import nn
B, S, H, D = 2, 8, 3, 16
SMALL = {"B": 2, "S": 8, "H": 3, "D": 16}
XS, CS = (B, S, H, D), (S, 1, D)


class Model(nn.Module):
    def forward(self, x, cos, sin):
'''
TAIL = '''

def get_inputs():
    return [torch.randn(*XS), torch.randn(*CS), torch.randn(*CS)]


def get_init_inputs():
    return []
'''
VARIANTS = {   # forward bodies the region takes (x, cos, sin as given; XS / CS overridden per variant)
    "commuted-sliced": "        h = x.shape[-1] // 2\n        rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)\n"
                       "        return sin * rot + cos * x",
    "split-4d-tables": "        a, b = torch.split(x, D // 2, dim=-1)\n        return x * cos + torch.cat([-b, a], -1) * sin",
    "heads-first": "        a, b = x.chunk(2, dim=-1)\n        return torch.add(x * cos, torch.cat((-b, a), dim=3) * sin)",
}
SHAPES = {"commuted-sliced": "", "split-4d-tables": "XS, CS = (B, S, H, D), (1, S, 1, D)\n",
          "heads-first": "XS, CS = (B, H, S, D), (S, D)\n"}
REFUSED = {   # forward bodies the region refuses, and the reason's words
    "cat-on-heads": ("        a, b = x.chunk(2, dim=2)\n        return x * cos + torch.cat((-b, a), dim=2) * sin",
                     "XS, CS = (B, S, 4, D), (S, 1, D)\n", "cat is along dim 2"),
    "cos-grows-x": ("        a, b = x.chunk(2, dim=-1)\n        return x * cos + torch.cat((-b, a), dim=-1) * sin",
                    "XS, CS = (1, S, H, D), (2, S, 1, D)\n", "does not broadcast to x"),
    "cos-per-row": ("        a, b = x.chunk(2, dim=-1)\n        return x * cos + torch.cat((-b, a), dim=-1) * sin",
                    "XS, CS = (B, S, H, D), (S, 1, 1)\n", "with a last dim of 16"),
    "other-sign": ("        a, b = x.chunk(2, dim=-1)\n        return x * cos + torch.cat((b, -a), dim=-1) * sin",
                   "", "other sign convention"),
}


def _write(tmp_path: Path, name: str, body: str, shapes: str) -> str:
    p = tmp_path / f"{name.replace('-', '_')}.py"
    p.write_text(HEAD.replace("XS, CS = (B, S, H, D), (S, 1, D)\n", shapes or "XS, CS = (B, S, H, D), (S, 1, D)\n")
                 + body + "\n" + TAIL)
    return str(p)


def _model_new(path: str, dtype=None):
    cap = capture(load_problem(path, small=True), precision=dtype)
    rec = recognize(cap)
    asm = assemble(cap, rec, tier="interpreter", small=True)
    ns: dict = {}
    exec(compile(asm.source, path + ".new", "exec"), ns)  # noqa: S102 - the assembled source, as the harness runs it
    return rec, asm, ns["ModelNew"](), load_problem(path, small=True).Model()


def _check(path: str, dtype=torch.float32, tol=2e-6):
    rec, asm, new, ref = _model_new(path, None if dtype == torch.float32 else dtype)
    assert [r.kind for r in rec.regions] == ["rope"] and not rec.fallbacks and not asm.skipped
    assert "rope_apply(" in asm.source
    torch.manual_seed(0)
    x, cos, sin = load_problem(path, small=True).get_inputs()
    for scale in (1.0, 1e4, 1e-4):   # random, then scaled inputs (relative error)
        xs = x * scale
        want = ref(xs.double(), cos.double(), sin.double())
        got = new(xs.to(dtype), cos.to(dtype), sin.to(dtype))
        assert got.dtype == dtype and got.shape == want.shape
        err = ((got.double() - want).abs().max() / want.abs().max()).item()
        assert err < tol, (scale, err)


def test_the_problem_is_one_rope_region_with_its_nodes():
    cap = capture(load_problem(str(ROOT / "level2" / "rope.py"), small=True))
    rec = recognize(cap)
    assert not rec.fallbacks
    (r,) = rec.regions
    assert (r.kind, [n.name for n in r.nodes]) == ("rope", ["mul", "chunk", "getitem_2", "getitem_3", "neg", "cat",
                                                            "mul_1", "add"])
    assert (r.params["rows"], r.params["d"], r.params["q"], r.params["dtype"]) == (1 * 64 * 8, 64, 64, "fp32")
    assert r.params["x"].name == "x" and r.params["cos"].name == "getitem" and r.params["sin"].name == "getitem_1"


def test_the_problem_s_model_new_matches_float64():
    _check(str(ROOT / "level2" / "rope.py"))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_written_variants_are_taken_and_match_float64(name, tmp_path):
    _check(_write(tmp_path, name, VARIANTS[name], SHAPES[name]))


def test_bf16_in_bf16_out(tmp_path):
    _check(_write(tmp_path, "bf16", VARIANTS["split-4d-tables"], SHAPES["split-4d-tables"]), torch.bfloat16, 1e-2)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refusals_fall_back_with_the_named_reason(name, tmp_path):
    body, shapes, words = REFUSED[name]
    rec = recognize(capture(load_problem(_write(tmp_path, name, body, shapes), small=True)))
    assert "rope" not in [r.kind for r in rec.regions]
    reasons = [f["reason"] for f in rec.fallbacks]
    assert reasons and any(f"rope: " in r and words in r for r in reasons), reasons
    assert not any("matcher raised" in r for r in reasons)


def test_the_decoder_layer_s_q_and_k_rotations_are_rope_regions():
    cap = capture(load_problem(str(ROOT / "level3" / "decoder_layer_qwen3.py"), small=True))
    rec = recognize(cap)
    kinds = [r.kind for r in rec.regions]
    assert kinds.count("rope") == 2 and kinds.count("gemm-epilogue") == 7 and kinds.count("rowwise") == 4
    assert "attention" in kinds and not rec.fallbacks
    q, k = (r for r in rec.regions if r.kind == "rope")
    assert (q.params["x"].name, k.params["x"].name) == ("rms_norm_1", "rms_norm_2")
    assert (q.params["rows"], k.params["rows"], q.params["q"]) == (32 * 4, 32 * 2, 32)


@pytest.mark.parametrize("rows,d,q,dtype", [(16 * 4096 * 32, 128, 4096, "fp32"), (512, 64, 64, "fp32"),
                                            (4096 * 40, 128, 4096, "bf16"), (7, 10, 7, "fp16"),
                                            (3, 8192, 3, "fp32")])
def test_milp_design_is_enumeration_s_optimum(rows, d, q, dtype):
    f = rope(dtype).formulate(workload(rows, d, q, dtype), get_chip("h200"))
    best = enumerate_designs(f)
    milp = solve_milp(f)
    assert milp.objective == pytest.approx(best.objective, rel=1e-9)
    design = solved_design(rows, d, q, dtype)
    assert not rope(dtype).check(design, workload(rows, d, q, dtype), get_chip("h200"))
    values = rope(dtype).bind(workload(rows, d, q, dtype), get_chip("h200"))
    assert rope(dtype).evaluate_terms(design, values)["cost"] == pytest.approx(best.objective, rel=1e-9)


def test_kernel_tables_tail_and_named_errors():
    torch.manual_seed(1)
    for xs, cs, period in [((2, 5, 3, 10), (5, 1, 10), 3), ((2, 3, 5, 8), (5, 8), 1), ((2, 5, 3, 8), (2, 5, 1, 8), 3),
                           ((4, 6), (1, 6), 1)]:
        x, c, s = torch.randn(xs), torch.randn(cs), torch.randn(cs)
        assert table_view(c, xs)[1] == period
        got = rope_apply(x, c, s, config={"RP": 2, "W": 1})
        assert (got.double() - reference(x, c, s)).abs().max().item() < 1e-5
    prog = RopeProgram(RopeConfig(RP=2, W=1), "fp32")
    with pytest.raises(InvalidInput, match="rope head dim"):
        prog(torch.randn(4, 7), torch.randn(1, 7), torch.randn(1, 7))
    with pytest.raises(InvalidInput, match="rope cos dtype"):
        prog(torch.randn(4, 8), torch.randn(1, 8).double(), torch.randn(1, 8))
    with pytest.raises(InvalidInput, match="rope RP"):
        RopeConfig(RP=3)
    with pytest.raises(InvalidInput, match="rope head dim"):
        workload(8, 9, 1)


def test_gpu_design_is_the_milp_s_and_the_family_proves():
    """At the problem's real size the instance is the MILP's design; K1, K3 and the row walk's index obligations
    hold for every extent."""
    from formloop.verify.certificate import prove_template
    from formloop.verify.outcome import Verdict

    cap = capture(load_problem(str(ROOT / "level2" / "rope.py"), small=False))
    asm = assemble(cap, recognize(cap), tier="gpu")
    (r,) = asm.regions
    assert r["design"]["solver"] == "milp (HiGHS)"
    assert r["design"]["config"] == solved_design(16 * 4096 * 32, 128, 4096, "fp32")
    cert = prove_template(rope("fp32"))
    assert cert.verdict is Verdict.PROVED, [(o.obligation, o.verdict) for o in cert.obligations]
