"""Decode attention: one new query token per sequence against a KV cache, grouped-query heads."""
import torch
from torch import nn
from torch.nn import functional as F

B, H, HKV, L, D = 64, 32, 8, 8192, 128
SMALL = {"B": 4, "H": 8, "HKV": 2, "L": 256, "D": 64}   # CPU-test sizes (problems/README.md)
SOL = {"op": "attention_decode", "shape": {"B": B, "H": H, "Hkv": HKV, "L": L, "D": D}}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)


def get_inputs():
    return [torch.randn(B, H, 1, D), torch.randn(B, HKV, L, D), torch.randn(B, HKV, L, D)]


def get_init_inputs():
    return []
