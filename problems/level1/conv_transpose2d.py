"""Transposed 4x4 convolution of stride 2 (a DCGAN/decoder upsampling layer), no padding, no bias."""
import torch
from torch import nn

N, C, H, W, K, R = 16, 256, 64, 64, 128, 4
SMALL = {"N": 2, "C": 8, "H": 8, "W": 8, "K": 4}   # CPU-test sizes (problems/README.md)
SOL = {"op": "conv_transpose2d", "shape": {"N": N, "C": C, "H": H, "W": W, "K": K, "R": R, "S": R, "stride": 2}}


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(c_in, c_out, kernel, stride=2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(x)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C, K, R]
