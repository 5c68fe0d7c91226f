"""Hand formulas of the non-GEMM operators: normalization, softmax, pointwise, reductions, scans,
pooling and losses (registered into `formloop.sol.ops`, whose counting convention they follow)."""
from __future__ import annotations

from formloop.errors import InvalidInput
from formloop.sol.ops import ACT_FLOPS, BINARY_FLOPS, FLAG, Counts, register_op

INDEX_BYTES = 8   # int64 indices (argmax output, class targets)

# ---------------------------------------------------------------- normalization
@register_op("rmsnorm", "R,D", "y = x * rsqrt(mean(x^2) + eps) * w over the last dim D, R rows")
def _rmsnorm(s, e):
    R, D = s["R"], s["D"]
    return Counts(0, R * (4 * D + 2), e * (2 * R * D + D))


@register_op("layernorm", "R,D", "y = (x - mean) * rsqrt(var + eps) * w + b over the last dim D, R rows")
def _layernorm(s, e):
    R, D = s["R"], s["D"]
    return Counts(0, R * (7 * D + 2), e * (2 * R * D + 2 * D))


@register_op("softmax", "R,D", "y = exp(x - max) / sum(exp(x - max)) over the last dim D, R rows")
def _softmax(s, e):
    R, D = s["R"], s["D"]
    return Counts(0, R * (5 * D - 2), e * 2 * R * D)


@register_op("activation", "N,act", "y = act(x) over N elements", choices={"act": tuple(ACT_FLOPS)[1:]})
def _activation(s, e):
    return Counts(0, s["N"] * ACT_FLOPS[s["act"]], e * 2 * s["N"])


@register_op("elementwise", "N,kind", "z = kind(x, y) over N elements (swiglu: silu(x) * y)",
             choices={"kind": tuple(BINARY_FLOPS)})
def _elementwise(s, e):
    return Counts(0, s["N"] * BINARY_FLOPS[s["kind"]], e * 3 * s["N"])


# Per-row cost of each reduction kind over D values, and whether it writes an int64 index.
REDUCTIONS = {
    "sum": (lambda D: D - 1, False),
    "max": (lambda D: D - 1, False),
    "mean": (lambda D: D, False),                  # D - 1 adds and a divide
    "argmax": (lambda D: D - 1, True),             # D - 1 comparisons, the winner's index written
    "logsumexp": (lambda D: 4 * D, False),         # max D-1, subtract D, exp D, sum D-1, log 1, add back 1
}


@register_op("reduction", "R,D,kind", "y[R] = kind(x[R, D]) over the last dim", choices={"kind": tuple(REDUCTIONS)})
def _reduction(s, e):
    R, D = s["R"], s["D"]
    per_row, index = REDUCTIONS[s["kind"]]
    return Counts(0, R * per_row(D), e * R * D + (INDEX_BYTES if index else e) * R)


@register_op("rope", "B,S,H,D", "rotary embedding y = x*cos + rotate_half(x)*sin, cos/sin tables [S, D] read once")
def _rope(s, e):
    B, S, H, D = s["B"], s["S"], s["H"], s["D"]
    n = B * S * H * D
    return Counts(0, 3 * n, e * (2 * n + 2 * S * D))



def _norm_stats(groups: int, m: int) -> int:
    """mean (m), centre (m), square (m), sum and divide (m), rsqrt(var + eps) (2), scale (m)."""
    return groups * (5 * m + 2)


@register_op("groupnorm", "N,C,HW,G,affine",
             "group norm over G groups of C/G channels x HW positions (instance norm: G = C, affine = 0)",
             defaults={"affine": 1}, choices={"affine": FLAG})
def _groupnorm(s, e):
    N, C, HW, G, affine = s["N"], s["C"], s["HW"], s["G"], s["affine"]
    if C % G:
        raise InvalidInput("groupnorm G", G, f"a divisor of C={C}")
    n = N * C * HW
    return Counts(0, _norm_stats(N * G, C // G * HW) + 2 * affine * n, e * (2 * n + 2 * affine * C))


@register_op("batchnorm", "N,C,HW,affine,running",
             "training-mode batch norm: statistics per channel over N x HW; running=1 also updates the running "
             "mean/var and increments the int64 step counter", defaults={"affine": 1, "running": 1},
             choices={"affine": FLAG, "running": FLAG})
def _batchnorm(s, e):
    N, C, HW, affine, running = s["N"], s["C"], s["HW"], s["affine"], s["running"]
    n = N * C * HW
    # running = (1 - momentum) * running + momentum * stat: 3 per stat, the variance also unbiased (+1);
    # the step counter: one add
    update = (7 * C + 1) * running
    return Counts(0, _norm_stats(C, N * HW) + 2 * affine * n + update,
                  e * (2 * n + 2 * affine * C + 4 * running * C) + 2 * INDEX_BYTES * running)


# ---------------------------------------------------------------- softmax family, scans, losses

@register_op("log_softmax", "R,D", "y = x - max - log(sum(exp(x - max))) over the last dim D, R rows")
def _log_softmax(s, e):
    R, D = s["R"], s["D"]      # max D-1, shift D, exp D, sum D-1, log 1, subtract D
    return Counts(0, R * (5 * D - 1), e * 2 * R * D)


@register_op("scan", "R,D", "y = cumsum(x) along D for R independent rows (D - 1 adds each)")
def _scan(s, e):
    R, D = s["R"], s["D"]
    return Counts(0, R * (D - 1), e * 2 * R * D)


@register_op("cross_entropy", "N,C", "mean over N samples of -log_softmax(logits[N, C])[target]: int64 targets")
def _cross_entropy(s, e):
    N, C = s["N"], s["C"]
    return Counts(0, N * (5 * C - 1) + N, e * (N * C + 1) + INDEX_BYTES * N)   # log_softmax, then a mean


# ---------------------------------------------------------------- pooling

@register_op("maxpool2d", "N,C,H,W,k,stride,pad", "y = max over k x k windows (k*k - 1 comparisons per output)",
             defaults={"pad": 0})
def _maxpool2d(s, e):
    N, C, H, W, k, st, pad = (s[f] for f in ("N", "C", "H", "W", "k", "stride", "pad"))
    P, Q = (H + 2 * pad - k) // st + 1, (W + 2 * pad - k) // st + 1
    if P < 1 or Q < 1:
        raise InvalidInput("maxpool2d shape", dict(s), "a window no larger than the padded input")
    out = N * C * P * Q
    return Counts(0, out * (k * k - 1), e * (N * C * H * W + out))
