"""Residual add of two hidden-state tensors."""
import torch
from torch import nn

B, S, D = 32, 4096, 4096
SMALL = {"B": 2, "S": 64, "D": 512}   # CPU-test sizes (problems/README.md)
SOL = {"op": "elementwise", "shape": {"N": B * S * D, "kind": "add"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return x + residual


def get_inputs():
    return [torch.randn(B, S, D), torch.randn(B, S, D)]


def get_init_inputs():
    return []
