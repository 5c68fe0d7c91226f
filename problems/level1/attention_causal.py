"""Causal self-attention prefill, multi-head (decoder style)."""
import torch
from torch import nn
from torch.nn import functional as F

B, H, S, D = 16, 32, 2048, 128
SMALL = {"B": 2, "H": 4, "S": 96, "D": 64}   # CPU-test sizes (problems/README.md)
SOL = {"op": "attention_prefill", "shape": {"B": B, "H": H, "Hkv": H, "S": S, "D": D, "causal": 1}}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    return [torch.randn(B, H, S, D) for _ in range(3)]


def get_init_inputs():
    return []
