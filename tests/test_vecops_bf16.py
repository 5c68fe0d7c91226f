"""The vecops kernels and regions on 16-bit storage (bf16, fp16; fp32 arithmetic inside) in the Triton interpreter,
against independent references: the norms within one ulp of the storage type of torch's float64 op on the same
(already rounded) inputs, their running statistics too; max pool, argmax / argmin and unfold exactly torch's own
16-bit CPU ops; the scan bit for bit PyTorch's CUDA cumsum replayed in the storage type (every add rounded to it),
a single row the exact prefix rounded once (to nearest even: the interpreter's own bf16 conversion truncates);
a wrong kernel caught by the same checks; the regions recognized on the bf16 problem set, their MILP workload at
the storage's element size, and two whole bf16 attempts judged by the harness."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from torch.nn import functional as F  # noqa: E402

from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.vecops_gather import max_pool2d, unfold2d  # noqa: E402
from formloop.library.vecops_kernel import col_argreduce, module_norm, row_scan, seg_norm  # noqa: E402
from tests.test_vecops import _torch_cuda_cumsum  # noqa: E402

CFG = {"BC": 16, "RP": 2, "W": 1, "SPLIT": 4}
HALF = (torch.bfloat16, torch.float16)
P = Path(__file__).resolve().parents[1] / "problems" / "level1"


def _ulps(y: torch.Tensor, ref64: torch.Tensor) -> float:
    """The largest |y − round(ref)| in ulps of y's dtype at round(ref) (ref: float64, rounded to y's dtype)."""
    fi = torch.finfo(y.dtype)
    r = ref64.to(y.dtype).double()
    ulp = torch.exp2(torch.floor(torch.log2(r.abs().clamp_min(fi.tiny)))) * fi.eps
    return float(((y.double() - r).abs() / ulp).max())


@pytest.mark.parametrize("dt", HALF)
def test_norms_are_within_an_ulp_of_float64(dt):
    torch.manual_seed(0)
    x = (torch.randn(3, 6, 5, 7) * 2 + 3).to(dt)   # HW = 35: chunks end inside a tile; an offset mean
    w, b = torch.randn(6).to(dt), torch.randn(6).to(dt)
    x64, w64, b64 = x.double(), w.double(), b.double()
    y = seg_norm("group", x, stats=CFG, apply=CFG, groups=3, weight=w, bias=b)
    assert y.dtype == dt and _ulps(y, F.group_norm(x64, 3, w64, b64)) <= 1
    assert _ulps(seg_norm("group", x, stats=CFG, apply=CFG, groups=2, weight=w, bias=b),
                 F.group_norm(x64, 3, w64, b64)) > 8          # a wrong kernel (other groups) is caught
    assert _ulps(seg_norm("instance", x, stats=CFG, apply=CFG), F.instance_norm(x64)) <= 1
    rm, rv = torch.randn(6).to(dt), (torch.rand(6) + 0.5).to(dt)
    rm64, rv64 = rm.double(), rv.double()
    y = seg_norm("batch", x, stats=CFG, apply=CFG, weight=w, bias=b, running_mean=rm, running_var=rv, momentum=0.1)
    assert _ulps(y, F.batch_norm(x64, rm64, rv64, w64, b64, True, 0.1, 1e-5)) <= 1
    assert rm.dtype == dt and _ulps(rm, rm64) <= 1 and _ulps(rv, rv64) <= 1   # updated in place, in dt
    y = seg_norm("batch", x, stats=CFG, apply=CFG, weight=w, bias=b, running_mean=rm, running_var=rv,
                 use_batch_stats=False)
    assert _ulps(y, F.batch_norm(x64, rm.double(), rv.double(), w64, b64, False, 0.1, 1e-5)) <= 1


def test_bf16_batchnorm_module_keeps_its_statistics_in_bf16():
    torch.manual_seed(1)
    x = torch.randn(4, 5, 3, 3).bfloat16()
    bn = torch.nn.BatchNorm2d(5).bfloat16()
    ref = torch.nn.BatchNorm2d(5).double()
    y = module_norm(x, bn, stats=CFG, apply=CFG)
    want = ref(x.double())
    assert y.dtype == torch.bfloat16 and _ulps(y, want) <= 1
    assert bn.running_mean.dtype == bn.running_var.dtype == torch.bfloat16
    assert _ulps(bn.running_mean, ref.running_mean) <= 1 and _ulps(bn.running_var, ref.running_var) <= 1
    assert int(bn.num_batches_tracked) == 1


@pytest.mark.parametrize("dt", HALF)
def test_16bit_scan_is_pytorchs_cuda_cumsum_bit_for_bit(dt):
    """order 'torch' rounds every add to the storage type as PyTorch's CUDA kernel does (its buffer is
    scalar_t): equal to the replay, and visibly not the exact prefix; one row (PyTorch: CUB) is the float64
    prefix rounded once to nearest even."""
    torch.manual_seed(5)
    x = torch.randn(5, 1000).to(dt)   # two chunks of 512: the carry between them
    y = row_scan(x, config={"BC": 1024, "RP": 2, "W": 4}, order="torch")
    assert y.dtype == dt and torch.equal(y, _torch_cuda_cumsum(x))
    assert not torch.equal(y, x.double().cumsum(-1).to(dt))
    one = x[:1, :300]
    exact = one.double().cumsum(-1)
    assert torch.equal(row_scan(one, config={"BC": 64, "RP": 1, "W": 1}, order="torch"), exact.to(dt))
    # 'auto' on the CPU: torch's CPU cumsum (fp32 running sums, each output rounded once) within an ulp
    auto = row_scan(x, config={"BC": 64, "RP": 2, "W": 1})
    assert torch.equal(auto, x.double().cumsum(-1).to(dt)) and _ulps(auto, x.cumsum(-1).double()) <= 1
    if dt == torch.bfloat16:   # the check sees a truncating store (the interpreter's own bf16 conversion)
        trunc = (exact.float().view(torch.int32) & -65536).view(torch.float32).to(dt)
        assert not torch.equal(trunc, exact.to(dt))


def test_16bit_pool_argreduce_and_unfold_are_exact():
    torch.manual_seed(3)
    dt = torch.bfloat16
    x = torch.randn(2, 3, 13, 11).to(dt)
    cfg = {"BC": 16, "RP": 8, "W": 1}
    for k, s, p, d in ((3, 2, 1, 1), ((2, 3), (1, 2), (1, 0), (2, 1))):
        want = F.max_pool2d(x, k, s, p, d)
        assert torch.equal(max_pool2d(x, k, config=cfg, stride=s, padding=p, dilation=d), want)
        assert torch.equal(unfold2d(x, k, config=cfg, stride=s, padding=p, dilation=d),
                           F.unfold(x, k, dilation=d, padding=p, stride=s))
    rows = {"BC": 16, "RP": 2, "W": 1, "GL": 1}   # the window-row kernel
    assert torch.equal(max_pool2d(x, 3, config=rows, stride=2, padding=1), F.max_pool2d(x, 3, 2, 1))
    shifted = max_pool2d(x.roll(1, -1), 3, config=cfg, stride=2, padding=1)   # a window one column off
    assert not torch.equal(shifted, F.max_pool2d(x, 3, 2, 1))
    xh = x.half()
    assert torch.equal(max_pool2d(xh, 3, config=cfg, stride=2, padding=1), F.max_pool2d(xh, 3, 2, 1))
    xa = torch.randint(-3, 4, (3, 37, 13)).to(dt)   # few values: ties everywhere (the first index wins)
    c = {"BC": 16, "RP": 4, "W": 1}
    assert torch.equal(col_argreduce("argmax", xa, 1, config=c), xa.argmax(1))
    assert torch.equal(col_argreduce("argmin", xa, 0, config=c), xa.argmin(0))
    assert not torch.equal(col_argreduce("argmax", xa.flip(1), 1, config=c), xa.argmax(1))


def test_other_dtypes_are_named_errors():
    with pytest.raises(InvalidInput, match="row_scan x dtype"):
        row_scan(torch.ones(2, 3, dtype=torch.float64), config={"BC": 16, "RP": 1, "W": 1})
    with pytest.raises(InvalidInput, match="max_pool2d x"):
        max_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.int32), 2, config={"BC": 16, "RP": 1, "W": 1})


REGIONS = {"group_norm": "vecops-norm", "instance_norm": "vecops-norm", "batch_norm": "vecops-norm",
           "cumsum": "vecops-scan", "argmax_dim": "vecops-colreduce", "max_pool2d": "vecops-gather",
           "unfold_patches": "vecops-gather"}


def test_the_bf16_problem_set_gets_vecops_regions():
    from formloop.optimize.attempt import bootstrap
    for name, kind in REGIONS.items():
        boot = bootstrap(str(P / f"{name}.py"), small=True, chip="h200", dtype="bf16")
        assert (boot["status"], boot["dtype"]) == ("ready", "bf16"), (name, boot["reason"], boot["dtype_reason"])
        assert [r["kind"] for r in boot["recognition"]["regions"]] == [kind], name
    boot = bootstrap(str(P / "cross_entropy.py"), small=True, chip="h200", dtype="bf16")   # int64 targets
    assert boot["dtype"] == "fp32" and [r["kind"] for r in boot["recognition"]["regions"]] == ["vecops-xent"]


def test_bf16_regions_ask_the_milp_for_two_bytes_per_element(monkeypatch):
    """The norm's and the pool's workloads at bf16: bytes and E at 2 per element (the MILP itself stubbed:
    its solves are test_vecops's; here only what the regions ask of it)."""
    from formloop.optimize import vecops_regions as vr
    from formloop.optimize.capture import capture
    from formloop.optimize.recognize import recognize
    from formloop.sol.problem import call_inputs, load_problem

    asked = []
    monkeypatch.setattr(vr, "solved_design", lambda *a, **k: asked.append((a, k)) or {"BC": 16, "RP": 1, "W": 1,
                                                                                       "SPLIT": 1, "GL": 0})
    for name in ("instance_norm", "max_pool2d"):
        prob = load_problem(str(P / f"{name}.py"), small=True)
        x = call_inputs(prob, "get_inputs")[0]
        for dt, e in ((torch.bfloat16, 2), (None, 4)):
            region = recognize(capture(prob, dt)).regions[0]
            asked.clear()
            vr.choose(region, tier="gpu")
            if name == "instance_norm":
                assert [(a[0], a[3], k["elem"]) for a, k in asked] == [("norm-stats", x.numel() * e, e),
                                                                       ("norm-apply", 2 * x.numel() * e, e)]
            else:
                out = prob.Model(*call_inputs(prob, "get_init_inputs"))(x)
                assert [(a[0], a[3], k["elem"]) for a, k in asked] == [("gather", (out.numel() + x.numel()) * e, e)]


def test_the_template_prices_the_element_size():
    """Same bytes, half the element size: a streaming tile holds half the bytes in flight (the pull bound)."""
    from formloop.hw.chips import get_chip
    from formloop.library import vecops

    t = vecops.make("norm-apply")
    d = {"BC": 2048, "RP": 1, "W": 4, "SPLIT": 8, "GL": 0}
    wl = (112 * 64, 512 * 512, 2 * 112 * 64 * 512 * 512 * 2)
    t2, t4 = (t.evaluate_terms(d, t.bind(vecops.workload(*wl, elem=e), get_chip("h200")))["T_mem_us"] for e in (2, 4))
    assert t2 > 1.2 * t4


@pytest.mark.parametrize("name", ["batch_norm", "max_pool2d"])
def test_a_bf16_attempt_passes_the_harness(name, tmp_path):
    from formloop.measure.harness import evaluate
    from formloop.optimize.attempt import build, problem_file

    path = str(P / f"{name}.py")
    b = build(path, small=True, tier="interpreter", attempt=0, out_dir=str(tmp_path), dtype="bf16")
    assert b["candidate"], b
    r = evaluate(problem_file(path, True, tmp_path), b["candidate"], sets=1, timing=False, tolerance="kernelbench",
                 precision="bf16")
    assert r.correct, [c.reason for c in r.sets]
