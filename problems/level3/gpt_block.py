"""A GPT-2-medium-width transformer block: pre-norm, causal self-attention whose mask is built in the
forward with triu and added (-inf above the diagonal), tanh-GELU MLP, two residual adds."""
import math

import torch
from torch import nn
from torch.nn import functional as F

B, T, C, H = 8, 1024, 1024, 16
SMALL = {"B": 2, "T": 32, "C": 64, "H": 4}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd)
        self.n_head = n_head

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        causal = torch.full((t, t), float("-inf"), device=x.device).triu(1)
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.size(-1)) + causal, dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(b, t, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(B, T, C)]


def get_init_inputs():
    return [C, H]
