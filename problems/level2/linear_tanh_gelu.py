"""Up projection with the tanh-approximated GELU of GPT-2 style MLPs."""
import torch
from torch import nn
from torch.nn import functional as F

M, N, K = 4096, 12288, 3072
SMALL = {"M": 48, "N": 512, "K": 128}   # CPU-test sizes (problems/README.md)
SOL = {"op": "linear", "shape": {"M": M, "N": N, "K": K, "bias": 1, "act": "gelu_tanh"}}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x), approximate="tanh")


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
