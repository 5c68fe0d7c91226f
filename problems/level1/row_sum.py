"""Sum reduction over the last dimension."""
import torch
from torch import nn

R, D = 256, 1024
SOL = {"op": "reduction", "shape": {"R": R, "D": D, "kind": "sum"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


def get_inputs():
    return [torch.randn(R, D)]


def get_init_inputs():
    return []
