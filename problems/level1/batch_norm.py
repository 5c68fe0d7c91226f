"""BatchNorm2d in training mode (as KernelBench runs it): batch statistics per channel, running
mean and variance updated in place, affine scale and shift. [64, 64, 512, 512] fp32."""
import torch
from torch import nn

N, C, H, W = 64, 64, 512, 512
SMALL = {"N": 4, "C": 16, "H": 32, "W": 32}   # CPU-test sizes (problems/README.md)
SOL = {"op": "batchnorm", "shape": {"N": N, "C": C, "HW": H * W, "affine": 1, "running": 1}}


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C]
