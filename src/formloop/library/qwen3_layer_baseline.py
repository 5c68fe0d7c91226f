"""The baseline the layer is compared with: the Hugging Face Qwen3DecoderLayer forward as HF runs it
in bf16 (RMSNorm computed in fp32 and cast back, separate q/k/v/o and gate/up/down projections,
rotate_half RoPE, scaled_dot_product_attention with GQA, the KV cache updated in place), written
as one function of its tensors so torch.compile can take it whole. Imports torch lazily."""
from __future__ import annotations

from formloop.library.qwen3_layer import Qwen3Config, Scenario, rope_tables


def _rms(x, w, eps: float):
    import torch

    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def _rot(x):
    import torch

    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def split_weights(cfg: Qwen3Config, weights: dict) -> dict:
    """HF's separate projections (q, k, v from the stacked w_qkv)."""
    q, kv = cfg.q_width, cfg.kv_width
    w = dict(weights)
    w["w_q"], w["w_k"], w["w_v"] = (weights["w_qkv"][:q], weights["w_qkv"][q: q + kv], weights["w_qkv"][q + kv:])
    return w


def rope_cache(cfg: Qwen3Config, sc: Scenario, device):
    """cos, sin [tokens, head_dim] in bf16 for the scenario's positions (HF casts them to the input dtype)."""
    import torch

    pos = torch.arange(sc.history, sc.kv_len, device=device)
    return rope_tables(cfg, pos, torch.bfloat16)


def make_layer(cfg: Qwen3Config, sc: Scenario):
    """layer(x, k_cache, v_cache, cos, sin, *weights) -> out: one HF layer forward (bf16), cache
    rows history.. written in place."""
    import torch
    import torch.nn.functional as F

    T, D, hist, L = sc.tokens, cfg.head_dim, sc.history, sc.kv_len
    causal = sc.kind == "prefill"

    def layer(x, k_cache, v_cache, cos, sin, w_in, w_q, w_k, w_v, q_norm, k_norm, w_o, w_post, w_gate, w_up, w_down):
        residual = x
        h = _rms(x, w_in, cfg.eps)
        q = F.linear(h, w_q).view(T, cfg.heads, D).transpose(0, 1)[None]
        k = F.linear(h, w_k).view(T, cfg.kv_heads, D).transpose(0, 1)[None]
        v = F.linear(h, w_v).view(T, cfg.kv_heads, D).transpose(0, 1)[None]
        q, k = _rms(q, q_norm, cfg.eps), _rms(k, k_norm, cfg.eps)
        q = q * cos + _rot(q) * sin
        k = k * cos + _rot(k) * sin
        k_cache[:, :, hist:L] = k
        v_cache[:, :, hist:L] = v
        a = F.scaled_dot_product_attention(q, k_cache[:, :, :L], v_cache[:, :, :L], is_causal=causal,
                                           enable_gqa=True)
        a = a[0].transpose(0, 1).reshape(T, cfg.q_width)
        h1 = residual + F.linear(a, w_o)
        h2 = _rms(h1, w_post, cfg.eps)
        return h1 + F.linear(F.silu(F.linear(h2, w_gate)) * F.linear(h2, w_up), w_down)

    return layer


WEIGHT_ORDER = ("w_in", "w_q", "w_k", "w_v", "q_norm", "k_norm", "w_o", "w_post", "w_gate", "w_up", "w_down")


def weight_args(cfg: Qwen3Config, weights: dict) -> tuple:
    w = split_weights(cfg, weights)
    return tuple(w[k] for k in WEIGHT_ORDER)
