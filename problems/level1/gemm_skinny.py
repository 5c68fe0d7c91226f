"""Skinny GEMM of decode: a few tokens times a weight matrix (memory-bound on every chip)."""
import torch
from torch import nn

M, N, K = 16, 8192, 8192
SMALL = {"M": 8, "N": 1024, "K": 1024}   # CPU-test sizes (problems/README.md)
SOL = {"op": "gemm", "shape": {"M": M, "N": N, "K": K}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, w)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
