"""SiLU activation over a large activation tensor."""
import torch
from torch import nn
from torch.nn import functional as F

N = 1 << 16
SOL = {"op": "activation", "shape": {"N": N, "act": "silu"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [torch.randn(16, N // 16)]


def get_init_inputs():
    return []
