"""Static torch-only detector, SOL-ceiling detector and the verdict algebra."""
import pytest

from formloop.errors import InvalidInput, StructureError
from formloop.measure.integrity import (ACCEPTED, IntegrityReport, IntegrityVerdict, check_sol_ceiling, flag,
                                       generous_floor_s, parse_verdict, passed, verdict_of)
from formloop.measure.static import static_scan
from formloop.verify.outcome import Verdict

KERNEL = '''
import torch, triton
import triton.language as tl
from torch import nn
import torch.nn.functional as F

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass

def launch(x):
    k[(1,)](x, x.numel(), BLOCK=16)
    return x
'''


def scan(body: str, **kw):
    return {c.obligation: c for c in static_scan(KERNEL + body, **kw)}


def test_launch_through_a_helper_is_seen():
    out = scan("class ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n")
    assert out["torch-only"].verdict is Verdict.UNRESOLVED and "k" in out["torch-only"].reason


def test_kernel_defined_but_never_launched_is_torch_only():
    out = scan("class ModelNew(nn.Module):\n    def forward(self, x):\n        return F.gelu(x) + x.sum()\n")
    hit = out["torch-only"]
    assert hit.verdict is Verdict.COUNTEREXAMPLE and hit.details["severity"] == "torch-only"
    assert hit.witness["kernels_defined"] == ["k"]
    assert any("F.gelu" in op for op in hit.witness["torch_ops"])


def test_calling_an_nn_layer_is_a_torch_op():
    src = ("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.fc = nn.Linear(4, 4)\n    def forward(self, x):\n        return self.fc(x)\n")
    hit = scan(src)["torch-only"]
    assert hit.verdict is Verdict.COUNTEREXAMPLE and "nn.Linear" in hit.reason


def test_heavy_torch_beside_a_kernel_is_minor():
    out = scan("class ModelNew(nn.Module):\n    def forward(self, a, b):\n        return launch(a @ b)\n")
    assert out["torch-only"].verdict is Verdict.UNRESOLVED
    assert out["heavy-torch"].details["severity"] == "minor" and "@" in out["heavy-torch"].reason


def test_streams_and_threads_are_noted_as_minor():
    src = ("import threading\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
           "        s = torch.cuda.Stream()\n        threading.Thread(target=launch, args=(x,)).start()\n"
           "        return launch(x)\n")
    hit = scan(src)["stream-use"]
    assert hit.details["severity"] == "minor" and len(hit.witness["calls"]) == 2


def test_method_entry_and_plain_function_entry():
    out = scan("def forward(x):\n    return launch(x)\n", entry="forward")
    assert out["torch-only"].verdict is Verdict.UNRESOLVED


def test_malformed_candidates_name_what_is_wrong():
    with pytest.raises(StructureError, match="does not parse"):
        static_scan("def broken(:\n")
    with pytest.raises(StructureError, match="no class ModelNew"):
        static_scan("x = 1\n")
    with pytest.raises(StructureError, match="forward"):
        static_scan("def helper(x):\n    return x\n", entry="forward")


def test_an_inherited_forward_is_left_to_the_runtime_detector_not_scored():
    """`class ModelNew(Model): pass` has no forward in its source; the scan must neither crash (a
    crash was once scored 'minor, accepted') nor guess: it says the call decides."""
    (na,) = static_scan("class Model:\n    def forward(self, x):\n        return x\n"
                        "class ModelNew(Model):\n    pass\n")
    assert na.obligation == "torch-only" and na.verdict is Verdict.UNRESOLVED
    assert na.reason.startswith("not applicable") and "inherits it from Model" in na.reason


def test_sol_ceiling_flags_more_than_ten_percent_below_the_floor():
    floor = 1.0e-3
    hit = check_sol_ceiling(0.89e-3, floor, source="gpu")
    assert hit.verdict is Verdict.COUNTEREXAMPLE and hit.details["severity"] == "gaming"
    assert hit.witness["limit_s"] == pytest.approx(0.9e-3)
    assert check_sol_ceiling(0.91e-3, floor, source="gpu").verdict is Verdict.UNRESOLVED
    assert check_sol_ceiling(5e-3, floor, source="gpu").reason.startswith("passed")
    na = check_sol_ceiling(1e-9, floor, source="cpu")
    assert na.verdict is Verdict.UNRESOLVED and na.reason.startswith("not applicable")
    with pytest.raises(InvalidInput):
        check_sol_ceiling(-1.0, floor, source="gpu")


def test_generous_floor_takes_the_fastest_precision():
    class Report:
        time_floor_s = 3.67e-4
        precision = "tf32"
        floors_s = {"tf32": 3.67e-4, "fp16": 1.834e-4}

    assert generous_floor_s(Report()) == (1.834e-4, "fp16")


def test_verdict_is_the_worst_flag():
    minor = flag("a", IntegrityVerdict.MINOR, "m")
    torch_only = flag("b", IntegrityVerdict.TORCH_ONLY, "t")
    gaming = flag("c", IntegrityVerdict.GAMING, "g")
    ok = passed("d")
    assert verdict_of([ok]) is IntegrityVerdict.CLEAN
    assert verdict_of([ok, minor]) is IntegrityVerdict.MINOR
    assert verdict_of([minor, torch_only]) is IntegrityVerdict.TORCH_ONLY
    assert verdict_of([torch_only, gaming, minor]) is IntegrityVerdict.GAMING
    report = IntegrityReport("p", "c", True, (ok, minor))
    assert report.accepted and report.as_dict()["verdict"] == "minor"
    assert not IntegrityReport("p", "c", False, (ok,)).accepted
    assert parse_verdict("torch-only") is IntegrityVerdict.TORCH_ONLY
    with pytest.raises(InvalidInput, match="clean, minor, probe-failed, torch-only, gaming"):
        parse_verdict("fine")


def test_a_failed_probe_or_run_is_never_accepted_and_outranks_minor():
    minor = flag("a", IntegrityVerdict.MINOR, "m")
    broken = flag("probe:cache", IntegrityVerdict.PROBE_FAILED, "the cache probe failed")
    gaming = flag("c", IntegrityVerdict.GAMING, "g")
    assert verdict_of([minor, broken]) is IntegrityVerdict.PROBE_FAILED
    assert verdict_of([broken, gaming]) is IntegrityVerdict.GAMING
    assert not IntegrityReport("p", "c", True, (minor, broken)).accepted
    assert ACCEPTED == {IntegrityVerdict.CLEAN, IntegrityVerdict.MINOR}
    for name in ("crashed", "timed-out", "exited"):
        v = parse_verdict(name)
        assert v not in ACCEPTED and verdict_of([gaming, flag("run", v, name)]) is v


def test_compiled_extension_counts_as_a_kernel_but_tl_load_does_not():
    src = ("from torch.utils.cpp_extension import load_inline\nimport torch\nfrom torch import nn\n"
           "ext = load_inline(name='e', cpp_sources='', cuda_sources='', functions=['add'])\n"
           "class ModelNew(nn.Module):\n    def forward(self, x, y):\n        return ext.add(x, y)\n")
    (ok,) = static_scan(src)
    assert ok.obligation == "torch-only" and ok.verdict is Verdict.UNRESOLVED and "ext.add" in ok.reason
    out = scan("class ModelNew(nn.Module):\n    def forward(self, x):\n        x = x.contiguous()\n"
               "        return launch(x)\n")
    assert out["torch-only"].details["launches"] == ["k (line 12)"]
