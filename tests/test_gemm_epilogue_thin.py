"""gemm_epilogue_launch.run, EpiloguePlan's thin eager launch: under the interpreter it must fall back to the
plan's own launch (and say why), give the same output as `launch`, and keep one launcher per plan and device.
The thin path itself runs on a GPU only (benchmarks/qwen3_layer.py checks the layer it launches against fp32)."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import torch  # noqa: E402

from formloop.library import gemm_epilogue_launch  # noqa: E402
from formloop.library.qwen3_layer_kernels import _gemm  # noqa: E402


def test_run_falls_back_to_the_plan_launch_and_computes_the_same():
    g = torch.Generator().manual_seed(3)
    M, N, K = 1, 16, 64
    x = torch.randn(M, K, generator=g).to(torch.bfloat16)
    w = torch.randn(N, K, generator=g).to(torch.bfloat16)
    r = torch.randn(M, N, generator=g).to(torch.bfloat16)
    plan = _gemm({"Tm": 1, "Tn": 8, "Tk": 32, "S": 1, "W": 4, "KS": 2, "G": 1, "L": 0}, M, N, K, "add(name=residual)")
    ws = plan.new_workspace("cpu")
    ops = {"a": x, "b": w.T, "residual": r}
    by_launch, by_run = (torch.full((M, N), float("nan"), dtype=torch.bfloat16) for _ in range(2))
    plan.launch(ops, by_launch, ws)
    for _ in range(2):
        by_run.fill_(float("nan"))
        gemm_epilogue_launch.run(plan, ops, by_run, ws)
    want = x.double() @ w.double().T + r.double()
    assert torch.equal(by_run, by_launch)
    assert float((by_run.double() - want).norm() / want.norm()) < 2e-2
    thin = gemm_epilogue_launch.thin_launcher(plan, torch.device("cpu"))
    assert thin is gemm_epilogue_launch.thin_launcher(plan, torch.device("cpu"))
    assert thin.path == "jit" and "interpreter" in thin.fallback and thin.jit_calls == 2
    other = _gemm({"Tm": 1, "Tn": 8, "Tk": 32, "S": 1, "W": 4, "KS": 1, "G": 1, "L": 0}, M, N, K)
    assert gemm_epilogue_launch.thin_launcher(other, torch.device("cpu")) is not thin
