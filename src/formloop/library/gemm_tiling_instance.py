"""The tiling family's instances as the evaluator runs them: fresh operands, a poisoned output,
the kernel's launch and a float64 reference (`formloop.evaluate.Runnable`), and torch.matmul on
the same operands as the production-library baseline.

This module imports triton and torch (through `gemm_tiling_kernel`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from formloop.library.gemm_tiling_kernel import TOLERANCE, TORCH_DTYPES, GemmPlan, TileConfig
from formloop.library.gemm_tiling_launch import LaunchPlan, device_key


@dataclass
class GemmCase:
    """One set of operands: fresh random A and B, a poisoned output C and the workspace."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    workspace: torch.Tensor | None = None


def random_operands(M: int, N: int, K: int, dtype: str, device, generator: torch.Generator
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh normal(0, 1) operands, never zeros (zeros hide unwritten outputs and run faster)."""
    t = TORCH_DTYPES[dtype]
    a = torch.randn((M, K), device=device, dtype=torch.float32, generator=generator).to(t)
    b = torch.randn((K, N), device=device, dtype=torch.float32, generator=generator).to(t)
    return a, b


def poison(c: torch.Tensor) -> None:
    """Fill with NaN: an element the kernel never writes fails the check."""
    c.fill_(float("nan"))


class TritonGemm:
    """The generated instance as the evaluator sees it (formloop.evaluate.Runnable)."""

    tier_source = "triton"

    def __init__(self, plan: GemmPlan, thin: bool = True):
        self.plan = plan
        self.name = f"triton gemm {plan.config.as_dict()}"
        self.tolerance = TOLERANCE[plan.dtype]
        self.thin = thin  # launch through a LaunchPlan (plan once, run many) rather than the JIT entry
        self._launch_plans: dict[str, LaunchPlan] = {}

    def new_case(self, device, generator: torch.Generator) -> GemmCase:
        p = self.plan
        a, b = random_operands(p.M, p.N, p.K, p.dtype, device, generator)
        c = torch.empty((p.M, p.N), device=device, dtype=p.torch_dtype)
        poison(c)
        return GemmCase(a, b, c, p.new_workspace(device))

    def launch(self, case: GemmCase) -> None:
        if not self.thin:
            self.plan.launch(case.a, case.b, case.c, case.workspace)
            return
        self.launch_plan(case.c.device).run(case.a, case.b, case.c, case.workspace)

    def launch_plan(self, device) -> LaunchPlan:
        """The plan of this instance on `device` (made on first use, then reused). 'cuda' and 'cuda:0'
        (the current device) are one plan: a report that asks for 'cuda' reads the plan the launches used."""
        key = str(device_key(device))
        lp = self._launch_plans.get(key)
        if lp is None:
            lp = self._launch_plans[key] = LaunchPlan(self.plan, device)
        return lp

    def output(self, case: GemmCase) -> torch.Tensor:
        return case.c

    def reference(self, case: GemmCase) -> torch.Tensor:
        return case.a.double() @ case.b.double()

    def poison(self, case: GemmCase) -> None:
        poison(case.c)
        if case.workspace is not None:  # the partials, not the counters (the kernel keeps those at zero)
            poison(case.workspace[: math.prod(self.plan.workspace_shape)])

    @property
    def case_bytes(self) -> int:
        p = self.plan
        e = torch.empty((), dtype=p.torch_dtype).element_size()
        ws = 0 if p.workspace_shape is None else 4 * (p._counters_at + p.tiles)
        return e * (p.M * p.K + p.K * p.N + p.M * p.N) + ws


class TorchGemm(TritonGemm):
    """torch.matmul (cuBLAS on a GPU) on the same operands: the production-library baseline."""

    tier_source = "torch.matmul"

    def __init__(self, M: int, N: int, K: int, dtype: str):
        super().__init__(GemmPlan(TileConfig(16, 16, 16, KS=1), M, N, K, dtype))
        self.name = "torch.matmul"

    def launch(self, case: GemmCase) -> None:
        # cuBLAS reads the math mode at call time (also when a CUDA graph captures the call).
        torch.backends.cuda.matmul.allow_tf32 = self.plan.dtype == "tf32"
        torch.matmul(case.a, case.b, out=case.c)
