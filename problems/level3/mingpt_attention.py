"""minGPT causal self-attention written out by hand: the causal mask is a registered lower-triangular
buffer applied with masked_fill before the softmax (no fused attention call)."""
import math

import torch
from torch import nn
from torch.nn import functional as F

B, T, C, H = 32, 1024, 768, 12
SMALL = {"B": 2, "T": 64, "C": 64, "H": 4}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def __init__(self, n_embd: int, n_head: int, max_seqlen: int):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        mask = torch.tril(torch.ones(max_seqlen, max_seqlen))
        self.register_buffer("bias", mask.view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


def get_inputs():
    return [torch.randn(B, T, C)]


def get_init_inputs():
    return [C, H, T]
