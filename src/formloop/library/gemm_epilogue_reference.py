"""The torch reference of an epilogue chain, in float64: what each operation means, written
independently of the Triton source (torch's own functions wherever torch has one)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from formloop.library.gemm_epilogue_ops import EpilogueOp
from formloop.library.gemm_tiling_kernel import TORCH_DTYPES

_ACTS = {
    "relu": F.relu, "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "mish": F.mish,
    "gelu": lambda x: F.gelu(x, approximate="none"), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def apply_op(op: EpilogueOp, x: torch.Tensor, inputs: Mapping[str, torch.Tensor], reduced: bool) -> torch.Tensor:
    """`op` applied to the float64 value x ([..., M, N] tile, or [..., M] once reduced)."""
    a = dict(op.args)
    if op.tensor is not None:
        t = inputs[op.tensor_name].double()
        if op.tensor == "col" and not reduced:
            t = t[:, None]
        return x + t if op.kind in ("bias", "add") else x * t
    k = op.kind
    if k == "scale":
        return x * a["by"]
    if k in ("relu", "silu", "sigmoid", "tanh", "mish"):
        return _ACTS[k](x)
    if k == "gelu":
        return F.gelu(x, approximate="none" if a["approx"] == "erf" else "tanh")
    if k == "leaky_relu":
        return F.leaky_relu(x, a["slope"])
    if k == "hardtanh":
        return F.hardtanh(x, a["lo"], a["hi"])
    if k == "clamp":
        return torch.clamp(x, min=a["lo"], max=a["hi"])
    if k == "softplus":
        return F.softplus(x, beta=a["beta"], threshold=a["threshold"])
    if k == "softmax":
        return torch.softmax(x, dim=-1)
    if k == "logsumexp":
        return torch.logsumexp(x, dim=-1)
    if k == "cast":
        return x.to(TORCH_DTYPES[a["dtype"]]).double()
    if k == "glu":
        act = _ACTS["gelu" if a["act"] == "gelu" else a["act"]]
        return act(x[..., 0::2]) * x[..., 1::2]
    raise ValueError(f"no reference for epilogue operation {k}")


def apply_chain(chain: Sequence[EpilogueOp], acc: torch.Tensor, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    x, reduced = acc.double(), False
    for op in chain:
        x = apply_op(op, x, inputs, reduced)
        reduced = reduced or op.spec.reduces
    return x
