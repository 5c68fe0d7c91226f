"""Linear layer with bias and ReLU fused into the GEMM epilogue."""
import torch
from torch import nn

M, N, K = 8192, 8192, 8192
SMALL = {"M": 64, "N": 256, "K": 512}   # CPU-test sizes (problems/README.md)
SOL = {"op": "linear", "shape": {"M": M, "N": N, "K": K, "bias": 1, "act": "relu"}}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x))


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
