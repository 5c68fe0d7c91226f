"""A declared FLOP rule and byte rule for every aten operator automatic SOL meets.

The FLOP convention is `formloop.sol.ops`'s (matmul FLOPs 2 per multiply-add; vector FLOPs one per
scalar operation of the operator's definition; layout changes and copies free), so an automatic
count equals the hand formula of the same operator. The byte rule says what the operator would move
if it ran alone (its *unfused* traffic, reported per operator); the bound itself uses the fused
minimum (inputs, weights and outputs once), computed in `formloop.sol.trace`:

* `none`   views and metadata: no traffic;
* `write`  factories (zeros, randn, arange): write the output;
* `io`     read every distinct tensor argument once, write every output;
* `gather` embedding, index_select, gather, index: read the indices and only the selected data.

An operator missing here is listed by name, and the report calls its bound a lower bound."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from formloop.sol.ops import ACT_FLOPS, causal_pairs


@dataclass(frozen=True)
class Call:
    """One dispatched operator: its name (overload packet, in-place suffix dropped), overload, the
    arguments by schema name, and its tensor outputs."""

    name: str
    overload: str
    args: Mapping[str, object]
    outs: tuple

    def arg(self, key: str, default=None):
        value = self.args.get(key, default)
        return default if value is None else value

    @property
    def out_numel(self) -> int:
        return self.outs[0].numel() if self.outs else 0

    def numel(self, key: str) -> int:
        t = self.args.get(key)
        return t.numel() if hasattr(t, "numel") else 1


@dataclass(frozen=True)
class OpRule:
    flops: Callable[[Call], tuple[int, int]]    # -> (matmul FLOPs, vector FLOPs)
    traffic: str = "io"                         # none | write | io | gather


RULES: dict[str, OpRule] = {}

# Arguments an operator writes in place although its schema does not say so (training mode only).
UNANNOTATED_WRITES = {"native_batch_norm": ("running_mean", "running_var")}


def _reg(names: str, flops: Callable[[Call], tuple[int, int]], traffic: str = "io") -> None:
    for name in names.split():
        RULES[name] = OpRule(flops, traffic)


def _free(c: Call) -> tuple[int, int]:
    return 0, 0


def _per_out(k: int) -> Callable[[Call], tuple[int, int]]:
    return lambda c: (0, k * c.out_numel)


def _rows(t, dim) -> tuple[int, int]:
    """(rows, length) of a reduction or scan of tensor `t` along `dim`."""
    n = t.numel()
    length = t.shape[dim] if t.dim() else 1
    return (n // length if length else 0), length


def _reduced(c: Call) -> tuple[int, int]:
    """(input elements, output elements) of a reduction (per output: length - 1 combines)."""
    return c.numel("self" if "self" in c.args else "input"), c.out_numel


# --- matmul class -----------------------------------------------------------------------------------

def _mm(c):
    a, b = c.args["self"], c.args["mat2"]
    return 2 * a.shape[0] * a.shape[1] * b.shape[1], 0


def _addmm(c):
    m, k = c.args["mat1"].shape
    n = c.args["mat2"].shape[1]
    return 2 * m * n * k, m * n


def _bmm(c):
    b, m, k = c.args["self"].shape
    return 2 * b * m * k * c.args["mat2"].shape[2], 0


def _baddbmm(c):
    b, m, k = c.args["batch1"].shape
    n = c.args["batch2"].shape[2]
    return 2 * b * m * n * k, b * m * n


def _mv(c):
    m, k = c.args["self"].shape
    return 2 * m * k, (m if "addmv" in c.name else 0)


def _dot(c):
    return 2 * c.numel("self"), 0


def _conv(c):
    w = c.args["weight"]
    window = math.prod(w.shape[1:])                 # C/groups (or K/groups if transposed) x kernel
    if c.arg("transposed", False):                  # every input element scatters one window
        mm = 2 * c.numel("input") * window
    else:                                           # every output element gathers one window
        mm = 2 * c.out_numel * window
    return mm, (c.out_numel if c.args.get("bias") is not None else 0)


def attention_pairs(c: Call, mask_live: Callable | None = None) -> tuple[int, int, int, int]:
    """(batch x heads, kept query-key pairs per head, qk dim, v dim) of an attention call."""
    q, k, v = c.args["query"], c.args["key"], c.args["value"]
    *batch, sq, d = q.shape
    skv = k.shape[-2]
    heads = math.prod(batch)
    if c.arg("is_causal", False):
        pairs = causal_pairs(sq, skv)
    elif mask_live is not None:
        pairs = mask_live(sq, skv)
    else:
        pairs = sq * skv
    return heads, pairs, d, v.shape[-1]


SDPA_OPS = frozenset(("_scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_flash_attention "
                      "_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention "
                      "_scaled_dot_product_fused_attention_overrideable").split())


def _sdpa(c):
    heads, pairs, d, dv = attention_pairs(c)
    return 2 * heads * pairs * (d + dv), 0


# --- normalization ----------------------------------------------------------------------------------

def _norm_flops(groups: int, m: int) -> int:
    return groups * (5 * m + 2)                     # as formloop.sol.ops_vector._norm_stats


def _layer_norm(c):
    x = c.args["input"]
    d = math.prod(c.args["normalized_shape"])
    affine = (c.args.get("weight") is not None) + (c.args.get("bias") is not None)
    return 0, _norm_flops(x.numel() // d, d) + affine * x.numel()


def _rms_norm(c):
    x = c.args["input"]
    d = math.prod(c.args["normalized_shape"])
    weight = c.args.get("weight") is not None
    return 0, (x.numel() // d) * ((3 + weight) * d + 2)


def _group_norm(c):
    x = c.args["input"]
    groups = c.args["N"] * c.args["group"]
    affine = (c.args.get("weight") is not None) + (c.args.get("bias") is not None)
    return 0, _norm_flops(groups, x.numel() // groups) + affine * x.numel()


def _batch_norm(c):
    x = c.args["input"]
    channels = x.shape[1]
    affine = (c.args.get("weight") is not None) + (c.args.get("bias") is not None)
    training = c.arg("training", "no_training" not in c.name and "no_update" not in c.name)
    if not training:        # (x - mean) * rsqrt(var + eps): 2 per channel, 2 per element
        return 0, 2 * channels + (2 + affine) * x.numel()
    running = 7 * channels if c.args.get("running_mean") is not None else 0
    return 0, _norm_flops(channels, x.numel() // channels) + affine * x.numel() + running


# --- softmax, reductions, scans, losses -------------------------------------------------------------

def _softmax(c):
    rows, d = _rows(c.args["self"], c.args["dim"])
    return 0, rows * (5 * d - 2)


def _log_softmax(c):
    rows, d = _rows(c.args["self"], c.args["dim"])
    return 0, rows * (5 * d - 1)


def _combine(c):
    n, out = _reduced(c)
    return 0, n - out


def _mean(c):
    return 0, _reduced(c)[0]


def _logsumexp(c):
    return 0, 4 * _reduced(c)[0]


def _var(c):
    n, out = _reduced(c)
    return 0, 4 * n + (out if c.name.startswith("std") else 0)


def _vector_norm(c):
    n, out = _reduced(c)
    order = c.arg("ord", c.arg("p", 2))
    if order == 2:
        return 0, 2 * n                               # square, add, sqrt per output
    if order in (1, math.inf, -math.inf):
        return 0, 2 * n - out                         # abs, then add or compare
    return 0, 3 * n                                   # abs, pow, add, final pow


def _max_like(c):
    if "other" in c.args:                          # torch.max(a, b) is elementwise
        return 0, c.out_numel
    return _combine(c)


def _scan(c):
    rows, d = _rows(c.args["self"], c.args["dim"])
    return 0, rows * (d - 1)


def _nll(c):
    """Pick each target's log-probability and negate (free), weight it, then reduce."""
    n = c.numel("target")
    weighted = c.args.get("weight") is not None
    reduction = c.arg("reduction", 1)            # 0 none, 1 mean, 2 sum
    if reduction == 0:
        return 0, n if weighted else 0
    if reduction == 2:
        return 0, (2 * n - 1) if weighted else n - 1
    return 0, (3 * n - 1) if weighted else n     # weighted mean also sums the weights


def _loss(per_element: int) -> Callable[[Call], tuple[int, int]]:
    def rule(c):
        n = c.numel("self")
        reduction = c.arg("reduction", 1)
        return 0, per_element * n + {0: 0, 1: n, 2: n - 1}[reduction]
    return rule


# --- pointwise with arguments -----------------------------------------------------------------------

def _clamp(c):
    bounds = sum(c.args.get(k) is not None for k in ("min", "max"))
    return 0, bounds * c.out_numel


def _elu(c):
    extra = (c.arg("scale", 1.0) != 1) + (c.arg("input_scale", 1.0) != 1)
    return 0, (ACT_FLOPS["elu"] + extra) * c.out_numel


def _softplus(c):
    return 0, (ACT_FLOPS["softplus"] + 2 * (c.arg("beta", 1.0) != 1)) * c.out_numel


def _gelu(c):
    return 0, ACT_FLOPS["gelu_tanh" if c.arg("approximate") == "tanh" else "gelu"] * c.out_numel


def _window(c) -> int:
    return math.prod(c.args["kernel_size"]) if c.args.get("kernel_size") else 1


def _max_pool(c):
    return 0, c.out_numel * (_window(c) - 1)


def _avg_pool(c):
    return 0, c.out_numel * _window(c)


# --- the table --------------------------------------------------------------------------------------

_reg("mm", _mm)
_reg("addmm", _addmm)
_reg("bmm", _bmm)
_reg("baddbmm", _baddbmm)
_reg("mv addmv", _mv)
_reg("dot vdot", _dot)
_reg("convolution _convolution", _conv)
_reg(" ".join(SDPA_OPS), _sdpa)
_reg("native_layer_norm", _layer_norm)
_reg("_fused_rms_norm rms_norm", _rms_norm)
_reg("native_group_norm", _group_norm)
_reg("native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training _batch_norm_with_update "
     "_batch_norm_no_update _native_batch_norm_legit_functional cudnn_batch_norm miopen_batch_norm", _batch_norm)
_reg("_softmax", _softmax)
_reg("_log_softmax", _log_softmax)
_reg("sum prod amax amin argmax argmin any all nansum", _combine)
_reg("max min", _max_like)
_reg("mean count_nonzero", _mean)
_reg("logsumexp", _logsumexp)
_reg("var std var_mean std_mean", _var)
_reg("linalg_vector_norm norm", _vector_norm)
_reg("cumsum cumprod cummax cummin logcumsumexp", _scan)
_reg("nll_loss_forward nll_loss2d_forward", _nll)
_reg("mse_loss", _loss(2))                           # subtract, square
_reg("l1_loss", _loss(2))                            # subtract, abs
_reg("smooth_l1_loss huber_loss", _loss(5))          # subtract, abs, compare, then two on either branch
_reg("binary_cross_entropy", _loss(7))               # -(t log x + (1 - t) log(1 - x))
_reg("clamp", _clamp)
_reg("elu", _elu)
_reg("softplus", _softplus)
_reg("gelu", _gelu)
_reg("max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices", _max_pool)
_reg("avg_pool1d avg_pool2d avg_pool3d", _avg_pool)
_reg("_adaptive_avg_pool2d _adaptive_avg_pool3d adaptive_avg_pool1d", lambda c: (0, c.numel("self")))
_reg("adaptive_max_pool2d adaptive_max_pool3d", _combine)
_reg("upsample_bilinear2d _upsample_bilinear2d_aa", _per_out(9))   # three lerps of 3 FLOPs each
for _name, _k in {"silu": "silu", "mish": "mish", "leaky_relu": "leaky_relu", "hardtanh": "hardtanh",
                  "hardsigmoid": "hardsigmoid", "hardswish": "hardswish", "log_sigmoid_forward": "logsigmoid",
                  "relu6": "hardtanh", "celu": "celu"}.items():
    _reg(_name, _per_out(ACT_FLOPS[_k]))
_reg("softshrink", _per_out(3))                      # two comparisons and a shift
_reg("hardshrink _prelu_kernel prelu glu lerp addcmul addcdiv", _per_out(2))
_reg("""add sub rsub mul div true_divide floor_divide remainder fmod pow square abs exp exp2 expm1 log log2 log10
log1p sqrt rsqrt sin cos tan asin acos atan atan2 sinh cosh tanh sigmoid erf erfc erfinv reciprocal relu
maximum minimum fmax fmin sign sgn floor ceil round trunc frac eq ne lt le gt ge logical_and logical_or
logical_xor logical_not bitwise_and bitwise_or bitwise_xor bitwise_not __and__ __or__ __xor__ copysign
heaviside isnan isinf isfinite threshold clamp_min clamp_max bernoulli nan_to_num xlogy""", _per_out(1))
# Data movement: no arithmetic, but traffic when run alone. neg is a sign flip (free by convention).
_reg("""clone copy _to_copy _copy_from contiguous cat stack constant_pad_nd reflection_pad1d reflection_pad2d
replication_pad2d flip roll repeat repeat_interleave tril triu where masked_fill im2col col2im pixel_shuffle
pixel_unshuffle channel_shuffle native_channel_shuffle upsample_nearest1d upsample_nearest2d upsample_nearest3d
neg scatter index_put index_copy masked_scatter diag_embed""", _free)
_reg("embedding index_select gather index take _unsafe_index", _free, "gather")
_reg("""empty empty_like empty_strided new_empty new_empty_strided resize""", _free, "none")
_reg("""zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full fill zero scalar_tensor arange
linspace eye randn randn_like rand rand_like randint randint_like normal uniform random randperm lift_fresh_copy""",
     _free, "write")
_reg("native_dropout", _per_out(2))                  # compare a random draw, scale the kept value
_reg("""view _unsafe_view reshape _reshape_alias t transpose permute expand expand_as slice select unsqueeze
squeeze alias detach as_strided unfold split split_with_sizes unbind chunk narrow diagonal view_as lift_fresh
view_as_real view_as_complex movedim swapaxes unflatten flatten _unsafe_split set_ numpy_T
_local_scalar_dense _has_compatible_shallow_copy_type sym_size sym_stride sym_numel""", _free, "none")
