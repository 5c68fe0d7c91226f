"""Invalid specs, each refused before anything is compiled, with the field that breaks the rule
named at the line where it was written, and the allowed values.

Every case is the valid BASE spec with one edit; the expectations (field, line, a fragment of the
allowed values) are written by hand from the rule, not taken from the validator's output."""
from __future__ import annotations

import pytest

from formloop.dsl.diagnostics import SpecError
from formloop.dsl.lower import read_spec
from formloop.dsl.validate import validate

BASE = """kernel k = gemm {
    a = bf16 row
    b = bf16 col
    c = bf16 row
    arch = sm90
    tile = 128 x 128 x 64
    stages = 3
    warps = 8
    split_k = 1
    swizzle = 8
    load = tma
    align = 8
    shape = 1024 x 1024 x 1024
}
>> bias(row) >> gelu(tanh)
"""
CHAIN_LINE = 15

# (id, old text, new text, expected field (prefix), expected line, fragment of `allowed` or None)
CASES = [
    # syntax
    ("syntax-missing-value", "    stages = 3", "    stages =", "syntax", 7, "a number"),
    ("syntax-bad-character", "    warps = 8", "    warps = 8$", "syntax", 8, None),
    ("syntax-unclosed-block", "}\n>>", ">>", "syntax", 14, "}"),
    # fields and values
    ("unknown-field", "    swizzle = 8", "    swizle = 8", "field", 10, "swizzle"),
    ("duplicate-field", "    warps = 8", "    warps = 8\n    warps = 4", "warps", 9, "one value"),
    ("missing-arch", "    arch = sm90\n", "", "arch", 1, "sm90"),
    ("missing-a", "    a = bf16 row\n", "", "a", 1, "bf16"),
    ("unknown-operation", "= gemm {", "= gemv {", "operation", 1, "batched_gemm"),
    ("a-dtype", "a = bf16 row", "a = bf17 row", "a dtype", 2, "bf16"),
    ("b-layout", "b = bf16 col", "b = bf16 diag", "b layout", 3, "row, col"),
    ("c-dtype-tf32", "c = bf16 row", "c = tf32 row", "c dtype", 4, "fp32"),
    ("acc-fp16", "    arch = sm90", "    acc = fp16\n    arch = sm90", "acc", 5, "fp32"),
    ("arch-sm70", "arch = sm90", "arch = sm70", "arch", 5, "sm80, sm90, sm100"),
    ("tile-two-dims", "tile = 128 x 128 x 64", "tile = 128 x 128", "tile", 6, "Tm x Tn x Tk"),
    ("tile-tk-16", "tile = 128 x 128 x 64", "tile = 128 x 128 x 16", "tile Tk", 6, "32, 64, 128"),
    ("tile-tm-96", "tile = 128 x 128 x 64", "tile = 96 x 128 x 64", "tile Tm", 6, "16, 32, 64, 128, 256"),
    ("stages-6", "stages = 3", "stages = 6", "stages", 7, "5, 4, 3, 2, 1"),
    ("warps-2", "warps = 8", "warps = 2", "warps", 8, "4, 8"),
    ("split-k-3", "split_k = 1", "split_k = 3", "split_k", 9, "1, 2, 4, 8"),
    ("swizzle-4", "swizzle = 8", "swizzle = 4", "swizzle", 10, "8, 1"),
    ("load-dma", "load = tma", "load = dma", "load", 11, "tma, ptr"),
    ("align-16", "align = 8", "align = 16", "align", 12, "1, 2, 4, 8"),
    ("shape-two-dims", "shape = 1024 x 1024 x 1024", "shape = 1024 x 1024", "shape", 13, "n x n x n"),
    ("shape-zero", "shape = 1024 x 1024 x 1024", "shape = 1024 x 0 x 1024", "shape", 13, ">= 1"),
    ("conv-field-on-gemm", "    shape =", "    filter = 3 x 3\n    shape =", "field", 13, "swizzle"),
    # operands, alignment, arch gates
    ("b-dtype-differs", "b = bf16 col", "b = fp16 col", "b dtype", 3, "bf16"),
    ("align-too-wide-for-fp32", "a = bf16 row\n    b = bf16 col",
     "a = fp32 row\n    b = fp32 col", "align", 12, "1, 2, 4"),
    ("align-short-for-tma", "align = 8", "align = 4", "align", 12, "8"),
    ("align-does-not-divide-k", "shape = 1024 x 1024 x 1024", "shape = 1024 x 1024 x 1020", "align", 12, "1, 2, 4"),
    ("chip-not-of-arch", "    arch = sm90", "    arch = sm90\n    chip = a100", "chip", 6, "h200, h100"),
    ("tma-on-sm80", "arch = sm90", "arch = sm80", "load", 11, "ptr"),
    ("open-field-on-sm80", ("arch = sm90", "load = tma", "stages = 3"), ("arch = sm80", "load = ptr", "stages = ?"),
     "stages", 7, "a fixed value"),
    # walls of the template on the target chip
    ("smem-stages", ("tile = 128 x 128 x 64", "stages = 3"), ("tile = 128 x 256 x 64", "stages = 5"),
     "stages", 7, "4, 3, 2, 1"),
    ("smem-sm80-chip", ("arch = sm90", "tile = 128 x 128 x 64", "stages = 3", "load = tma"),
     ("arch = sm80", "tile = 128 x 256 x 64", "stages = 4", "load = ptr"), "stages", 7, "3, 2, 1"),
    ("registers-tile", ("tile = 128 x 128 x 64", "warps = 8"), ("tile = 256 x 256 x 64", "warps = ?"),
     "tile Tm x Tn", 6, "128 x 256"),
    ("registers-warps", ("tile = 128 x 128 x 64", "warps = 8"), ("tile = 128 x 256 x 64", "warps = 4"),
     "warps", 8, "8"),
    ("split-k-too-deep", ("split_k = 1", "x 1024 x 1024\n"), ("split_k = 8", "x 1024 x 256\n"),
     "split_k", 9, "4, 2, 1"),
    ("tma-pitch", "align = 8\n    shape = 1024 x 1024 x 1024", "align = ?\n    shape = 1024 x 1024 x 1001",
     "load", 11, "0"),
    ("row-op-wide-n", ">> gelu(tanh)", ">> softmax", "shape N", 13, "256"),
    ("row-op-narrow-tile", "shape = 1024 x 1024 x 1024\n}\n>> bias(row) >> gelu(tanh)",
     "shape = 1024 x 200 x 1024\n}\n>> bias(row) >> softmax", "tile Tn", 6, "256"),
    ("glu-odd-n", "shape = 1024 x 1024 x 1024\n}\n>> bias(row) >> gelu(tanh)",
     "shape = 1024 x 1023 x 1024\n}\n>> glu(silu)", "shape N", 13, "pairs"),
    # the epilogue
    ("epilogue-unknown-op", "gelu(tanh)", "geglu(tanh)", "epilogue[2] epilogue operation", CHAIN_LINE, "gelu"),
    ("epilogue-bad-choice", "gelu(tanh)", "gelu(fast)", "epilogue[2] gelu argument approx", CHAIN_LINE, "erf, tanh"),
    ("epilogue-missing-axis", "bias(row)", "bias", "epilogue[1] bias argument axis", CHAIN_LINE, "row, col"),
    ("epilogue-too-many-args", "gelu(tanh)", "gelu(tanh, 2)", "epilogue[2] gelu arguments", CHAIN_LINE, "at most 1"),
    ("epilogue-unknown-keyword", "gelu(tanh)", "gelu(mode=tanh)", "epilogue[2] gelu argument", CHAIN_LINE, "approx"),
    ("epilogue-clamp-inverted", "gelu(tanh)", "clamp(2, -2)", "epilogue[2] clamp argument hi", CHAIN_LINE, ">= lo"),
    ("epilogue-clamp-empty", "gelu(tanh)", "clamp", "epilogue[2] clamp arguments", CHAIN_LINE, "lo, hi"),
    ("epilogue-scale-dtype", "gelu(tanh)", "scale(0.5, fp32)", "epilogue[2] scale argument dtype", CHAIN_LINE, "none"),
    ("epilogue-bad-number", "gelu(tanh)", "leaky_relu(steep)", "epilogue[2] leaky_relu argument slope", CHAIN_LINE,
     "a number"),
    ("epilogue-bad-dtype", "bias(row)", "bias(row, fp64)", "epilogue[1] bias argument dtype", CHAIN_LINE, "bf16"),
    ("epilogue-final-cast", "gelu(tanh)", "gelu(tanh) >> cast(fp16)", "epilogue[3] cast", CHAIN_LINE, "bf16"),
    ("epilogue-implicit-narrow", "gelu(tanh)", "cast(fp16) >> relu", "epilogue[2] cast", CHAIN_LINE, "bf16"),
    ("broadcast-tile-after-lse", "shape = 1024 x 1024 x 1024\n}\n>> bias(row) >> gelu(tanh)",
     "shape = 1024 x 256 x 1024\n}\n>> logsumexp >> add(residual)", "epilogue[2] add(residual)", CHAIN_LINE,
     "bias(col)"),
    ("broadcast-row-bias-after-lse", "shape = 1024 x 1024 x 1024\n}\n>> bias(row) >> gelu(tanh)",
     "shape = 1024 x 256 x 1024\n}\n>> logsumexp >> bias(row)", "epilogue[2] bias(bias)", CHAIN_LINE, "bias(col)"),
    ("glu-after-lse", "shape = 1024 x 1024 x 1024\n}\n>> bias(row) >> gelu(tanh)",
     "shape = 1024 x 256 x 1024\n}\n>> logsumexp >> glu(silu)", "epilogue[2] glu", CHAIN_LINE, "before any row"),
    ("two-row-ops", "shape = 1024 x 1024 x 1024\n}\n>> bias(row) >> gelu(tanh)",
     "shape = 1024 x 256 x 1024\n}\n>> softmax >> softmax", "epilogue[1] softmax", CHAIN_LINE, "one row operation"),
    ("tensor-named-like-operand", "gelu(tanh)", "add(a)", "epilogue[2] add name", CHAIN_LINE, "other than a, b, c"),
    ("tensor-named-like-workspace", "gelu(tanh)", "scale(col, fp32, ws)", "epilogue[2] scale name", CHAIN_LINE,
     "ws, cnt"),
    ("tensor-name-two-shapes", "gelu(tanh)", "add(bias)", "epilogue[2] add name", CHAIN_LINE, "other shape"),
    ("lse-into-col-c", "c = bf16 row", "c = fp32 col", "c layout", 4, "row"),
]


def _edit(old, new) -> str:
    text = BASE
    for o, n in zip(*((old, new) if isinstance(old, tuple) else ((old,), (new,)))):
        assert text.count(o) == 1, o
        text = text.replace(o, n)
    return text


def test_base_is_valid():
    validate(read_spec(BASE))


def test_there_are_at_least_forty_cases():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_invalid_spec_names_its_field(case):
    name, old, new, field, line, allowed = case
    text = _edit(old, new)
    if name == "lse-into-col-c":
        text = text.replace("shape = 1024 x 1024 x 1024\n}\n>> bias(row) >> gelu(tanh)",
                            "shape = 1024 x 256 x 1024\n}\n>> logsumexp")
    with pytest.raises(SpecError) as info:
        validate(read_spec(text, "case.fl"))
    found = [d for d in info.value.diagnostics if d.field.startswith(field)]
    assert found, f"{name}: expected field {field!r}, got {[d.text() for d in info.value.diagnostics]}"
    d = found[0]
    assert d.line == line, f"{name}: line {d.line} != {line}: {d.text()}"
    assert d.column >= 1
    if allowed is not None:
        assert allowed in d.allowed, f"{name}: {allowed!r} not in allowed {d.allowed!r}"
    assert d.text("case.fl").startswith(f"case.fl:{d.line}:{d.column}: {d.field} = ")


def test_every_open_field_on_a_chip_without_the_cost_model_is_named():
    text = _edit(("arch = sm90", "load = tma", "tile = 128 x 128 x 64", "warps = 8"),
                 ("arch = sm80", "load = ptr", "tile = 128 x ? x 64", "warps = ?"))
    with pytest.raises(SpecError) as info:
        validate(read_spec(text))
    assert [d.field for d in info.value.diagnostics] == ["tile", "warps"]


def test_every_diagnostic_is_reported_not_just_the_first():
    text = _edit("warps = 8", "warps = 2").replace("swizzle = 8", "swizzle = 4")
    with pytest.raises(SpecError) as info:
        validate(read_spec(text))
    assert {d.field for d in info.value.diagnostics} >= {"warps (W)", "swizzle (G)"}


def test_wall_diagnostic_says_what_the_wall_needs():
    with pytest.raises(SpecError) as info:
        validate(read_spec(_edit(("tile = 128 x 128 x 64", "stages = 3"), ("tile = 128 x 256 x 64", "stages = 5"))))
    d = info.value.diagnostics[0]
    # (Tm + Tn) * Tk * S * e = 384 * 64 * 5 * 2 bytes; the H200 allows 227 KiB per block.
    assert str(384 * 64 * 5 * 2) in d.message and str(227 * 1024) in d.message


def test_allowed_values_meet_the_wall_by_brute_force():
    """Each stage count the diagnostic offers fits (Tm+Tn)·Tk·S·e <= 227 KiB; each one left out does not."""
    text = _edit("tile = 128 x 128 x 64", "tile = 256 x 128 x 128").replace("stages = 3", "stages = 4")
    with pytest.raises(SpecError) as info:
        validate(read_spec(text))
    d = next(x for x in info.value.diagnostics if x.field == "stages")
    offered = {int(v) for v in d.allowed.split(", ")}
    fits = {s for s in (1, 2, 3, 4, 5) if (256 + 128) * 128 * s * 2 <= 227 * 1024}
    assert offered == fits
