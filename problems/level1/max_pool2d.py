"""3x3 max pooling with stride 2 and padding 1 (the ResNet stem) on [64, 64, 112, 112] activations."""
import torch
from torch import nn

N, C, H, W = 64, 64, 112, 112
SMALL = {"N": 2, "C": 8, "H": 32, "W": 32}   # CPU-test sizes (problems/README.md)
SOL = {"op": "maxpool2d", "shape": {"N": N, "C": C, "H": H, "W": W, "k": 3, "stride": 2, "pad": 1}}


class Model(nn.Module):
    def __init__(self, kernel: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [3, 2, 1]
