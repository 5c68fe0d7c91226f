"""GroupNorm (8 groups, affine) over [112, 64, 512, 512] fp32 activations (KernelBench's size, 7.5 GB)."""
import torch
from torch import nn

N, C, H, W, G = 112, 64, 512, 512, 8
SMALL = {"N": 2, "C": 16, "H": 32, "W": 32, "G": 4}   # CPU-test sizes (problems/README.md)
SOL = {"op": "groupnorm", "shape": {"N": N, "C": C, "HW": H * W, "G": G, "affine": 1}}


class Model(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [G, C]
