"""What an assembled `ModelNew` calls for a row-wise or elementwise region: the vector families'
kernels (rowwise_kernel, elementwise_kernel) on tensors of any rank, with the instance the MILP chose
written into the ModelNew (formloop.optimize).

`row_op(op, x, config=..., weight=, bias=, eps=)` runs a row-wise op over x's last dimension (x viewed
[numel/C, C]); norms and softmaxes keep x's shape, reductions drop the last dimension.
`ew_chain(chain, x, inputs, config=...)` runs a fused elementwise chain (gemm-epilogue's vocabulary)."""
from __future__ import annotations

from collections.abc import Mapping

import torch

REDUCTIONS = ("sum", "mean", "max", "min", "argmax", "argmin", "logsumexp")


def row_op(op: str, x: torch.Tensor, *, config: Mapping[str, int], weight: torch.Tensor | None = None,
           bias: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    from formloop.library.rowwise_kernel import RowConfig, rowwise

    lead, c = tuple(x.shape[:-1]), int(x.shape[-1])
    x2 = x.reshape(-1, c)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = rowwise(op, x2, weight=weight, bias=bias, eps=eps, config=RowConfig.from_assignment(config))
    return y.reshape(lead) if op in REDUCTIONS else y.reshape(*lead, c)


def ew_chain(chain: str, x: torch.Tensor, inputs: Mapping[str, torch.Tensor] | None = None, *,
             config: Mapping[str, int]) -> torch.Tensor:
    from formloop.library.elementwise_kernel import EwConfig, run_chain

    x = x if x.is_contiguous() else x.contiguous()
    ins = {k: (v if v.is_contiguous() else v.contiguous()) for k, v in (inputs or {}).items()}
    return run_chain(chain, x, ins, config=EwConfig.from_assignment(config))
