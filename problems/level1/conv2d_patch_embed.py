"""Non-overlapping patch embedding: a stride-4, 4x4 convolution without bias."""
import torch
from torch import nn

N, C, H, W, K, P = 2, 3, 32, 32, 64, 4
SOL = {"op": "conv2d", "shape": {"N": N, "C": C, "H": H, "W": W, "K": K, "R": P, "S": P, "stride": P}}


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, patch: int):
        super().__init__()
        self.embed = nn.Conv2d(c_in, c_out, kernel_size=patch, stride=patch, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C, K, P]
