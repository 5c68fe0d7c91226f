"""Linear layer with bias and exact (erf) GELU epilogue, on a [batch, tokens, features] input."""
import torch
from torch import nn
from torch.nn import functional as F

B, S, N, K = 8, 2048, 16384, 4096
SMALL = {"B": 2, "S": 32, "N": 384, "K": 256}   # CPU-test sizes (problems/README.md)
SOL = {"op": "linear", "shape": {"M": B * S, "N": N, "K": K, "bias": 1, "act": "gelu"}}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


def get_inputs():
    return [torch.randn(B, S, K)]


def get_init_inputs():
    return [K, N]
