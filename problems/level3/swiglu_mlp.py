"""SwiGLU MLP block: down(silu(gate(x)) * up(x)), no biases (Llama/Qwen)."""
import torch
from torch import nn
from torch.nn import functional as F

T, DM, FF = 4096, 4096, 14336
SMALL = {"T": 32, "DM": 256, "FF": 688}   # CPU-test sizes (problems/README.md)
SOL = {"op": "swiglu_mlp", "shape": {"M": T, "Dm": DM, "F": FF}}


class Model(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def get_inputs():
    return [torch.randn(T, DM)]


def get_init_inputs():
    return [DM, FF]
