"""Fused gate-up projection of a SwiGLU MLP: one GEMM with both weights stacked, then silu(gate) * up."""
import torch
from torch import nn
from torch.nn import functional as F

M, K, FF = 8192, 4096, 14336
SMALL = {"M": 32, "K": 128, "FF": 256}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * ffn, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, FF]
