"""Batched GEMM: one small GEMM per head, as in unfused attention."""
import torch
from torch import nn

B, M, N, K = 128, 512, 2048, 1024
SMALL = {"B": 16, "M": 64, "N": 64, "K": 128}   # CPU-test sizes (problems/README.md)
SOL = {"op": "bmm", "shape": {"B": B, "M": M, "N": N, "K": K}}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(B, M, K), torch.randn(B, K, N)]


def get_init_inputs():
    return []
