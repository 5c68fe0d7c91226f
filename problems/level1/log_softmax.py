"""Row log-softmax over a 393216-wide last dimension (KernelBench's size)."""
import torch
from torch import nn

R, D = 4096, 393216
SMALL = {"R": 16, "D": 4096}   # CPU-test sizes (problems/README.md)
SOL = {"op": "log_softmax", "shape": {"R": R, "D": D}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


def get_inputs():
    return [torch.randn(R, D)]


def get_init_inputs():
    return []
