"""Every spec in examples/dsl: checked, solved, instance-checked, then run in Triton's interpreter
at a reduced shape against the float64 torch reference the spec implies (fresh inputs, poisoned
output). The examples' open fields are solved by enumeration here (same template, same tie-break,
milliseconds); test_milp_and_enumeration_agree checks on three examples that the MILP picks a
design of the same modelled cost."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.dsl.bridge import design  # noqa: E402
from formloop.dsl.lower import read_spec  # noqa: E402
from formloop.dsl.run import reduced_shape, run_program  # noqa: E402
from formloop.dsl.validate import validate  # noqa: E402

EXAMPLES = sorted((Path(__file__).parent.parent / "examples" / "dsl").glob("*.fl"))


def test_there_are_at_least_twelve_examples():
    assert len(EXAMPLES) >= 12


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_matches_torch_in_the_interpreter(path):
    text = path.read_text()
    assert 8 <= len([ln for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]) <= 20
    v = validate(read_spec(text, str(path)))
    d = design(v, solver="enumerate")
    assert d.check is not None and d.check.ok and d.certificate.verdict.value == "proved"
    assert all(d.assignment[k] == val for k, val in v.spec.kernel.pins.items())
    result = run_program(v.spec, d, seed=hash(path.stem) % 1000)
    assert result["tier"] == "interpreter"
    assert result["correct"], (path.stem, d.assignment, result["correctness"])
    json.dumps(result)  # the service returns it as JSON
    small = reduced_shape(v.spec, d.assignment)
    assert small.M <= v.spec.kernel.shape.M and small.K <= v.spec.kernel.shape.K


@pytest.mark.parametrize("name", ["router_softmax", "decode_splitk_gelu", "tf32_bias_sigmoid"])
def test_milp_and_enumeration_agree(name):
    v = validate(read_spec((EXAMPLES[0].parent / f"{name}.fl").read_text()))
    milp, enum = design(v, solver="milp", prove=False), design(v, solver="enumerate", prove=False)
    assert milp.solve["objective_us"] == pytest.approx(enum.solve["objective_us"], rel=1e-6)
    assert milp.check.ok and enum.check.ok
