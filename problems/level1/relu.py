"""ReLU over a 4096 x 393216 fp32 activation (KernelBench's elementwise size: 6.4 GB in, 6.4 GB out)."""
import torch
from torch import nn
from torch.nn import functional as F

ROWS, COLS = 4096, 393216
SMALL = {"ROWS": 16, "COLS": 4096}   # CPU-test sizes (problems/README.md)
SOL = {"op": "activation", "shape": {"N": ROWS * COLS, "act": "relu"}}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
