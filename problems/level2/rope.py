"""Rotary position embedding applied to a [batch, seq, heads, head_dim] tensor (rotate-half form)."""
import torch
from torch import nn

B, S, H, D = 16, 4096, 32, 128
SMALL = {"B": 1, "S": 64, "H": 8, "D": 64}   # CPU-test sizes (problems/README.md)
SOL = {"op": "rope", "shape": {"B": B, "S": S, "H": H, "D": D}}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class Model(nn.Module):
    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        cos, sin = cos[:, None, :], sin[:, None, :]          # [S, 1, D] broadcasts over heads
        return x * cos + rotate_half(x) * sin


def get_inputs():
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    angles = torch.outer(torch.arange(S).float(), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return [torch.randn(B, S, H, D), angles.cos(), angles.sin()]


def get_init_inputs():
    return []
