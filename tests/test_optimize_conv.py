"""The conv region (formloop.optimize.conv_region, formloop.library.fused_conv) in the Triton
interpreter: the kernel against a float64 conv2d with padding, stride, dilation and tails (the
implicit-GEMM and the patch-GEMM lowerings, bias, a folded eval-mode BatchNorm, an activation), a
wrong kernel refused by the same check, the recognizer's regions and notes, and the conv problems
optimized end to end at their SMALL sizes with one image instead of two (copies of the shipped files, SMALL's
batch made 1: the same channels, spatial sizes and filters; harness and integrity), a wrong-padding ModelNew
refused."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from formloop import api  # noqa: E402
from formloop.errors import InvalidInput  # noqa: E402
from formloop.library.fused_conv import conv_chain  # noqa: E402
from formloop.optimize.capture import capture  # noqa: E402
from formloop.optimize.conv_region import operand_type  # noqa: E402
from formloop.optimize.recognize import recognize  # noqa: E402
from formloop.sol.problem import load_problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
P = ROOT / "problems"
CONV_FILES = [str(P / "level1" / "conv2d_3x3.py"), str(P / "level1" / "conv2d_patch_embed.py"),
              str(P / "level2" / "conv_bn_relu.py"), str(P / "level3" / "resnet_bottleneck.py"),
              str(P / "level1" / "conv_transpose2d.py")]
CFG = {"Tm": 32, "Tn": 16, "Tk": 16, "S": 1, "W": 4, "KS": 1, "G": 4, "L": 0}
TOL = 1e-5   # fp32 operands, fp32 accumulation vs float64: far inside KernelBench's fp32 1e-4


def _close(y: torch.Tensor, ref: torch.Tensor) -> bool:
    return y.shape == ref.shape and bool(((y.double() - ref).abs() <= TOL + TOL * ref.abs()).all())


# (n, c, h, w, k, r, s, stride, padding, dilation): tails in every GEMM extent (M, N = k, K = c*r*s vs CFG)
CASES = [(2, 5, 9, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1)),
         (1, 3, 11, 10, 18, 3, 2, (2, 1), (2, 0), (2, 1)),
         (2, 4, 8, 8, 20, 1, 1, (1, 1), (0, 0), (1, 1)),
         (1, 6, 7, 9, 5, 5, 5, (2, 3), (3, 1), (1, 1)),
         # C a multiple of Tk: each K block inside one filter tap (the kernel's TAP_BLOCKS loads)
         (2, 16, 9, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1)),
         (1, 32, 7, 6, 9, 3, 2, (2, 1), (2, 0), (2, 1))]


@pytest.mark.parametrize("case", CASES)
def test_implicit_gemm_matches_float64_conv(case):
    n, c, h, w, k, r, s, stride, padding, dilation = case
    g = torch.Generator().manual_seed(1)
    x, wt = torch.randn(n, c, h, w, generator=g), torch.randn(k, c, r, s, generator=g) / (c * r * s) ** 0.5
    bias = torch.randn(k, generator=g)
    y = conv_chain(x, wt, stride=stride, padding=padding, dilation=dilation, via="implicit",
                   chain="bias(axis=row,name=bias) >> relu", config=CFG, bias=bias)
    ref = F.conv2d(x.double(), wt.double(), bias.double(), stride=stride, padding=padding, dilation=dilation).relu()
    assert _close(y, ref)
    # the same check refuses a wrong kernel: the filter's channels rotated, and another padding
    bad = conv_chain(x, wt.roll(1, dims=1), stride=stride, padding=padding, dilation=dilation, via="implicit",
                     chain="bias(axis=row,name=bias) >> relu", config=CFG, bias=bias)
    assert not _close(bad, ref)
    other = conv_chain(x, wt, stride=stride, padding=(padding[0] + 1, padding[1]), dilation=dilation,
                       via="implicit", chain="bias(axis=row,name=bias) >> relu", config=CFG, bias=bias)
    assert not _close(other, ref)


def test_patch_gemm_matches_float64_conv_with_crop_and_channels_last_views():
    g = torch.Generator().manual_seed(2)
    x, wt = torch.randn(2, 3, 10, 13, generator=g), torch.randn(24, 3, 4, 4, generator=g) / 7
    y = conv_chain(x, wt, stride=(4, 4), via="gemm", config=CFG)   # 10x13 -> 2x3 patches (edges cropped)
    assert _close(y, F.conv2d(x.double(), wt.double(), stride=4))
    xc = torch.randn(2, 8, 5, 6, generator=g).contiguous(memory_format=torch.channels_last)
    w1 = torch.randn(12, 8, 1, 1, generator=g) / 3
    assert _close(conv_chain(xc, w1, via="gemm", config=CFG, chain="tanh"), F.conv2d(xc.double(), w1.double()).tanh())
    with pytest.raises(InvalidInput, match="via=gemm"):
        conv_chain(x, wt, stride=(2, 2), via="gemm", config=CFG)


def test_eval_batchnorm_is_folded_and_training_mode_is_refused():
    torch.manual_seed(3)
    conv, bn = nn.Conv2d(6, 10, 3, padding=1, bias=True), nn.BatchNorm2d(10)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-1, 1)
    bn.eval()
    x = torch.randn(2, 6, 7, 9)
    chain = "bias(axis=row,name=bias) >> scale(by=row,name=bn_scale) >> bias(axis=row,name=bn_shift) >> relu"
    y = conv_chain(x, conv.weight.detach(), padding=(1, 1), chain=chain, config=CFG, bias=conv.bias.detach(), bn=bn)
    ref = torch.relu(bn.double()(conv.double()(x.double()))).detach()
    assert _close(y, ref)
    bn.train()
    with pytest.raises(InvalidInput, match="batch norm mode"):
        conv_chain(x, conv.weight.detach(), padding=(1, 1), chain=chain, config=CFG, bias=conv.bias.detach(), bn=bn)


@pytest.mark.parametrize("momentum", [0.1, None])
def test_training_batchnorm_uses_batch_statistics_and_updates_running_ones(momentum):
    torch.manual_seed(4)
    conv, bn = nn.Conv2d(5, 12, 3, padding=1, bias=False), nn.BatchNorm2d(12, momentum=momentum)
    ref_bn = nn.BatchNorm2d(12, momentum=momentum).double()
    with torch.no_grad():
        for b in (bn, ref_bn):
            b.weight.copy_(torch.linspace(0.5, 1.5, 12))
            b.bias.copy_(torch.linspace(-1, 1, 12))
    post = "scale(by=row,name=bn_scale) >> bias(axis=row,name=bn_shift) >> relu"
    ew = {"BN": 16, "BM": 64, "W": 4}
    for step in range(2):
        x = torch.randn(2, 5, 7, 6)
        y = conv_chain(x, conv.weight.detach(), padding=(1, 1), config=CFG, bn=bn, post=post, post_config=ew)
        ref = torch.relu(ref_bn(F.conv2d(x.double(), conv.weight.detach().double(), padding=1))).detach()
        assert _close(y, ref)
        assert torch.allclose(bn.running_mean.double(), ref_bn.running_mean, atol=1e-6)
        assert torch.allclose(bn.running_var.double(), ref_bn.running_var, atol=1e-6)
        assert int(bn.num_batches_tracked) == step + 1
    bn.eval()
    ref_bn.eval()
    x = torch.randn(2, 5, 7, 6)
    y = conv_chain(x, conv.weight.detach(), padding=(1, 1), config=CFG, bn=bn, post=post, post_config=ew)
    assert _close(y, torch.relu(ref_bn(F.conv2d(x.double(), conv.weight.detach().double(), padding=1))).detach())


def test_recognizer_regions_and_notes(tmp_path):
    regions = {}
    for f in CONV_FILES:
        rec = recognize(capture(load_problem(f, small=True)))
        regions[Path(f).stem] = rec
    r3 = regions["conv2d_3x3"].regions[0]
    assert r3.kind == "conv2d-epilogue" and r3.params["via"] == "implicit" and r3.params["chain"] == [
        "bias(axis=row,name=bias)"]
    assert regions["conv2d_patch_embed"].regions[0].params["via"] == "gemm"
    cbr = regions["conv_bn_relu"].regions
    assert len(cbr) == 1 and [n.name for n in cbr[0].nodes] == ["conv", "bn", "relu"]
    assert regions["conv_bn_relu"].fallbacks == []
    assert cbr[0].params["chain"] == [] and cbr[0].params["post"] == [
        "scale(by=row,name=bn_scale)", "bias(axis=row,name=bn_shift)", "relu"] and "training-mode" in cbr[0].notes[0]
    rb = regions["resnet_bottleneck"]
    assert [r.params["via"] for r in rb.regions if r.kind == "conv2d-epilogue"] == ["gemm", "implicit", "gemm"]
    assert [r.kind for r in rb.regions][-1] == "elementwise" and rb.fallbacks == []   # bn3 + x >> relu
    ct = regions["conv_transpose2d"]
    assert ct.regions == [] and "ConvTranspose2d" in ct.fallbacks[0]["op"]
    prob = tmp_path / "eval_block.py"
    prob.write_text("import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n\n\n"
                    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.conv, self.bn = nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8).eval()\n\n"
                    "    def forward(self, x):\n        return F.silu(self.bn(self.conv(x))) * 2.0\n\n\n"
                    "def get_inputs():\n    return [torch.randn(2, 4, 6, 6)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    ev = recognize(capture(load_problem(str(prob))))
    assert ev.regions[0].params["chain"] == ["bias(axis=row,name=bias)", "scale(by=row,name=bn_scale)",
                                             "bias(axis=row,name=bn_shift)", "silu", "scale(by=2.0)"]
    assert ev.fallbacks == []


def test_fp32_operand_type_follows_the_engines_mode():
    assert operand_type("fp32", "gpu", "tf32") == "tf32" and operand_type("fp32", "gpu", "fp32") == "fp32"
    # auto: the GEMM region's error-bound decision at conv2d_3x3's implicit GEMM (K = 64*3*3 = 576)
    notes: list[str] = []
    tf32_conv = torch.backends.cudnn.allow_tf32
    try:
        for flag in (False, True):   # the reference for correctness is fp32 math whatever cuDNN's flag says
            torch.backends.cudnn.allow_tf32 = flag
            assert operand_type("fp32", "gpu", "auto", [64 * 56 * 56, 64, 576], "kernelbench", notes) == "tf32x3"
            assert "tf32x3 (auto: the fastest whose bound fits)" in notes[-1]
    finally:
        torch.backends.cudnn.allow_tf32 = tf32_conv
    # vit's patch embedding (16x16 patches of 3 channels: K = 768, a plain GEMM) and resnet_bottleneck's
    # 1x1 convs (K = 256 and 64) take the same error-bound path: tf32 misses the rule, tf32x3 fits
    for gemm in ([6272, 768, 768], [200704, 64, 256], [200704, 256, 64]):
        notes = []
        assert operand_type("fp32", "gpu", "auto", gemm, "kernelbench", notes) == "tf32x3"
        assert "the fastest whose bound fits" in notes[0] and "tf32 " in notes[0]
    assert operand_type("fp32", "interpreter") == "fp32" and operand_type("bf16", "gpu") == "bf16"


def _tf32(t: torch.Tensor) -> torch.Tensor:   # round to tf32's 10-bit mantissa (nearest, ties away)
    return ((t.float().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def test_tf32_misses_kernelbench_fp32_tolerance_at_k576_and_tf32x3_meets_it():
    """conv2d_3x3's K = C·R·S = 576 (one image; the error per output does not depend on the batch):
    tf32 operands exceed KernelBench's fp32 allclose (atol = rtol = 1e-4); the split tf32x3 does not."""
    torch.manual_seed(0)
    conv = nn.Conv2d(64, 64, 3, padding=1)
    x, w = torch.randn(1, 64, 56, 56), conv.weight.detach()
    exact = F.conv2d(x.double(), w.double(), padding=1)

    def worst(y):
        return float(((y.double() - exact).abs() / (1e-4 + 1e-4 * exact.abs())).max())
    tf32 = F.conv2d(_tf32(x), _tf32(w), padding=1)
    x3 = sum(F.conv2d(a, b, padding=1) for a, b in ((_tf32(x), _tf32(w)), (_tf32(x), _tf32(w - _tf32(w))),
                                                     (_tf32(x - _tf32(x)), _tf32(w))))
    assert worst(tf32) > 2.0 and worst(x3) < 0.1


def _one_image(root: Path) -> list[str]:
    """Copies of CONV_FILES under root (same levels, same names), SMALL's batch N made 1."""
    files = []
    for f in map(Path, CONV_FILES):
        text = f.read_text()
        small = re.search(r"^SMALL = \{\"N\": 2, .*\}", text, re.M)
        assert small, f
        (root / f.parent.name).mkdir(parents=True, exist_ok=True)
        (root / f.parent.name / f.name).write_text(text.replace(small[0], small[0].replace('"N": 2', '"N": 1', 1)))
        files.append(str(root / f.parent.name / f.name))
    return files


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("optimize_conv")
    files = _one_image(tmp_path_factory.mktemp("problems"))
    report = api.optimize(files, out=str(out), budget=1, small=True, tier="interpreter", workers=1,
                          progress=False, store=str(out / "population.db"))
    return out, report, files


@pytest.mark.parametrize("name", ["conv2d_3x3", "conv2d_patch_embed", "conv_bn_relu", "resnet_bottleneck"])
def test_conv_problem_gets_a_verified_model_new(campaign, name):
    out, report, _ = campaign
    row = {r["problem"]: r for r in report["problems"]}[name]
    assert row["best"] is not None, row["verdicts"]
    assert row["verdicts"][0]["correct"] and row["verdicts"][0]["accepted"]
    assert "conv2d-epilogue" in [g["kind"] for g in row["regions"]]
    assert "conv_chain(" in (out / "models" / f"{name}.py").read_text()


def test_conv_transpose_keeps_the_reference(campaign):
    _, report, _ = campaign
    row = {r["problem"]: r for r in report["problems"]}["conv_transpose2d"]
    assert row["status"] == "reference" and row["best"] is None and "ConvTranspose2d" in row["reason"]


def test_a_wrong_padding_model_new_is_refused(campaign):
    out, _, files = campaign
    good = (out / "models" / "conv2d_3x3.py").read_text()
    assert "padding = (1, 1)" in good
    wrong = re.sub(r"padding = \(1, 1\)", "padding = (2, 2)", good)
    r = api.optimize_submit(files[0], out=str(out), source=wrong, small=True, tier="interpreter",
                            store=str(out / "population.db"))
    assert r["correct"] is False and r["accepted"] is False
