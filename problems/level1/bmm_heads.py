"""Batched GEMM: one small GEMM per head, as in unfused attention."""
import torch
from torch import nn

B, M, N, K = 16, 64, 64, 128
SOL = {"op": "bmm", "shape": {"B": B, "M": M, "N": N, "K": K}}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(B, M, K), torch.randn(B, K, N)]


def get_init_inputs():
    return []
