"""The attention correctness check itself (formloop.evaluate.gpu.check on the attention runnables):
a correct bf16 flash-attention kernel passes it at long causal prefills, and wrong ones still fail.

The "kernel" here is a torch emulation of what the Triton prefill computes on the GPU: fp32 scores,
p = exp(s − rowmax) rounded to bf16 before the P·V dot, the row sum in fp32, a bf16 output. Before
the check compared rows against their own scale (attention_cases.RowScaled), this emulation failed
the worst-element bound at L = 4096 (0.11 × RMS > 0.1): the GPU run rejected every prefill design at
L = 4096 and 8192 and some at 2048 although the kernels were right."""
from __future__ import annotations

import math
import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere (as tests/test_attention_kernels.py)

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from formloop.evaluate.gpu import check  # noqa: E402
from formloop.library.attention_cases import qkv, reference  # noqa: E402
from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan, TritonPrefill  # noqa: E402


def _flash_bf16(q, k, v, shift: int = 0, tail: int = 0):
    """Causal GQA attention as a bf16 flash kernel rounds it; `shift` = 1 admits key q + 1 (the
    off-by-one fault), -1 drops the diagonal; `tail` > 0 never reads the last `tail` keys (a dropped
    last tile: only the last `tail` rows change)."""
    G, L, D = q.shape[1] // k.shape[1], q.shape[2], q.shape[3]
    kx, vx = k.float().repeat_interleave(G, 1), v.float().repeat_interleave(G, 1)
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), kx) / math.sqrt(D)
    keep = torch.ones(L, L, dtype=torch.bool).tril(shift)
    if tail:
        keep[:, L - tail:] = False
    s = s.masked_fill(~keep, float("-inf"))
    p = torch.exp(s - s.amax(-1, keepdim=True))
    out = torch.einsum("bhqk,bhkd->bhqd", p.bfloat16().float(), vx) / p.sum(-1, keepdim=True)
    return out.bfloat16()


class Emulated(TritonPrefill):
    def __init__(self, L: int, **fault):
        super().__init__(PrefillPlan(PrefillConfig(), 1, 2, 1, 128, L, "bf16", 1))
        self.fault = fault

    def launch(self, case) -> None:
        case.out.copy_(_flash_bf16(case.q, case.k, case.v, **self.fault))


def test_correct_bf16_kernel_passes_at_long_causal_prefill():
    c = check(Emulated(4096), "cpu", torch.Generator().manual_seed(0))
    assert c.passed, (c.rel_error, c.max_error_rms)
    assert c.rel_error < 4e-3 and c.max_error_rms < 0.05  # bf16 rounding of P and O, every row on its own scale


@pytest.mark.parametrize("fault", [{"shift": 1}, {"shift": -1}, {"tail": 64}],
                         ids=["off-by-one", "no-diagonal", "dropped-tail-tile"])
def test_wrong_kernels_still_fail(fault):
    c = check(Emulated(512, **fault), "cpu", torch.Generator().manual_seed(1))
    assert not c.passed, (c.rel_error, c.max_error_rms)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lq,L", [(37, 37), (1, 50), (20, 20)])
def test_chunked_reference_equals_one_block(causal, lq, L):
    if causal and lq != L:
        pytest.skip("causal prefill has as many queries as keys")
    q, k, v = qkv(1, 4, 2, lq, L, 16, "bf16", "cpu", torch.Generator().manual_seed(2))
    whole = reference(q, k, v, causal=causal, dtype=torch.float64, rows=10_000)
    for rows in (1, 7, 16):
        assert torch.allclose(reference(q, k, v, causal=causal, dtype=torch.float64, rows=rows), whole,
                              rtol=1e-12, atol=1e-12)
    s = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double().repeat_interleave(2, 1)) / 4.0
    if causal:
        s = s.masked_fill(~torch.ones(lq, L, dtype=torch.bool).tril(), float("-inf"))
    direct = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, -1), v.double().repeat_interleave(2, 1))
    assert torch.allclose(whole, direct, rtol=1e-12, atol=1e-12)
