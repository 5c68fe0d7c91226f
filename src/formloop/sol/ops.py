"""FLOPs and minimum DRAM bytes per operator, from its shape alone.

Counting convention (the same one `formloop.sol.auto` applies to dispatched torch operators, so a
hand formula and an automatic count can be compared exactly):

* `matmul` FLOPs are tensor-core eligible work: 2 per multiply-add of a GEMM, convolution or the
  two attention products (QK^T and PV, 4·D per unmasked query-key pair).
* `vector` FLOPs are everything else, one per scalar operation of the operator's definition:
  add/sub/mul/div, one per transcendental (exp, rsqrt, erf, sigmoid, tanh) and one per comparison;
  a sum of n values costs n-1, a mean n (n-1 adds and a divide), a max n-1. Sign flips, copies,
  concatenation and layout changes cost nothing.
* bytes are the minimum DRAM traffic: every input and weight read once, every output written once,
  nothing re-read and no intermediate spilled.
Causal attention uses torch's top-left alignment: query i sees keys 0..i.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from formloop.dtypes import DTYPES, dtype_bytes, get_dtype
from formloop.errors import InvalidInput, UnknownName
from formloop.hw.chips import PRECISIONS
from formloop.workload import as_integer, extent, split_shape

# The storage dtypes a count accepts: table rows whose math the chips rate (formloop.dtypes holds
# their bytes and spellings).
SOL_DTYPES = tuple(d.name for d in DTYPES if d.storage and d.peak in PRECISIONS)

# Per-element vector FLOPs of activations (definition in the comment).
ACT_FLOPS = {
    "none": 0,
    "relu": 1,        # max(x, 0)
    "sigmoid": 1,     # one transcendental
    "tanh": 1,
    "exp": 1,
    "silu": 2,        # x * sigmoid(x)
    "gelu": 5,        # 0.5 * x * (1 + erf(x / sqrt 2))
    "gelu_tanh": 9,   # 0.5 * x * (1 + tanh(c * (x + 0.044715 * x^3))): x^3 is two multiplies
    "leaky_relu": 2,  # x > 0 ? x : slope * x
    "hardtanh": 2,    # min(max(x, lo), hi): two comparisons (relu6 is hardtanh(x, 0, 6))
    "elu": 4,         # x > 0 ? x : alpha * (exp(x) - 1)
    "selu": 5,        # scale * elu(x)
    "celu": 5,        # elu with x / alpha inside
    "softplus": 2,    # log1p(exp(x)) at beta = 1; another beta scales in and out (+2)
    "mish": 4,        # x * tanh(softplus(x))
    "hardsigmoid": 4,  # min(max(x + 3, 0), 6) / 6
    "hardswish": 5,   # x * hardsigmoid(x)
    "logsigmoid": 2,  # log(sigmoid(x))
    "softsign": 3,    # x / (1 + |x|)
}
BINARY_FLOPS = {"add": 1, "sub": 1, "mul": 1, "div": 1, "swiglu": 3}   # swiglu(g, u) = silu(g) * u


def normalize_dtype(dtype: str) -> str:
    """The table name of a storage dtype sol counts ('torch.bfloat16' -> 'bf16')."""
    return get_dtype(dtype, SOL_DTYPES).name


@dataclass(frozen=True)
class Counts:
    """What one operator must do: tensor-eligible FLOPs, other FLOPs, minimum DRAM bytes."""

    matmul_flops: int
    vector_flops: int
    bytes: int

    @property
    def flops(self) -> int:
        return self.matmul_flops + self.vector_flops


@dataclass(frozen=True)
class OpSpec:
    """One operator: its shape fields (positional order), their defaults, and how it counts."""

    name: str
    fields: tuple[str, ...]
    doc: str
    count: Callable[[dict, int], Counts]
    defaults: Mapping[str, object] = None  # optional fields and their default values
    choices: Mapping[str, tuple] = None    # string-valued fields and their allowed values

    def bind(self, shape: Mapping | Sequence) -> dict:
        """Shape as a full dict: positional values fill `fields` in order; checks every value."""
        defaults = dict(self.defaults or {})
        choices = dict(self.choices or {})
        allowed = f"{self.name} fields {', '.join(self.fields)}" + (
            f" (optional: {', '.join(f'{k}={v}' for k, v in defaults.items())})" if defaults else "")
        if isinstance(shape, Mapping):
            given = dict(shape)
        else:
            values = list(shape)
            if len(values) > len(self.fields):
                raise InvalidInput(f"shape of {self.name}", tuple(values), allowed)
            given = dict(zip(self.fields, values))
        unknown = sorted(set(given) - set(self.fields))
        if unknown:
            raise InvalidInput(f"shape field of {self.name}", unknown[0], allowed)
        out = {}
        for f in self.fields:
            if f in given:
                value = given[f]
            elif f in defaults:
                value = defaults[f]
            else:
                raise InvalidInput(f"shape of {self.name}", f"missing {f}", allowed)
            if f in choices:
                if value not in choices[f]:
                    raise InvalidInput(f"{self.name} {f}", value, choices[f])
            else:
                value = extent(value, f"{self.name} {f}", lo=0 if f in defaults and f in _MAY_BE_ZERO else 1)
            out[f] = value
        return out


_MAY_BE_ZERO = {"pad"}
FLAG = (0, 1)
OPS: dict[str, OpSpec] = {}


def register_op(name: str, fields: str, doc: str, *, defaults=None, choices=None):
    def deco(fn):
        OPS[name] = OpSpec(name, tuple(fields.split(",")), doc, fn, defaults, choices)
        return fn
    return deco


def get_op(name: str) -> OpSpec:
    try:
        return OPS[name.lower()]
    except KeyError:
        raise UnknownName("op", name, sorted(OPS)) from None


def op_names() -> list[str]:
    return sorted(OPS)


def parse_op_shape(op: str, text: str) -> dict:
    """'4096,4096,4096' (the op's fields in order) or 'M=64,N=128,K=32,act=gelu', in the shape grammar
    of `formloop.workload`: numbers become ints, words (act=gelu) stay words; `bind` checks both."""
    spec = get_op(op)
    raw = split_shape(text, spec.fields, what=f"shape of {spec.name}")
    return {k: v if (n := as_integer(v)) is None else n for k, v in raw.items()}


def count_op(op: str, shape: Mapping | Sequence, dtype: str = "fp32") -> tuple[dict, Counts]:
    spec = get_op(op)
    bound = spec.bind(shape)
    return bound, spec.count(bound, dtype_bytes(normalize_dtype(dtype)))


# ---------------------------------------------------------------- GEMM family

@register_op("gemm", "M,N,K", "C[M,N] = A[M,K] @ B[K,N]")
def _gemm(s, e):
    M, N, K = s["M"], s["N"], s["K"]
    return Counts(2 * M * N * K, 0, e * (M * K + K * N + M * N))


@register_op("bmm", "B,M,N,K", "C[b] = A[b] @ B[b] for B independent GEMMs")
def _bmm(s, e):
    B, M, N, K = s["B"], s["M"], s["N"], s["K"]
    return Counts(2 * B * M * N * K, 0, e * B * (M * K + K * N + M * N))


@register_op("linear", "M,N,K,bias,act,residual",
             "Y[M,N] = act(X[M,K] @ W[N,K]^T + b[N]) + R[M,N]: a GEMM with a fused epilogue",
             defaults={"bias": 1, "act": "none", "residual": 0},
             choices={"act": tuple(ACT_FLOPS), "bias": FLAG, "residual": FLAG})
def _linear(s, e):
    M, N, K = s["M"], s["N"], s["K"]
    bias, res = s["bias"], s["residual"]
    vector = M * N * (bias + ACT_FLOPS[s["act"]] + res)
    return Counts(2 * M * N * K, vector, e * (M * K + N * K + bias * N + (1 + res) * M * N))


@register_op("conv2d", "N,C,H,W,K,R,S,stride,pad,groups,bias",
             "Y[N,K,P,Q] = conv2d(X[N,C,H,W], W[K,C/groups,R,S]) (+ b[K])",
             defaults={"stride": 1, "pad": 0, "groups": 1, "bias": 0}, choices={"bias": FLAG})
def _conv2d(s, e):
    N, C, H, W, K, R, S = (s[k] for k in "NCHWKRS")
    g, st, pad, bias = s["groups"], s["stride"], s["pad"], s["bias"]
    if C % g or K % g:
        raise InvalidInput("conv2d groups", g, f"a divisor of C={C} and K={K}")
    P, Q = (H + 2 * pad - R) // st + 1, (W + 2 * pad - S) // st + 1
    if P < 1 or Q < 1:
        raise InvalidInput("conv2d shape", dict(s), "a filter no larger than the padded input")
    out = N * K * P * Q
    return Counts(2 * out * (C // g) * R * S, bias * out,
                  e * (N * C * H * W + K * (C // g) * R * S + bias * K + out))


@register_op("conv_transpose2d", "N,C,H,W,K,R,S,stride,groups,bias",
             "Y[N,K,P,Q] = conv_transpose2d(X[N,C,H,W], W[C,K/groups,R,S]), no padding: each input element "
             "scatters K/groups*R*S multiply-adds",
             defaults={"stride": 1, "groups": 1, "bias": 0}, choices={"bias": FLAG})
def _conv_transpose2d(s, e):
    N, C, H, W, K, R, S = (s[k] for k in "NCHWKRS")
    g, st, bias = s["groups"], s["stride"], s["bias"]
    if C % g or K % g:
        raise InvalidInput("conv_transpose2d groups", g, f"a divisor of C={C} and K={K}")
    P, Q = (H - 1) * st + R, (W - 1) * st + S
    out = N * K * P * Q
    return Counts(2 * N * C * H * W * (K // g) * R * S, bias * out,
                  e * (N * C * H * W + C * (K // g) * R * S + bias * K + out))


# ---------------------------------------------------------------- attention

def causal_pairs(Sq: int, Skv: int) -> int:
    """Query-key pairs a top-left causal mask keeps: query i sees keys 0..min(i, Skv-1)."""
    if Sq <= Skv:
        return Sq * (Sq + 1) // 2
    return Skv * (Skv + 1) // 2 + (Sq - Skv) * Skv


def _attention_counts(B, H, Hkv, Sq, Skv, D, causal, e):
    if H % Hkv:
        raise InvalidInput("attention Hkv", Hkv, f"a divisor of H={H} (grouped-query attention)")
    pairs = causal_pairs(Sq, Skv) if causal else Sq * Skv
    return Counts(4 * B * H * pairs * D, 0, e * (2 * B * H * Sq * D + 2 * B * Hkv * Skv * D))


@register_op("attention", "B,H,Hkv,Sq,Skv,D,causal",
             "O = softmax(Q K^T / sqrt D) V, GQA with Hkv key/value heads; matmul FLOPs only",
             defaults={"causal": 0}, choices={"causal": FLAG})
def _attention(s, e):
    return _attention_counts(s["B"], s["H"], s["Hkv"], s["Sq"], s["Skv"], s["D"], s["causal"], e)


@register_op("attention_prefill", "B,H,Hkv,S,D,causal", "self-attention over S tokens (Sq = Skv = S)",
             defaults={"causal": 1}, choices={"causal": FLAG})
def _prefill(s, e):
    return _attention_counts(s["B"], s["H"], s["Hkv"], s["S"], s["S"], s["D"], s["causal"], e)


@register_op("attention_decode", "B,H,Hkv,L,D", "one new query token per sequence against a KV cache of L")
def _decode(s, e):
    return _attention_counts(s["B"], s["H"], s["Hkv"], 1, s["L"], s["D"], 0, e)


# ---------------------------------------------------------------- composite blocks

@register_op("swiglu_mlp", "M,Dm,F", "down(silu(x W_gate^T) * (x W_up^T)), no biases, M tokens")
def _swiglu_mlp(s, e):
    M, Dm, F = s["M"], s["Dm"], s["F"]
    return Counts(6 * M * Dm * F, 3 * M * F, e * (2 * M * Dm + 3 * Dm * F))


def _rms(rows: int, D: int) -> int:
    return rows * (4 * D + 2)


@register_op("decoder_layer", "B,S,Dm,H,Hkv,Dh,F",
             "Qwen3-style pre-norm layer: RMSNorm, QKV (no bias), per-head q/k RMSNorm, RoPE, causal GQA "
             "attention, O projection, residual; RMSNorm, SwiGLU MLP, residual")
def _decoder_layer(s, e):
    B, S, Dm, H, Hkv, Dh, F = (s[k] for k in ("B", "S", "Dm", "H", "Hkv", "Dh", "F"))
    T = B * S
    qkv = (H + 2 * Hkv) * Dh
    attn = _attention_counts(B, H, Hkv, S, S, Dh, 1, e)
    matmul = 2 * T * Dm * qkv + 2 * T * H * Dh * Dm + attn.matmul_flops + 6 * T * Dm * F
    vector = (2 * _rms(T, Dm) + _rms(T * H, Dh) + _rms(T * Hkv, Dh)  # two layer norms, q/k norms
              + 3 * T * (H + Hkv) * Dh                               # RoPE on q and k
              + 2 * T * Dm                                           # two residual adds
              + 3 * T * F)                                           # silu(gate) * up
    weights = Dm * qkv + H * Dh * Dm + 3 * Dm * F + 2 * Dm + 2 * Dh
    return Counts(matmul, vector, e * (2 * T * Dm + weights + 2 * S * Dh))


def intensity(c: Counts) -> float:
    return c.flops / c.bytes if c.bytes else math.inf

