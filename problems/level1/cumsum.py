"""Inclusive prefix sum along rows of a 32768 x 32768 matrix (a scan: sequential along the row)."""
import torch
from torch import nn

R, D = 32768, 32768
SMALL = {"R": 64, "D": 2048}   # CPU-test sizes (problems/README.md)
SOL = {"op": "scan", "shape": {"R": R, "D": D}}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(R, D)]


def get_init_inputs():
    return [1]
