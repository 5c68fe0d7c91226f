"""GEMM followed by a row softmax, two operators with no single hand formula: automatic SOL only."""
import torch
from torch import nn

M, N, K = 4096, 32768, 4096
SMALL = {"M": 64, "N": 512, "K": 256}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.softmax(a @ b, dim=-1)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
