"""Sum reduction over the last dimension."""
import torch
from torch import nn

R, D = 32768, 32768
SMALL = {"R": 256, "D": 1024}   # CPU-test sizes (problems/README.md)
SOL = {"op": "reduction", "shape": {"R": R, "D": D, "kind": "sum"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


def get_inputs():
    return [torch.randn(R, D)]


def get_init_inputs():
    return []
