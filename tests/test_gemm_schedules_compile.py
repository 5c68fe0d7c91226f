"""The persistent and stream-K kernels compile for sm_90 (Hopper) on this CPU-only machine (Triton's compiler
and the wheel's ptxas, target-only driver, fresh interpreter), within the family's shared-memory wall C1."""
from __future__ import annotations

import pytest

from tests.sm90 import has_ptxas, run_compile_script

SCRIPT = r"""
import json

from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig
from formloop.library.gemm_tiling_sched_kernel import _persistent_tma_kernel, _stream_k_tma_kernel


def compiled(fn):
    return {id(k): k for c in fn.device_caches.values() for k in c[0].values()}


out = []
for cfg, shape in ((TileConfig(128, 256, 64, S=4, W=8, L=1, SC=1), (4096, 4096, 4096)),
                   (TileConfig(128, 256, 64, S=3, W=8, L=1, SC=1), (4096, 4096, 4096)),
                   (TileConfig(128, 256, 64, S=3, W=8, L=1, SC=2), (8192, 8192, 8192)),
                   (TileConfig(64, 64, 128, S=5, W=8, L=1, SC=2), (64, 4096, 4096)),
                   (TileConfig(64, 128, 128, S=4, W=4, L=1, SC=1), (1000, 1000, 1000))):
    fn = _persistent_tma_kernel if cfg.SC == 1 else _stream_k_tma_kernel
    before = compiled(fn)
    GemmPlan(cfg, *shape, "bf16").warmup(8)
    new = [k for i, k in compiled(fn).items() if i not in before]
    out.append({"config": cfg.as_dict(), "shape": shape, "shared": new[0].metadata.shared})
print(json.dumps(out))
"""


@pytest.mark.skipif(not has_ptxas(), reason="no ptxas in the triton wheel")
def test_schedule_kernels_compile_for_sm90_within_the_shared_memory_wall():
    from formloop.expr import evaluate
    from formloop.hw.chips import get_chip
    from formloop.library import get_template
    from formloop.library.gemm_tiling_gpu import chip_params

    compiled = run_compile_script(SCRIPT)
    assert len(compiled) == 5
    t = get_template("gemm-tiling-gpu", dtype="bf16", schedules=True)
    for c in compiled:
        M, N, K = c["shape"]
        values = {**chip_params(get_chip("h200"), "bf16"), "M": M, "N": N, "K": K, "e": 2, **c["config"]}
        wall = float(evaluate(t.terms["smem_bytes"], values))
        # C1 is conservative: what Triton allocates (slots, staging, barriers) stays within the wall's count, and a
        # design C1 admits fits the chip; 128x256x64 at S = 4 is refused by C1 (it needs 262176 bytes).
        assert 0 < c["shared"] <= wall + 1024, (c, wall)
        assert (wall <= values["Ms"]) == (c["shared"] <= values["Ms"]), (c, wall)
