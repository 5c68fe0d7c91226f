"""The float64 torch reference of the rowwise ops, written from their definitions (torch's own
functions where torch has one); rmsnorm-residual rounds x + residual to x's dtype first, as the
HF Qwen3 decoder layer keeps its residual stream."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from formloop.errors import InvalidInput
from formloop.library.rowwise import ROW_OPS


def reference(op: str, x: torch.Tensor, weight=None, bias=None, residual=None, eps: float = 1e-6):
    """The op on x [R, C] in float64 (rmsnorm-residual: (y, new residual in x's dtype))."""
    if op not in ROW_OPS:
        raise InvalidInput("rowwise op", op, ROW_OPS)
    xd = x.double()
    if op == "rmsnorm-residual":
        res = (x.float() + residual.float()).to(x.dtype)
        y, _ = reference("rmsnorm", res, weight, eps=eps), None
        return y, res
    if op == "rmsnorm":
        return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    if op in ("layernorm", "groupnorm"):  # groupnorm with one group and hw = 1 (F.group_norm is tested apart)
        return F.layer_norm(xd, (x.shape[-1],), weight.double(), bias.double(), eps)
    if op == "softmax":
        return torch.softmax(xd, -1)
    if op == "log-softmax":
        return torch.log_softmax(xd, -1)
    if op == "logsumexp":
        return torch.logsumexp(xd, -1)
    if op in ("argmax", "argmin"):
        return getattr(torch, op)(xd, -1)
    if op in ("max", "min"):
        return getattr(torch, op)(xd, -1).values
    return getattr(torch, op)(xd, -1)
