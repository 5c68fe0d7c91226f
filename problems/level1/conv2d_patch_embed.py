"""Non-overlapping patch embedding: a PxP convolution of stride P without bias (ViT-B/16 at full size)."""
import torch
from torch import nn

N, C, H, W, K, P = 64, 3, 224, 224, 768, 16
SMALL = {"N": 2, "C": 3, "H": 32, "W": 32, "K": 64, "P": 4}   # CPU-test sizes (problems/README.md)
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
