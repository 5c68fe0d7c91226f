"""BF16 GEMM with BF16 output: the storage type of LLM serving."""
import torch
from torch import nn

M, N, K = 4096, 4096, 4096
SMALL = {"M": 128, "N": 256, "K": 512}   # CPU-test sizes (problems/README.md)
SOL = {"op": "gemm", "shape": {"M": M, "N": N, "K": K}}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
