"""The vecops family: its MILP designs (against exhaustive enumeration) and its kernels in the Triton
interpreter against float64 torch references, at tail sizes (extents that are not powers of two, rows and
chunks that end inside a tile)."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from torch.nn import functional as F  # noqa: E402

from formloop.errors import InvalidInput  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import vecops  # noqa: E402
from formloop.library.vecops_gather import cross_entropy, max_pool2d, unfold2d  # noqa: E402
from formloop.library.vecops_kernel import col_argreduce, row_scan, seg_norm  # noqa: E402
from formloop.solve import enumerate_designs, solve_milp  # noqa: E402

CFG = {"BC": 16, "RP": 2, "W": 1, "SPLIT": 4}


@pytest.mark.parametrize("kind,rows,cols,nbytes", [("norm-stats", 7168, 262144, 7168 * 262144 * 4),
                                                   ("scan", 37, 1000, 2 * 37 * 1000 * 4),
                                                   ("colreduce", 128 * 4095, 4096, 128 * 4095 * 4096 * 4),
                                                   ("gather", 98304, 196, 2 * 98304 * 196 * 4)])
def test_milp_design_is_the_enumerated_optimum(kind, rows, cols, nbytes):
    f = vecops.make(kind).formulate(vecops.workload(rows, cols, nbytes), get_chip("h200"))
    milp, brute = solve_milp(f), enumerate_designs(f)
    assert milp.objective == pytest.approx(brute.objective, rel=1e-6)
    a = milp.assignment
    assert not vecops.make(kind).check(a, vecops.workload(rows, cols, nbytes), get_chip("h200"))
    if kind not in vecops.SPLITTABLE:
        assert a["SPLIT"] == 1


def test_bad_kind_is_a_named_error():
    with pytest.raises(InvalidInput, match="vecops kind"):
        vecops.make("median")


@pytest.mark.parametrize("cfg", [CFG, {"BC": 128, "RP": 1, "W": 2, "SPLIT": 1}])
def test_norms_match_float64(cfg):
    torch.manual_seed(0)
    x = torch.randn(3, 6, 5, 7) * 2 + 3   # HW = 35: chunks and tiles end inside a tile; an offset mean
    w, b = torch.randn(6), torch.randn(6)
    y = seg_norm("group", x, stats=cfg, apply=cfg, groups=3, weight=w, bias=b)
    torch.testing.assert_close(y.double(), F.group_norm(x.double(), 3, w.double(), b.double()), rtol=0, atol=2e-5)
    y = seg_norm("instance", x, stats=cfg, apply=cfg)
    torch.testing.assert_close(y.double(), F.instance_norm(x.double()), rtol=0, atol=2e-5)
    rm, rv = torch.randn(6), torch.rand(6) + 0.5
    rm64, rv64 = rm.double().clone(), rv.double().clone()
    y = seg_norm("batch", x, stats=cfg, apply=cfg, weight=w, bias=b, running_mean=rm, running_var=rv, momentum=0.1)
    ref = F.batch_norm(x.double(), rm64, rv64, w.double(), b.double(), True, 0.1, 1e-5)
    torch.testing.assert_close(y.double(), ref, rtol=0, atol=2e-5)
    torch.testing.assert_close(rm.double(), rm64, rtol=0, atol=1e-6)   # running stats updated in place (unbiased)
    torch.testing.assert_close(rv.double(), rv64, rtol=0, atol=1e-6)
    y = seg_norm("batch", x, stats=cfg, apply=cfg, weight=w, bias=b, running_mean=rm, running_var=rv,
                 use_batch_stats=False)
    ref = F.batch_norm(x.double(), rm.double(), rv.double(), w.double(), b.double(), False, 0.1, 1e-5)
    torch.testing.assert_close(y.double(), ref, rtol=0, atol=2e-5)


def test_module_norm_follows_the_module():
    from formloop.library.vecops_kernel import module_norm

    torch.manual_seed(1)
    x = torch.randn(4, 5, 3, 3)
    bn, ref = torch.nn.BatchNorm2d(5), torch.nn.BatchNorm2d(5).double()
    for mode in ("train", "eval"):
        bn.train(mode == "train")
        ref.train(mode == "train")
        y = module_norm(x, bn, stats=CFG, apply=CFG)
        torch.testing.assert_close(y.double(), ref(x.double()), rtol=0, atol=2e-5)
    assert int(bn.num_batches_tracked) == int(ref.num_batches_tracked) == 1
    torch.testing.assert_close(bn.running_var.double(), ref.running_var, rtol=0, atol=1e-6)


def test_scan_and_arg_reduction_match():
    torch.manual_seed(2)
    x = torch.randn(5, 37)
    torch.testing.assert_close(row_scan(x, config={"BC": 16, "RP": 2, "W": 1}).double(), x.double().cumsum(-1),
                               rtol=0, atol=1e-5)
    x = torch.randn(3, 37, 13)
    x[1, 20, 4] = x[1, 3, 4] = 9.0   # a tie: the first index wins, as torch's
    cfg = {"BC": 16, "RP": 4, "W": 1}
    assert torch.equal(col_argreduce("argmax", x, 1, config=cfg), x.argmax(1))
    assert torch.equal(col_argreduce("argmin", x, 0, config=cfg), x.argmin(0))


def test_a_long_fp64_scan_is_the_exact_prefix_rounded_once():
    """cumsum's fp32 rows on the GPU were off KernelBench's 1e-4 on 0.7% of a 32768 x 32768 problem:
    fp32 sums drift by ~1e-4 over a long row. order='fp64': every output is the float64 prefix rounded once
    to fp32 (at most half an ulp off it), where an fp32 running sum (the old kernel's carry) is off by
    many ulps."""
    torch.manual_seed(4)
    x = torch.randn(2, 16384)
    truth = x.double().cumsum(-1)
    y = row_scan(x, config={"BC": 1024, "RP": 2, "W": 4}, order="fp64").double()
    half_ulp = torch.finfo(torch.float32).eps * truth.abs().clamp_min(2.0 ** -126) / 2
    assert bool(((y - truth).abs() <= half_ulp * 1.0001).all())
    acc, run = torch.zeros(2), torch.empty_like(x)   # an fp32 running sum (torch's CPU cumsum sums in double)
    for j in range(x.shape[1]):
        acc = acc + x[:, j]
        run[:, j] = acc
    naive = float((run.double() - truth).abs().max())
    assert naive > 3e-5 and naive > 10 * float((y - truth).abs().max())   # fp32 sums' error is visible here


@pytest.mark.parametrize("k,s,p,d", [(3, 2, 1, 1), (4, 4, 0, 1), ((2, 3), (1, 2), (1, 0), (2, 1))])
def test_gathers_are_exact(k, s, p, d):
    torch.manual_seed(3)
    x = torch.randn(2, 3, 13, 11)
    cfg = {"BC": 16, "RP": 8, "W": 1}
    assert torch.equal(unfold2d(x, k, config=cfg, stride=s, padding=p, dilation=d),
                       F.unfold(x, k, dilation=d, padding=p, stride=s))
    assert torch.equal(max_pool2d(x, k, config=cfg, stride=s, padding=p, dilation=d), F.max_pool2d(x, k, s, p, d))


def test_cross_entropy_matches_float64_with_ignored_rows():
    torch.manual_seed(4)
    logits, t = torch.randn(37, 50) * 3, torch.randint(0, 50, (37,))
    t[3] = t[30] = -100
    got = cross_entropy(logits, t, config={"BC": 16, "RP": 4, "W": 1})
    assert got.shape == () and got.dtype == torch.float32
    assert got.double().item() == pytest.approx(F.cross_entropy(logits.double(), t).item(), abs=1e-5)


def _torch_cuda_cumsum(x: torch.Tensor) -> torch.Tensor:
    """PyTorch's CUDA innermost-dim cumsum (tensor_kernel_scan_innermost_dim) replayed in x's dtype on the
    CPU: chunks of 2 << log_x, the running total added to the first value, a Sklansky scan (in bf16 / fp16 every
    add rounded to it, as c10::BFloat16's + and PyTorch's scalar_t shared buffer do)."""
    from formloop.library.vecops_kernel import torch_scan_log_x
    r, c = x.shape
    lx = torch_scan_log_x(r, c)
    w = 2 << lx
    out, carry = torch.empty_like(x), torch.zeros(r, dtype=x.dtype)
    for c0 in range(0, c, w):
        n = min(w, c - c0)
        buf = torch.zeros(r, w, dtype=x.dtype)
        buf[:, :n] = x[:, c0:c0 + n]
        buf[:, 0] = buf[:, 0] + carry
        for m in range(lx + 1):
            s = 1 << m
            t = torch.arange(w // 2)
            a = (t // s) * (2 * s) + s
            ti, si = a + t % s, a - 1
            buf[:, ti] = buf[:, ti] + buf[:, si]
        out[:, c0:c0 + n] = buf[:, :n]
        carry = buf[:, w - 1]
    return out


def test_torch_scan_chunk_follows_pytorchs_uint32_formula():
    from formloop.library.vecops_kernel import torch_scan_log_x
    assert torch_scan_log_x(32768, 32768) == 4      # cumsum's problem: chunks of 32
    assert torch_scan_log_x(64, 2048) == 7          # (9 + 11 - 6) // 2
    assert torch_scan_log_x(4096, 16) == 4          # (9 - 8) // 2 = 0, at least 4
    assert torch_scan_log_x(1 << 14, 2) == 9        # 9 - 13 < 0 wraps in uint32: the upper bound


@pytest.mark.parametrize("r,c", [(16, 1024), (5, 1000)])
def test_the_scan_adds_in_pytorchs_cuda_order_bit_for_bit(r, c):
    """order='torch' (the ModelNew's) rounds as torch.cumsum rounds on a GPU: equal to PyTorch's CUDA
    algorithm replayed on the CPU, and as far from the float64 prefix as it is."""
    torch.manual_seed(5)
    x = torch.randn(r, c)
    y = row_scan(x, config={"BC": 1024, "RP": 2, "W": 4})
    want = _torch_cuda_cumsum(x)
    assert torch.equal(y, want)
    assert not torch.equal(y, x.double().cumsum(-1).float())    # the order shows: it is not the exact prefix
