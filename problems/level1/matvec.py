"""Matrix-vector product y = A x with a 8192 x 131072 fp32 matrix (4.3 GB): pure bandwidth."""
import torch
from torch import nn

M, K = 8192, 131072
SMALL = {"M": 256, "K": 4096}   # CPU-test sizes (problems/README.md)
SOL = {"op": "gemm", "shape": {"M": M, "N": 1, "K": K}}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
