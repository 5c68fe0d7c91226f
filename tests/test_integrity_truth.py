"""The input probes under KernelBench's rule (allclose against the reference): an output the float64
truth shows right is not flagged because the reference itself is off at a probed shape, while an
output that is wrong against the truth still is. The stand-in reference sums rows sequentially in
its own dtype (bfloat16) when the row length is odd, as a library may pick another kernel for a
ragged extent; the shape probe's variant (N = 65) is odd, the benchmark's (N = 128) even."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from formloop.measure.probes import check_integrity  # noqa: E402

PROBLEM = '''import torch
from torch import nn

M, N = 64, 128


class Model(nn.Module):
    def forward(self, x):
        if x.shape[-1] % 2 == 0:
            return x.sum(-1)
        acc = torch.zeros_like(x[:, 0])
        for j in range(x.shape[-1]):
            acc = acc + x[:, j]          # rounded to x's dtype at every step
        return acc


def get_inputs():
    return [torch.rand(M, N, dtype=torch.bfloat16) + 1]


def get_init_inputs():
    return []
'''

HONEST = '''import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.float().sum(-1).to(x.dtype)
'''

HARD_CODED = '''import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        n = x.shape[-1] if x.shape[-1] == 128 else x.shape[-1] * 3 // 4   # drops columns off the benchmark shape
        return x[:, :n].float().sum(-1).to(x.dtype)
'''


def _shape_scope(tmp_path, source: str):
    (tmp_path / "problem.py").write_text(PROBLEM)
    (tmp_path / "cand.py").write_text(source)
    r = check_integrity(str(tmp_path / "problem.py"), str(tmp_path / "cand.py"), probes=("shapes",),
                        tolerance="kernelbench", seed=3)
    return next(c for c in r.checks if c.obligation == "shape-scope")


def test_the_reference_is_off_the_truth_at_the_probed_shape():
    import importlib.util
    import sys
    spec = importlib.util.spec_from_loader("p", loader=None)
    mod = importlib.util.module_from_spec(spec)
    exec(PROBLEM, mod.__dict__)
    sys.modules.pop("p", None)
    torch.manual_seed(0)
    x = torch.rand(64, 65, dtype=torch.bfloat16) + 1
    ref, exact = mod.Model()(x), x.double().sum(-1).to(torch.bfloat16)
    assert not torch.allclose(ref, exact, atol=1e-2, rtol=1e-2)       # the stand-in's premise


def test_an_honest_output_is_not_flagged_for_the_references_error(tmp_path):
    c = _shape_scope(tmp_path, HONEST)
    assert c.details["severity"] == "clean" and "off the float64 truth" in c.reason


def test_an_output_wrong_against_the_truth_is_still_flagged(tmp_path):
    c = _shape_scope(tmp_path, HARD_CODED)
    assert c.details["severity"] == "gaming" and "hard-coded" in c.reason
    assert c.witness["candidate_vs_truth"]["norm_rel_error"] > c.witness["reference_vs_truth"]["norm_rel_error"]


def _judge(out, ref, truth):
    from types import SimpleNamespace

    from formloop.measure.compare import compare_outputs
    from formloop.measure.probes_inputs import judge

    s = SimpleNamespace(rule="kernelbench", rtol=None,
                        compare=lambda o, r, t: compare_outputs(o, r, t, rule="kernelbench"))
    return judge(s, out, ref, truth)


def _off_the_truth(n: int = 20000):
    g = torch.Generator().manual_seed(5)
    truth = torch.randn(n, generator=g, dtype=torch.float64)
    noise = torch.randn(n, generator=g, dtype=torch.float64) * 0.05     # far beyond allclose(1e-2)
    return truth, (truth + noise).float(), noise


def test_a_candidate_as_close_to_the_truth_as_an_off_reference_is_right():
    truth, ref, noise = _off_the_truth()
    cand = (truth + 0.9 * noise.flip(0)).float()          # other errors, 0.9x the reference's in norm and worst
    assert not _judge(cand, ref, None)[0].ok               # against the reference alone it fails
    cmp, note = _judge(cand, ref, truth)
    assert cmp.ok and "as close to it" in note


def test_a_candidate_farther_from_the_truth_than_an_off_reference_is_still_wrong():
    truth, ref, noise = _off_the_truth()
    cand = (truth + 0.9 * noise.flip(0)).float()
    cand[::100] = 0.0                                        # 1 % of the elements dropped: the worst error grows
    assert not _judge(cand, ref, truth)[0].ok
    cand = (truth + 1.5 * noise.flip(0)).float()             # uniformly 1.5x the reference's error
    assert not _judge(cand, ref, truth)[0].ok
    nan = (truth + 0.5 * noise.flip(0)).float()
    nan[7] = float("nan")                                    # closer in norm, but an element not written
    assert not _judge(nan, ref, truth)[0].ok
