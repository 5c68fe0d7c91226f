"""Causal grouped-query attention prefill: query heads share key/value heads 4:1 (Qwen3 ratio)."""
import torch
from torch import nn
from torch.nn import functional as F

B, H, HKV, S, D = 8, 32, 8, 4096, 128
SMALL = {"B": 1, "H": 8, "HKV": 2, "S": 128, "D": 64}   # CPU-test sizes (problems/README.md)
SOL = {"op": "attention_prefill", "shape": {"B": B, "H": H, "Hkv": HKV, "S": S, "D": D, "causal": 1}}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def get_inputs():
    return [torch.randn(B, H, S, D), torch.randn(B, HKV, S, D), torch.randn(B, HKV, S, D)]


def get_init_inputs():
    return []
