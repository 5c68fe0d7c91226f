"""SwiGLU gate: silu(gate) * up, the elementwise core of Llama/Qwen MLPs."""
import torch
from torch import nn
from torch.nn import functional as F

T, FF = 16384, 14336
SMALL = {"T": 64, "FF": 1024}   # CPU-test sizes (problems/README.md)
SOL = {"op": "elementwise", "shape": {"N": T * FF, "kind": "swiglu"}}


class Model(nn.Module):
    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(T, FF), torch.randn(T, FF)]


def get_init_inputs():
    return []
