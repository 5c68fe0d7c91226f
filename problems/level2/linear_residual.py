"""Output projection with the residual add fused: y = x W^T + r (no bias, as in Qwen/Llama)."""
import torch
from torch import nn

M, N, K = 8192, 4096, 4096
SMALL = {"M": 64, "N": 512, "K": 512}   # CPU-test sizes (problems/README.md)
SOL = {"op": "linear", "shape": {"M": M, "N": N, "K": K, "bias": 0, "residual": 1}}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.o_proj = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.o_proj(x) + residual


def get_inputs():
    return [torch.randn(M, K), torch.randn(M, N)]


def get_init_inputs():
    return [K, N]
