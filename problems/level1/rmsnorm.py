"""RMSNorm over the hidden dimension with a learned scale (Llama/Qwen)."""
import torch
from torch import nn
from torch.nn import functional as F

R, D = 32768, 4096
SMALL = {"R": 64, "D": 512}   # CPU-test sizes (problems/README.md)
SOL = {"op": "rmsnorm", "shape": {"R": R, "D": D}}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def get_inputs():
    return [torch.randn(R, D)]


def get_init_inputs():
    return [D]
