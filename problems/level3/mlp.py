"""A four-layer MLP with ReLU between layers (KernelBench's MLP family at realistic widths)."""
import torch
from torch import nn

BATCH = 2048
SIZES = (4096, 8192, 8192, 4096, 1000)   # input width, hidden widths, output width
SMALL = {"BATCH": 16, "SIZES": (64, 128, 128, 64, 10)}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def get_inputs():
    return [torch.randn(BATCH, SIZES[0])]


def get_init_inputs():
    return [SIZES]
