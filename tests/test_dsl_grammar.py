"""The language: its grammar (the one docs/dsl.md prints), the typed reading of every field, the
positions diagnostics point at, and the canonical chain text the template keeps."""
from __future__ import annotations

from pathlib import Path

import pytest

from formloop.dsl.grammar import GRAMMAR
from formloop.dsl.ir import FIELDS, Operand
from formloop.dsl.lower import read_spec
from formloop.dsl.service import parse_dims
from formloop.errors import InvalidInput
from formloop.library.gemm_epilogue_ops import KINDS, chain_text, parse_chain_text

ROOT = Path(__file__).parent.parent
DOC = (ROOT / "docs" / "dsl.md").read_text()

SPEC = """# comments anywhere
kernel k1 = batched_gemm {   # the block
    a = fp16 col; b = fp16
    c = fp32 row
    arch = sm90 ; chip = h100
    tile = 64 × ? x 32
    warps = 4
    load = ?
    shape = 2 x 40 x 48 x 64
}
  >> bias(col, fp32)
  # a comment between two operations
  >> leaky_relu(slope = -0.5e-1) >> scale(2)

p = pipeline(
    cast(a, fp32),
    k1,
    transpose(c))
"""


def test_docs_print_the_grammar_verbatim():
    assert GRAMMAR in DOC


def test_docs_name_every_field_and_operation():
    for name in FIELDS:
        assert f"`{name}`" in DOC, name
    for name in KINDS:
        assert f"`{name}`" in DOC, name


def test_a_spec_reads_into_typed_fields():
    spec = read_spec(SPEC)
    k = spec.kernel
    assert (k.name, k.op, k.arch, k.chip) == ("k1", "batched_gemm", "sm90", "h100")
    assert (k.a, k.b, k.c) == (Operand("fp16", "col"), Operand("fp16", "row"), Operand("fp32", "row"))
    assert dict(k.pins) == {"W": 4, "Tm": 64, "Tk": 32}
    assert set(k.open_decisions) == {"Tn", "S", "KS", "G", "L"}
    assert (k.shape.batch, k.shape.M, k.shape.N, k.shape.K) == (2, 40, 48, 64)
    assert [op.kind for op in k.chain] == ["bias", "leaky_relu", "scale"]
    assert k.chain[0].arg("axis") == "col" and k.chain[0].arg("dtype") == "fp32"
    assert k.chain[1].arg("slope") == -0.05 and k.chain[2].arg("by") == 2.0


def test_positions_point_at_what_was_written():
    k = read_spec(SPEC).kernel
    assert k.pos("tile") == (6, 12) and k.pos("warps") == (7, 13)
    assert k.chain_where == ((11, 6), (13, 6), (13, 37))


def test_pipeline_stages_give_the_callers_operands():
    spec = read_spec(SPEC)
    assert [(s.kind, s.tensor, s.dtype) for s in spec.pre] == [("cast", "a", "fp32")]
    assert [(s.kind, s.tensor, s.dtype) for s in spec.post] == [("transpose", "c", None)]
    assert spec.caller_operand("a") == Operand("fp32", "col")   # cast keeps the layout
    assert spec.caller_operand("c") == Operand("fp32", "col")   # transpose flips it
    assert spec.caller_operand("b") == Operand("fp16", "row")   # no stage


def test_chain_text_reads_back():
    for path in sorted((ROOT / "examples" / "dsl").glob("*.fl")):
        chain = read_spec(path.read_text()).kernel.chain
        assert parse_chain_text(chain_text(chain)) == chain, path.name


@pytest.mark.parametrize("text,op,dims", [("4096x4096x4096", "gemm", (4096, 4096, 4096)),
                                          ("8, 512,512 ,64", "batched_gemm", (8, 512, 512, 64)),
                                          ("1 x 56 x 56 x 64 x 128", "conv2d", (1, 56, 56, 64, 128))])
def test_shape_option(text, op, dims):
    assert parse_dims(text, op) == dims


@pytest.mark.parametrize("text", ["4096x4096", "4096x0x4096", "ax4x4", ""])
def test_shape_option_refuses(text):
    with pytest.raises(InvalidInput, match="M x N x K"):
        parse_dims(text, "gemm")
