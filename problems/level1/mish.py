"""Mish, x * tanh(softplus(x)), over a 4096 x 393216 fp32 activation."""
import torch
from torch import nn
from torch.nn import functional as F

ROWS, COLS = 4096, 393216
SMALL = {"ROWS": 16, "COLS": 4096}   # CPU-test sizes (problems/README.md)
SOL = {"op": "activation", "shape": {"N": ROWS * COLS, "act": "mish"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
