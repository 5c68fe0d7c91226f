"""3x3 convolution with padding 1 and bias (a patch-embedding / vision-tower building block)."""
import torch
from torch import nn

N, C, H, W, K = 64, 64, 56, 56, 64
SMALL = {"N": 2, "C": 16, "H": 16, "W": 16, "K": 32}   # CPU-test sizes (problems/README.md)
SOL = {"op": "conv2d", "shape": {"N": N, "C": C, "H": H, "W": W, "K": K, "R": 3, "S": 3, "pad": 1, "bias": 1}}


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C, K]
