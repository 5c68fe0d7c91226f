"""The one checker: blocked comparison equals the unblocked one; KernelBench's rule equals
torch.allclose; the evaluator's norm rule equals a numpy computation (and evaluate.gpu.check uses it);
a float64 truth computed in row blocks equals the whole one, and batch-coupled references get none."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from formloop.evaluate.measurement import Correctness
from formloop.measure.compare import AllClose, NormBound, compare_outputs, compare_tensor, rule_for
from formloop.measure.truth import RowTruth, truth_of


def _case(seed, n=301):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, generator=g, dtype=torch.float64) * 3
    r = t.float()
    c = (t * (1 + [0.0, 1e-4, 3e-3, 5e-2][seed % 4] * torch.randn(n, generator=g, dtype=torch.float64))).float()
    if seed % 3 == 0:
        c[7], r[11], t[11] = float("nan"), float("inf"), float("inf")
    return c, r, t


@pytest.mark.parametrize("seed", range(8))
def test_blocked_comparison_equals_the_whole_one(seed):
    c, r, t = _case(seed)
    whole = compare_tensor(c, r, t)
    blocked = compare_tensor(c, r, t, chunk_elems=13)
    for key in ("ok", "reason", "bad_fraction", "all_written", "allclose", "rule"):
        assert getattr(whole, key) == getattr(blocked, key), key
    for key in ("max_ratio", "norm_rel_error", "max_error_rms"):  # sums in another order: last bits only
        assert getattr(blocked, key) == pytest.approx(getattr(whole, key), rel=1e-12, abs=1e-300), key
    assert whole.worst["index"] == blocked.worst["index"]


@pytest.mark.parametrize("seed", range(8))
def test_kernelbench_rule_is_torch_allclose(seed):
    c, r, _ = _case(seed)
    for tol in (1e-4, 1e-2):
        got = compare_tensor(c, r, rule=AllClose(tol, tol), chunk_elems=17)
        assert got.ok == torch.allclose(r, c, atol=tol, rtol=tol) and got.rule == "kernelbench"
    assert rule_for("kernelbench", torch.float32) == AllClose(1e-4, 1e-4)
    assert rule_for("kernelbench", torch.bfloat16) == AllClose(1e-2, 1e-2)


@pytest.mark.parametrize("seed", range(6))
def test_norm_rule_matches_numpy(seed):
    c, _, t = _case(seed + 1 if seed % 3 == 2 else seed)  # some with NaN, some clean
    cmp = compare_tensor(c.double(), t, rule=NormBound(1e-2), chunk_elems=64)
    cn, tn = c.double().numpy(), t.numpy()
    fin = np.isfinite(tn) & np.isfinite(cn)
    rms = math.sqrt(np.mean(tn[np.isfinite(tn)] ** 2))
    written = bool(np.all(np.isfinite(cn[np.isfinite(tn)])))
    rel = np.linalg.norm((cn - tn)[fin]) / np.linalg.norm(tn[np.isfinite(tn)])
    worst = np.max(np.abs(cn - tn)[fin]) / rms
    assert cmp.all_written == written
    assert cmp.norm_rel_error == pytest.approx(rel, rel=1e-9)
    assert cmp.max_error_rms == pytest.approx(worst, rel=1e-9)
    assert cmp.ok == (written and rel <= 1e-2 and worst <= 10 * 1e-2)
    assert Correctness(rel, worst, 1e-2, written, "float64").passed == cmp.ok


def test_evaluator_check_uses_the_one_checker():
    from formloop.evaluate.gpu import check

    class Scale:
        name, tolerance, case_bytes = "scale", 1e-3, 0

        def new_case(self, device, generator):
            x = torch.randn(4096, generator=generator, dtype=torch.float32)
            return {"x": x, "out": torch.empty_like(x)}

        def poison(self, case):
            case["out"].fill_(float("nan"))

        def launch(self, case):
            case["out"][:-1] = case["x"][:-1] * 2   # the last element is never written

        def output(self, case):
            return case["out"]

        def reference(self, case):
            return case["x"].double() * 2

    res = check(Scale(), "cpu", torch.Generator().manual_seed(0))
    assert not res.all_written and math.isnan(res.rel_error) and not res.passed


def test_structure_subclasses_and_devices_are_refused_before_reading_values():
    class Lazy(torch.Tensor):
        pass

    r = torch.randn(5)
    lazy = torch.Tensor._make_subclass(Lazy, r.clone())
    assert "subclass" in compare_tensor(lazy, r).reason
    assert "meta" in compare_tensor(torch.empty(5, device="meta"), r).reason
    assert compare_outputs((r, r.clone()), (r, r)).ok


class _RowScale(nn.Module):
    def forward(self, x):
        return x.exp() * 0.5 + x


class _Coupled(nn.Module):  # each row depends on the whole batch, like training-mode batch norm
    def forward(self, x):
        return x - x.mean(dim=0, keepdim=True)


def test_row_blocked_truth_equals_the_whole_truth_and_is_checked_for_separability():
    x = torch.randn(40, 33)
    model = _RowScale()
    native = model(x)
    whole, note = truth_of(model, model.double(), [x], native, "cpu")
    assert isinstance(whole, torch.Tensor) and note == ""
    blocked, note = truth_of(model, _RowScale().double(), [x], native, "cpu", budget=3000)
    assert isinstance(blocked[0], RowTruth) and "blocks" in note
    assert torch.equal(torch.cat([b for _, _, b in blocked[0].blocks()]), whole)
    assert blocked[0].value_at(5 * 33 + 7) == float(whole[5, 7])
    cand = native.clone()
    cand[39, 32] += 0.1
    a, b = compare_outputs(cand, native, whole), compare_outputs(cand, native, blocked)
    assert not a.ok and a.reason == b.reason and a.worst["index"] == b.worst["index"] == [39, 32]
    assert a.worst["truth"] == b.worst["truth"] and a.worst["allowed"] == pytest.approx(b.worst["allowed"], rel=1e-12)
    assert a.norm_rel_error == pytest.approx(b.norm_rel_error, rel=1e-12)
    coupled = _Coupled()
    none, note = truth_of(coupled, coupled.double(), [x], coupled(x), "cpu", budget=3000)
    assert none is None and "not row-separable" in note


def test_square_matmul_blocks_only_the_first_operand():
    a, b = torch.randn(24, 24), torch.randn(24, 24)

    class MM(nn.Module):
        def forward(self, a, b):
            return a @ b

    m = MM()
    blocked, note = truth_of(m, m, [a, b], m(a, b), "cpu", budget=6000)
    assert "inputs [0] sliced" in note
    assert torch.allclose(torch.cat([blk for _, _, blk in blocked[0].blocks()]), a.double() @ b.double())
