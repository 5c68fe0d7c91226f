"""Bidirectional self-attention prefill (encoder style), multi-head, no mask."""
import torch
from torch import nn
from torch.nn import functional as F

B, H, S, D = 32, 16, 1024, 64
SMALL = {"B": 1, "H": 4, "S": 64, "D": 32}   # CPU-test sizes (problems/README.md)
SOL = {"op": "attention_prefill", "shape": {"B": B, "H": H, "Hkv": H, "S": S, "D": D, "causal": 0}}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(B, H, S, D) for _ in range(3)]


def get_init_inputs():
    return []
