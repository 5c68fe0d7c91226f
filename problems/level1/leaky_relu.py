"""Leaky ReLU (slope 0.01) over a 4096 x 393216 fp32 activation."""
import torch
from torch import nn
from torch.nn import functional as F

ROWS, COLS = 4096, 393216
SMALL = {"ROWS": 16, "COLS": 4096}   # CPU-test sizes (problems/README.md)
SOL = {"op": "activation", "shape": {"N": ROWS * COLS, "act": "leaky_relu"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=0.01)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
