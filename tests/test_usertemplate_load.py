"""Loading `path.py:NAME` templates: the worked example loads, malformed ones fail with clear errors."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from formloop.errors import InvalidInput, StructureError
from formloop.hw.chips import get_chip
from formloop.solve import enumerate_designs, solve_milp
from formloop.library.user import file_origin, load_origin, load_user_template, parse_spec

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "templates" / "rownorm.py"

HEADER = """
from formloop.expr import decision, param
from formloop.template import Constraint, Template
x = decision("x", (1, 2, 4))
n = param("n")
DESC = {"algorithm": "toy", "reuse": "none", "placement": "one", "resources": ("none",)}
"""


def write(tmp_path, body: str) -> str:
    p = tmp_path / "user_t.py"
    p.write_text(textwrap.dedent(HEADER) + textwrap.dedent(body))
    return str(p)


def test_example_loads_and_solves_like_enumeration():
    t = load_user_template(f"{EXAMPLE}:rownorm")
    assert t.name == "rownorm" and t.descriptor["algorithm"] == "rmsnorm"
    f = t.formulate({"R": 4096, "D": 4096, "e": 2}, get_chip("illustrative"))
    milp, brute = solve_milp(f), enumerate_designs(f)
    assert milp.objective == pytest.approx(brute.objective)
    assert milp.assignment["BLOCK"] >= 4096
    # hand count: the memory term is (2*R*D + D)*e / bw = (2*4096*4096 + 4096)*2 / 1.8e12 s
    assert milp.objective == pytest.approx((2 * 4096 * 4096 + 4096) * 2 / 1.8e12 * 1e6)


def test_origin_round_trip():
    spec = f"{EXAMPLE}:rownorm"
    origin = file_origin(spec)
    assert origin.startswith("file:/") and origin.endswith(":rownorm")
    assert load_origin(origin).content_hash == load_user_template(spec).content_hash
    assert load_origin("library:gemm-tiling?pre=strong").options["pre"] == "strong"


@pytest.mark.parametrize("spec, field", [
    ("no_colon.py", "template spec"),
    ("x.txt:NAME", "template spec path"),
    ("missing_file.py:NAME", "template spec path"),
    ("x.py:not-an-identifier", "template spec NAME"),
])
def test_bad_specs_name_their_field(spec, field):
    with pytest.raises(InvalidInput, match=f"invalid {field}"):
        parse_spec(spec)


def test_missing_name_lists_what_the_file_defines(tmp_path):
    path = write(tmp_path, """
        def good():
            return Template("toy", "", (x,), (n,), (Constraint("s", n <= 4, "scope"),), (), (), cost=x, descriptor=DESC)
    """)
    with pytest.raises(InvalidInput, match=r"allowed: good"):
        load_user_template(f"{path}:nope")
    assert load_user_template(f"{path}:good").name == "toy"


@pytest.mark.parametrize("body, message", [
    ("""
        T = Template("toy", "", (x,), (n,), (), (), (), cost=x, descriptor=DESC)
     """, "has no scope"),
    ("""
        y = decision("y", ())
     """, "decision y has an empty menu"),
    ("""
        z = decision("z", (1, 2))
        T = Template("toy", "", (x,), (n,), (Constraint("s", n <= 4, "scope"),), (), (), cost=x + z, descriptor=DESC)
     """, "cost reads undeclared z"),
    ("""
        T = Template("toy", "", (x,), (n,), (Constraint("s", n <= 4, "scope"),), (), (), cost=x, descriptor={"algorithm": "toy"})
     """, "descriptor lacks reuse, placement, resources"),
    ("""
        h = param("h", kind="chip")
        T = Template("toy", "", (x,), (n, h), (Constraint("s", n <= h, "scope"),), (), (), cost=x, descriptor=DESC)
     """, "no bind_chip"),
    ("""
        T = 42
     """, "got int"),
    ("""
        def T(
     """, "syntax error"),
    ("""
        raise RuntimeError("boom")
     """, "RuntimeError: boom"),
])
def test_malformed_templates_are_refused_clearly(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(StructureError, match=message) as info:
        load_user_template(f"{path}:T")
    assert path in str(info.value)  # the error says which file
