"""Exact (erf) GELU over an activation tensor."""
import torch
from torch import nn
from torch.nn import functional as F

ROWS, COLS = 4096, 393216
SMALL = {"ROWS": 8, "COLS": 8192}   # CPU-test sizes (problems/README.md)
N = ROWS * COLS
SOL = {"op": "activation", "shape": {"N": N, "act": "gelu"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
