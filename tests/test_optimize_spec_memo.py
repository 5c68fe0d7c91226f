"""Identical regions are solved once (formloop.optimize.spec_memo): a model of repeated blocks gets
one MILP solve per distinct spec, and every repeat the same instance the solver picks for it alone."""
from __future__ import annotations

import pytest

from formloop.dsl import service
from formloop.optimize import spec_memo
from formloop.optimize.assemble import assemble
from formloop.optimize.capture import capture
from formloop.optimize.recognize import recognize
from formloop.sol.problem import load_problem

BLOCKS = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(256, 256), nn.Linear(256, 256), nn.Linear(256, 256)
        self.d = nn.Linear(256, 128)

    def forward(self, x):
        x = torch.relu(self.a(x))
        x = torch.relu(self.b(x))
        x = torch.relu(self.c(x))
        return self.d(x)


def get_inputs():
    return [torch.randn(512, 256)]


def get_init_inputs():
    return []
'''


@pytest.fixture
def counted(monkeypatch):
    calls: list[str] = []
    real = service.check_spec

    def check_spec(text=None, **kw):
        calls.append(text)
        return real(text=text, **kw)

    monkeypatch.setattr(service, "check_spec", check_spec)
    spec_memo.clear()
    yield calls
    spec_memo.clear()


def test_repeated_blocks_are_solved_once_and_pick_what_a_lone_solve_picks(tmp_path, counted):
    path = tmp_path / "blocks.py"
    path.write_text(BLOCKS)
    cap = capture(load_problem(str(path)))
    out = assemble(cap, recognize(cap), tier="gpu", fp32_operands="tf32x3")
    gemms = [r for r in out.regions if r["kind"] == "gemm-epilogue"]
    assert [r["nodes"][0] for r in gemms] == ["a", "b", "c", "d"]
    specs = [r["spec"] for r in gemms]
    assert specs[0] == specs[1] == specs[2] != specs[3]
    assert len(counted) == 2 == len(set(counted))                 # two distinct specs, two solves
    assert [r["design"]["solver"] for r in gemms] == ["milp (HiGHS)", "milp (HiGHS), reused",
                                                      "milp (HiGHS), reused", "milp (HiGHS)"]
    assert spec_memo.STATS == {"solved": 2, "reused": 2}
    for r in gemms:   # each instance is what a fresh solve of its spec alone picks
        alone = service.check_spec(text=r["spec"])["design"]["assignment"]
        assert r["design"]["config"] == {k: int(v) for k, v in alone.items()}


def test_the_memo_hands_out_copies_and_stays_bounded(counted, monkeypatch):
    spec = "kernel k = gemm {\n    a = fp32 row\n    b = fp32 col\n    c = fp32 row\n    arch = sm90\n}\n"
    first = spec_memo.checked_spec(spec)
    assert first["ok"] and "design" not in first            # no shape: checked, nothing solved
    first["ok"] = False
    assert spec_memo.checked_spec(spec)["ok"] and len(counted) == 1
    monkeypatch.setattr(spec_memo, "MAX_ENTRIES", 2)
    for n in (16, 32, 48):
        spec_memo.checked_spec(spec.replace("sm90\n", f"sm90\n    tile = {n} x 16 x 16\n"))
    assert len(spec_memo._MEMO) == 2 and spec not in spec_memo._MEMO   # the oldest went first
