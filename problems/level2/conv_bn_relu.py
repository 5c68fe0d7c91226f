"""3x3 convolution, training-mode BatchNorm and ReLU: the basic unit of a ResNet stage."""
import torch
from torch import nn

N, C, H, W, K = 64, 64, 56, 56, 128
SMALL = {"N": 2, "C": 8, "H": 16, "W": 16, "K": 16}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C, K]
