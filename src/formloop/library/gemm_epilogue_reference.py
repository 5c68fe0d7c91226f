"""The torch reference of an epilogue chain, in float64: what each operation means, written
independently of the Triton source (torch's own functions wherever torch has one).

Roundings (a cast in the chain, the store to C, a narrowing stage after the kernel) are where a
kernel that computes in float32 may land one step away from the float64 value: the value before
the rounding differs from the exact one by float32 arithmetic (accumulation order, the epilogue's
exp and tanh), and near a rounding boundary that picks the other neighbour. Both neighbours are
right; `admissible` computes the chain twice, rounding to nearest and with every value that lies
within `AMBIGUOUS` (relative) of a boundary sent the other way, and takes per element the one
nearer the output. Anything else the kernel gets wrong still shows: the two references differ only
at those elements (and, through a row reduction, by that one step's share of the row)."""
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


# How far (relative) a float32 kernel's value may sit from the float64 one before a rounding: the
# accumulation over K and the epilogue's transcendental functions stay well inside 2^-14; TF32
# operands (10-bit mantissas) move the product by up to about 2^-10.
AMBIGUOUS = {"tf32": 2.0 ** -10}
AMBIGUOUS_DEFAULT = 2.0 ** -14


def round_pair(x: torch.Tensor, dtype: torch.dtype, delta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(nearest, other): x rounded to `dtype` to nearest, and to its other neighbour where x lies
    within delta·|x| of the boundary between the two (elsewhere the nearest again)."""
    near = x.to(dtype).double()
    lo, hi = (x * (1.0 - delta)).to(dtype).double(), (x * (1.0 + delta)).to(dtype).double()
    other = torch.where(lo != near, lo, hi)
    return near, other


def apply_chain_pair(chain: Sequence[EpilogueOp], acc: torch.Tensor, inputs: Mapping[str, torch.Tensor],
                     stores: Sequence[torch.dtype], delta: float = AMBIGUOUS_DEFAULT):
    """(nearest, other): the chain and then each store's rounding (C's dtype, narrowing stages),
    every rounding to nearest, and every ambiguous rounding the other way."""
    near, other, reduced = acc.double(), acc.double(), False
    for op in chain:
        if op.kind == "cast":
            dt = TORCH_DTYPES[op.arg("dtype")]
            near, other = near.to(dt).double(), round_pair(other, dt, delta)[1]
        else:
            near, other = apply_op(op, near, inputs, reduced), apply_op(op, other, inputs, reduced)
        reduced = reduced or op.spec.reduces
    for dt in stores:
        near, other = near.to(dt).double(), round_pair(other, dt, delta)[1]
    return near, other


def admissible(near: torch.Tensor, other: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """Per element, whichever of the two references is nearer `out` (the nearest one where out is
    missing or not a number: a poisoned element stays wrong)."""
    if out is None:
        return near
    o = out.detach().double().to(near.device)
    return torch.where((o - other).abs() < (o - near).abs(), other, near)
