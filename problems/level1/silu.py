"""SiLU activation over a large activation tensor."""
import torch
from torch import nn
from torch.nn import functional as F

ROWS, COLS = 4096, 393216
SMALL = {"ROWS": 16, "COLS": 4096}   # CPU-test sizes (problems/README.md)
N = ROWS * COLS
SOL = {"op": "activation", "shape": {"N": N, "act": "silu"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
