"""LayerNorm with weight and bias over the hidden dimension (GPT-2 / ViT)."""
import torch
from torch import nn

B, S, D = 16, 2048, 4096
SMALL = {"B": 4, "S": 16, "D": 768}   # CPU-test sizes (problems/README.md)
SOL = {"op": "layernorm", "shape": {"R": B * S, "D": D}}


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(B, S, D)]


def get_init_inputs():
    return [D]
