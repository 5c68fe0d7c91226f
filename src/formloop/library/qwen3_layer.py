"""The Qwen3 decoder layer as a workload: its configuration (checked), its scenarios (parsed), and the
reference, the Hugging Face `Qwen3DecoderLayer` math written in torch.

    h   = x + o_proj(attention(rope(q_norm(q)), rope(k_norm(k)), v))    q, k, v = qkv_proj(rms(x))
    out = h + down_proj(silu(gate_proj(rms(h))) * up_proj(rms(h)))

RMSNorm is HF's: y = w · (x / sqrt(mean(x²) + eps)), q_norm / k_norm per head over head_dim; RoPE
rotates halves (rotate_half), inv_freq = theta^(−2i/head_dim); attention is causal with grouped
query heads (query head h reads key/value head h // (heads / kv_heads)), scaled by 1/sqrt(head_dim).
The KV cache is [batch, kv_heads, capacity, head_dim] per K and V; a scenario writes its new
tokens' (normed, rotated) keys and values at their positions and attends over the cache up to them.

Scenarios: `prefill:N` (N new tokens, empty history, positions 0..N−1) and `decode:H` (one new
token at position H after a history of H cached tokens). Batch 1. This module imports torch lazily."""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from formloop.errors import InvalidInput

HEAD_DIMS = (64, 128)        # the attention templates' dots and the fused rope kernel take these
DTYPES = ("bf16",)
MAX_TOKENS = 1 << 20


class UnsupportedConfig(InvalidInput):
    """A model configuration the layer's kernels do not compute (a field and what is allowed)."""


class ScenarioError(InvalidInput):
    """A scenario text that does not parse (the field and what is allowed)."""


@dataclass(frozen=True)
class Qwen3Config:
    """The shapes and constants of one decoder layer (`layers` is the stack depth for tokens/s)."""

    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    intermediate: int = 12288
    eps: float = 1e-6
    rope_theta: float = 1e6
    layers: int = 36
    dtype: str = "bf16"

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def qkv_width(self) -> int:
        return self.q_width + 2 * self.kv_width

    def as_dict(self) -> dict:
        return asdict(self)


MODELS = {
    "qwen3-8b": Qwen3Config(),
    # the small shapes every fusion choice is checked on in the Triton interpreter
    "tiny": Qwen3Config(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, layers=2),
}


def check_config(cfg: Qwen3Config) -> Qwen3Config:
    """`cfg` if the layer's kernels compute it, else UnsupportedConfig naming the first bad field."""
    for name in ("hidden", "heads", "kv_heads", "intermediate", "layers"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UnsupportedConfig(name, v, "an integer >= 1")
    if cfg.head_dim not in HEAD_DIMS:
        raise UnsupportedConfig("head_dim", cfg.head_dim, HEAD_DIMS)
    if cfg.heads % cfg.kv_heads:
        raise UnsupportedConfig("heads", cfg.heads, f"a multiple of kv_heads={cfg.kv_heads} (grouped query heads)")
    for name in ("hidden", "intermediate"):
        if getattr(cfg, name) % 64:
            raise UnsupportedConfig(name, getattr(cfg, name), "a multiple of 64 (16-byte rows and whole k-tiles)")
    if cfg.hidden > 16384:
        raise UnsupportedConfig("hidden", cfg.hidden, "at most 16384 (one row-norm program holds a row)")
    for name in ("eps", "rope_theta"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise UnsupportedConfig(name, v, "a finite number > 0")
    if cfg.dtype not in DTYPES:
        raise UnsupportedConfig("dtype", cfg.dtype, DTYPES)
    return cfg


def get_model(name: str) -> Qwen3Config:
    if name not in MODELS:
        raise UnsupportedConfig("model", name, sorted(MODELS))
    return check_config(MODELS[name])


@dataclass(frozen=True)
class Scenario:
    """`kind` prefill (tokens new tokens, history 0) or decode (1 new token after `history`)."""

    kind: str
    tokens: int
    history: int

    @property
    def kv_len(self) -> int:
        """Cached positions attended to once the new tokens are written."""
        return self.history + self.tokens

    @property
    def text(self) -> str:
        return f"prefill:{self.tokens}" if self.kind == "prefill" else f"decode:{self.history}"


_SCENARIO = re.compile(r"([a-z]+):([0-9]+)")


def parse_scenario(text: str) -> Scenario:
    """`prefill:N` (N >= 1 new tokens) or `decode:H` (history H >= 1); anything else is a
    ScenarioError naming the field."""
    if not isinstance(text, str):
        raise ScenarioError("scenario", text, "text prefill:N or decode:H")
    kind, sep, count = text.strip().partition(":")
    if not sep:
        raise ScenarioError("scenario", text, "prefill:N or decode:H (kind:count)")
    if kind not in ("prefill", "decode"):
        raise ScenarioError("scenario kind", kind, ("prefill", "decode"))
    field = "scenario tokens" if kind == "prefill" else "scenario history"
    if not _SCENARIO.fullmatch(f"{kind}:{count}") or not count.isascii():
        raise ScenarioError(field, count, f"a whole number 1..{MAX_TOKENS} (ASCII digits)")
    n = int(count)
    if not 1 <= n <= MAX_TOKENS:
        raise ScenarioError(field, n, f"a whole number 1..{MAX_TOKENS}")
    return Scenario("prefill", n, 0) if kind == "prefill" else Scenario("decode", 1, n)


# -- the reference (torch) -----------------------------------------------------------------------

WEIGHTS = ("w_in", "w_qkv", "q_norm", "k_norm", "w_o", "w_post", "w_gate", "w_up", "w_down")


def new_weights(cfg: Qwen3Config, device="cpu", seed: int = 0) -> dict:
    """Random bf16 weights as nn.Linear keeps them ([out, in]); q, k, v stacked in w_qkv. Linear
    weights have std 1/sqrt(in) (activations stay about N(0, 1)); norm weights 1 + N(0, 0.1). Drawn by
    the device's own generator (a CPU draw of 8B-model shapes is slow), so values depend on the device."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    dt = torch.bfloat16

    def lin(out_f: int, in_f: int):
        return (torch.randn(out_f, in_f, generator=g, device=device) / math.sqrt(in_f)).to(dt)

    def norm(n: int):
        return (1.0 + 0.1 * torch.randn(n, generator=g, device=device)).to(dt)

    return {"w_in": norm(cfg.hidden), "w_qkv": lin(cfg.qkv_width, cfg.hidden), "q_norm": norm(cfg.head_dim),
            "k_norm": norm(cfg.head_dim), "w_o": lin(cfg.hidden, cfg.q_width), "w_post": norm(cfg.hidden),
            "w_gate": lin(cfg.intermediate, cfg.hidden), "w_up": lin(cfg.intermediate, cfg.hidden),
            "w_down": lin(cfg.hidden, cfg.intermediate)}


def new_state(cfg: Qwen3Config, sc: Scenario, device="cpu", seed: int = 1, capacity: int | None = None):
    """(x [tokens, hidden] bf16, k_cache, v_cache [1, kv_heads, capacity, head_dim] bf16): the
    history filled with random keys/values (as earlier layers' calls would have left it), the rest
    poisoned with NaN so a missed write or a read past the history shows."""
    import torch

    cap = sc.kv_len if capacity is None else capacity
    if cap < sc.kv_len:
        raise InvalidInput("cache capacity", cap, f">= {sc.kv_len} (history + new tokens)")
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(sc.tokens, cfg.hidden, generator=g).to(torch.bfloat16).to(device)
    caches = []
    for _ in range(2):
        c = torch.full((1, cfg.kv_heads, cap, cfg.head_dim), float("nan"), dtype=torch.bfloat16)
        c[:, :, : sc.history] = torch.randn(1, cfg.kv_heads, sc.history, cfg.head_dim, generator=g).to(torch.bfloat16)
        caches.append(c.to(device))
    return x, caches[0], caches[1]


def rope_tables(cfg: Qwen3Config, positions, dtype=None):
    """(cos, sin) [len(positions), head_dim] as HF builds them (inv_freq in fp32, angles duplicated)."""
    import torch

    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim))
    ang = positions.to(torch.float32)[:, None] * inv.to(positions.device)[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    return (cos, sin) if dtype is None else (cos.to(dtype), sin.to(dtype))


def rms_norm(x, w, eps: float):
    import torch

    xf = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    return w.to(xf.dtype) * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x):
    import torch

    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def reference(cfg: Qwen3Config, sc: Scenario, weights: dict, x, k_cache, v_cache, dtype=None):
    """(out [tokens, hidden], k_cache, v_cache) computed in `dtype` (float32 default; float64 for
    the tests) from the same bf16 inputs; the caches are new tensors (inputs untouched)."""
    import torch

    dt = torch.float32 if dtype is None else dtype
    w = {k: v.to(dt) for k, v in weights.items()}
    T, D = sc.tokens, cfg.head_dim
    xf = x.to(dt)
    h = rms_norm(xf, w["w_in"], cfg.eps)
    qkv = h @ w["w_qkv"].T
    q = qkv[:, : cfg.q_width].view(T, cfg.heads, D)
    k = qkv[:, cfg.q_width: cfg.q_width + cfg.kv_width].view(T, cfg.kv_heads, D)
    v = qkv[:, cfg.q_width + cfg.kv_width:].view(T, cfg.kv_heads, D)
    q, k = rms_norm(q, w["q_norm"], cfg.eps), rms_norm(k, w["k_norm"], cfg.eps)
    pos = torch.arange(sc.history, sc.history + T, device=x.device)
    cos, sin = rope_tables(cfg, pos)
    cos, sin = cos.to(dt)[:, None, :], sin.to(dt)[:, None, :]
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    kc, vc = k_cache.clone(), v_cache.clone()
    kc[0, :, sc.history: sc.kv_len] = k.transpose(0, 1).to(kc.dtype)
    vc[0, :, sc.history: sc.kv_len] = v.transpose(0, 1).to(vc.dtype)
    # the new tokens attend to the history as cached (bf16) and to themselves unrounded
    keys = torch.cat([k_cache[0, :, : sc.history].to(dt), k.transpose(0, 1)], dim=1)     # [Hkv, L, D]
    vals = torch.cat([v_cache[0, :, : sc.history].to(dt), v.transpose(0, 1)], dim=1)
    keys = keys.repeat_interleave(cfg.group, dim=0)
    vals = vals.repeat_interleave(cfg.group, dim=0)
    scores = (q.transpose(0, 1) @ keys.transpose(1, 2)) / math.sqrt(D)                   # [Hq, T, L]
    qpos = pos[:, None]
    kpos = torch.arange(sc.kv_len, device=x.device)[None, :]
    scores = scores.masked_fill(kpos > qpos, float("-inf"))
    attn = (scores.softmax(-1) @ vals).transpose(0, 1).reshape(T, cfg.q_width)
    h1 = xf + attn @ w["w_o"].T
    h2 = rms_norm(h1, w["w_post"], cfg.eps)
    mlp = (torch.nn.functional.silu(h2 @ w["w_gate"].T) * (h2 @ w["w_up"].T)) @ w["w_down"].T
    return h1 + mlp, kc, vc
