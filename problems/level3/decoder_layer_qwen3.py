"""A Qwen3-8B-width decoder layer: pre-norm, GQA with per-head q/k RMSNorm and RoPE,
causal attention, SwiGLU MLP, two residual adds. Prefill of S tokens."""
import torch
from torch import nn
from torch.nn import functional as F

B, S, DM, H, HKV, DH, FF = 1, 4096, 4096, 32, 8, 128, 12288
SMALL = {"B": 1, "S": 32, "DM": 256, "H": 4, "HKV": 2, "DH": 64, "FF": 512}   # CPU-test sizes (problems/README.md)
EPS = 1e-6
SOL = {"op": "decoder_layer", "shape": {"B": B, "S": S, "Dm": DM, "H": H, "Hkv": HKV, "Dh": DH, "F": FF}}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, EPS)


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int):
        super().__init__()
        self.h, self.hkv, self.dh = heads, kv_heads, head_dim
        self.input_norm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.q_norm = RMSNorm(head_dim)
        self.k_norm = RMSNorm(head_dim)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.post_norm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.input_norm(x)
        q = self.q_norm(self.q_proj(h).view(b, s, self.h, self.dh))
        k = self.k_norm(self.k_proj(h).view(b, s, self.hkv, self.dh))
        v = self.v_proj(h).view(b, s, self.hkv, self.dh)
        cos, sin = cos[:, None, :], sin[:, None, :]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True, enable_gqa=True)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, s, self.h * self.dh))
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def get_inputs():
    inv_freq = 1.0 / (1_000_000 ** (torch.arange(0, DH, 2).float() / DH))
    angles = torch.outer(torch.arange(S).float(), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return [torch.randn(B, S, DM), angles.cos(), angles.sin()]


def get_init_inputs():
    return [DM, H, HKV, DH, FF]
