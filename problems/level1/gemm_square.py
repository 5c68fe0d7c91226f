"""Square GEMM C = A @ B (FP32): the shape family of the seed's SOL example, scaled down for CPU."""
import torch
from torch import nn

M = N = K = 256
SOL = {"op": "gemm", "shape": {"M": M, "N": N, "K": K}}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
