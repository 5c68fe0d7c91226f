"""Linear layer, then a scale and a clamp fused into its epilogue: y = clamp((x W^T + b) * s, lo, hi)."""
import torch
from torch import nn

M, N, K = 8192, 8192, 4096
SMALL = {"M": 64, "N": 256, "K": 128}   # CPU-test sizes (problems/README.md)
SCALE, LO, HI = 0.5, -1.0, 1.0


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float, lo: float, hi: float):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)
        self.scale, self.lo, self.hi = scale, lo, hi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.proj(x) * self.scale, min=self.lo, max=self.hi)


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N, SCALE, LO, HI]
