"""Square GEMM C = A @ B (FP32), 8192 on a side: the shape family of the seed's SOL example."""
import torch
from torch import nn

M = N = K = 8192
SMALL = {"M": 256, "N": 256, "K": 256}   # CPU-test sizes (problems/README.md)
SOL = {"op": "gemm", "shape": {"M": M, "N": N, "K": K}}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
