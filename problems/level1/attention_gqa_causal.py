"""Causal grouped-query attention prefill: 8 query heads share 2 key/value heads (Qwen3 ratio 4:1)."""
import torch
from torch import nn
from torch.nn import functional as F

B, H, HKV, S, D = 1, 8, 2, 128, 64
SOL = {"op": "attention_prefill", "shape": {"B": B, "H": H, "Hkv": HKV, "S": S, "D": D, "causal": 1}}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def get_inputs():
    return [torch.randn(B, H, S, D), torch.randn(B, HKV, S, D), torch.randn(B, HKV, S, D)]


def get_init_inputs():
    return []
