"""Image to patches (F.unfold / im2col) with 16x16 windows of stride 16: pure data movement."""
import torch
from torch import nn
from torch.nn import functional as F

N, C, H, W, P = 128, 3, 224, 224, 16
SMALL = {"N": 2, "H": 32, "W": 32, "P": 8}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def __init__(self, patch: int):
        super().__init__()
        self.patch = patch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.unfold(x, kernel_size=self.patch, stride=self.patch)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [P]
