"""InstanceNorm2d (no affine, no running statistics) over [112, 64, 512, 512] fp32 activations."""
import torch
from torch import nn

N, C, H, W = 112, 64, 512, 512
SMALL = {"N": 2, "C": 16, "H": 32, "W": 32}   # CPU-test sizes (problems/README.md)
SOL = {"op": "groupnorm", "shape": {"N": N, "C": C, "HW": H * W, "G": C, "affine": 0}}   # one group per channel


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.InstanceNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C]
