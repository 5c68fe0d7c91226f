"""Post-norm output block (BERT style): LayerNorm(x W^T + b + residual)."""
import torch
from torch import nn

M, D = 16384, 4096
SMALL = {"M": 64, "D": 256}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(self.dense(x) + residual)


def get_inputs():
    return [torch.randn(M, D), torch.randn(M, D)]


def get_init_inputs():
    return [D]
