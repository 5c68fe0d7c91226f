"""The hand formulas added for KernelBench-size problems (activations, log-softmax, scans, arg- and
log-sum-exp reductions, group/instance/batch norm, cross-entropy, max pooling, transposed convolution)
against instrumented scalar references (`tests.test_sol_ops.Num` tallies every arithmetic operation),
each reference checked against torch; then the aten rules of automatic SOL against the same formulas."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from formloop.sol.auto import count_module
from formloop.sol.ops import count_op
from tests.test_sol_ops import Num, _mean, _tick, arr, bucket, check, exp, fn1, run, sigmoid, tanh, val, vmax

COVERED = {"conv_transpose2d", "log_softmax", "scan", "groupnorm", "batchnorm", "cross_entropy", "maxpool2d"}

log, log1p = fn1(math.log), fn1(math.log1p)
rsqrt = fn1(lambda v: 1 / math.sqrt(v))


def gt0(x):
    _tick()
    return x.v > 0


def vmin(a, b):
    _tick()
    return a if a.v <= b.v else b


def vabs(x):
    _tick()
    return Num(abs(x.v))


def elu(x, alpha=1.0):
    positive = gt0(x)
    neg = (exp(x) - 1) * alpha
    return x if positive else neg


def hardsigmoid(x):
    return vmin(vmax(x + 3, Num(0.0)), Num(6.0)) / 6


SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805
ACTS = {  # branch-free definitions: both sides of a select are computed, as the convention counts
    "leaky_relu": (lambda x: (lambda pos, neg: x if pos else neg)(gt0(x), x * 0.01), lambda t: F.leaky_relu(t, 0.01)),
    "hardtanh": (lambda x: vmin(vmax(x, Num(-1.0)), Num(1.0)), F.hardtanh),
    "elu": (elu, F.elu),
    "selu": (lambda x: elu(x, SELU_ALPHA) * SELU_SCALE, F.selu),
    "celu": (lambda x: (lambda pos, neg: x if pos else neg)(gt0(x), (exp(x / 2.0) - 1) * 2.0),
             lambda t: F.celu(t, alpha=2.0)),
    "softplus": (lambda x: log1p(exp(x)), F.softplus),
    "mish": (lambda x: x * tanh(log1p(exp(x))), F.mish),
    "hardsigmoid": (hardsigmoid, F.hardsigmoid),
    "hardswish": (lambda x: x * hardsigmoid(x), F.hardswish),
    "logsigmoid": (lambda x: log(sigmoid(x)), F.logsigmoid),
    "softsign": (lambda x: x / (vabs(x) + 1), F.softsign),
}


@pytest.mark.parametrize("act", sorted(ACTS))
def test_activation(act):
    ref, torch_fn = ACTS[act]
    x = arr(9)
    y, t, n = run(lambda x: np.array([ref(v) for v in x], dtype=object), x)
    assert torch.allclose(val(y), torch_fn(val(x)))
    check("activation", {"N": 9, "act": act}, t, n)


def test_log_softmax_scan_and_reductions():
    R, D = 3, 6
    x = arr(R, D)

    def row_max(row):
        m = row[0]
        for v in row[1:]:
            m = vmax(m, v)
        return m

    def row_sum(vals):
        s = vals[0]
        for v in vals[1:]:
            s = s + v
        return s

    def log_softmax(x):
        out = np.empty(x.shape, dtype=object)
        for i, row in enumerate(x):
            m = row_max(row)
            shifted = [v - m for v in row]
            lse = log(row_sum([exp(v) for v in shifted]))
            out[i] = [v - lse for v in shifted]
        return out

    y, t, n = run(log_softmax, x)
    assert torch.allclose(val(y), torch.log_softmax(val(x), -1))
    check("log_softmax", (R, D), t, n)

    def scan(x):
        out = np.empty(x.shape, dtype=object)
        for i, row in enumerate(x):
            acc = row[0]
            out[i, 0] = acc
            for j in range(1, D):
                acc = acc + row[j]
                out[i, j] = acc
        return out

    y, t, n = run(scan, x)
    assert torch.allclose(val(y), torch.cumsum(val(x), -1))
    check("scan", (R, D), t, n)

    def logsumexp(x):
        out = []
        for row in x:
            m = row_max(row)
            out.append(log(row_sum([exp(v - m) for v in row])) + m)
        return np.array(out, dtype=object)

    y, t, n = run(logsumexp, x)
    assert torch.allclose(val(y), torch.logsumexp(val(x), -1))
    check("reduction", {"R": R, "D": D, "kind": "logsumexp"}, t, n)

    def argmax(x):
        return np.array([row_max(list(row)) for row in x], dtype=object)

    y, t, _ = run(argmax, x)
    assert torch.allclose(val(y), val(x).amax(-1))
    _, c = count_op("reduction", {"R": R, "D": D, "kind": "argmax"})
    assert (c.matmul_flops, c.vector_flops, c.bytes) == (0, t["vector"], 4 * R * D + 8 * R)   # int64 indices


def _normalize(values, eps):
    """mean, centre, square, mean, + eps, rsqrt, scale: the shared statistics of every norm."""
    mu = _mean(values)
    dev = [v - mu for v in values]
    r = rsqrt(_mean([d * d for d in dev]) + eps)
    return [d * r for d in dev]


@pytest.mark.parametrize("groups,affine", [(2, 1), (4, 0)])
def test_groupnorm_and_instance_norm(groups, affine):
    N, C, H, W = 2, 4, 2, 3
    x, w, b = arr(N, C, H, W), arr(C), arr(C)
    cg = C // groups

    def ref(*_):
        y = np.empty(x.shape, dtype=object)
        for n in range(N):
            for g in range(groups):
                block = x[n, g * cg:(g + 1) * cg]
                normed = _normalize(list(block.ravel()), 1e-5)
                out = np.array(normed, dtype=object).reshape(block.shape)
                if affine:
                    for c in range(cg):
                        out[c] = np.array([[v * w[g * cg + c] + b[g * cg + c] for v in row] for row in out[c]],
                                          dtype=object)
                y[n, g * cg:(g + 1) * cg] = out
        return y

    y, t, n = run(ref, *((x, w, b) if affine else (x,)))
    expect = F.group_norm(val(x), groups, val(w) if affine else None, val(b) if affine else None)
    assert torch.allclose(val(y), expect)
    check("groupnorm", {"N": N, "C": C, "HW": H * W, "G": groups, "affine": affine}, t, n)


def test_batchnorm_training_with_running_stats():
    N, C, HW, momentum = 3, 2, 4, 0.1
    x, w, b, rm, rv = arr(N, C, HW), arr(C), arr(C), arr(C), arr(C)
    step = np.array([Num(0.0)], dtype=object)
    m = N * HW

    def ref(*_):
        y = np.empty(x.shape, dtype=object)
        for c in range(C):
            values = list(x[:, c].ravel())
            mu = _mean(values)
            dev = [v - mu for v in values]
            var = _mean([d * d for d in dev])
            r = rsqrt(var + 1e-5)
            y[:, c] = np.array([d * r * w[c] + b[c] for d in dev], dtype=object).reshape(N, HW)
            rm[c] = rm[c] * (1 - momentum) + mu * momentum
            rv[c] = rv[c] * (1 - momentum) + var * (m / (m - 1)) * momentum
        step[0] = step[0] + 1
        return y

    before = (val(rm).clone(), val(rv).clone())
    y, t, _ = run(ref, x, w, b)
    xt = val(x).view(N, C, HW, 1)
    rm_t, rv_t = before
    expect = F.batch_norm(xt, rm_t, rv_t, val(w), val(b), training=True, momentum=momentum).view(N, C, HW)
    assert torch.allclose(val(y), expect) and torch.allclose(val(rm), rm_t) and torch.allclose(val(rv), rv_t)
    _, c = count_op("batchnorm", {"N": N, "C": C, "HW": HW})
    assert (c.matmul_flops, c.vector_flops) == (0, t["vector"])
    assert c.bytes == 4 * (2 * x.size + 2 * C + 4 * C) + 2 * 8     # x, y, w, b, stats read and written, step


def test_cross_entropy():
    N, C = 4, 5
    x = arr(N, C)
    target = [3, 0, 4, 1]

    def ref(*_):
        picked = []
        for i, row in enumerate(x):
            m = row[0]
            for v in row[1:]:
                m = vmax(m, v)
            shifted = [v - m for v in row]
            z = exp(shifted[0])
            for v in shifted[1:]:
                z = z + exp(v)
            lz = log(z)
            picked.append(-(shifted[target[i]] - lz))   # only the target's log-probability is needed...
            for j, v in enumerate(shifted):             # ...but log_softmax writes every class
                if j != target[i]:
                    _ = v - lz
        total = picked[0]
        for v in picked[1:]:
            total = total + v
        return np.array([total / N], dtype=object)

    y, t, _ = run(ref)
    assert torch.allclose(val(y)[0], F.cross_entropy(val(x), torch.tensor(target)))
    _, c = count_op("cross_entropy", (N, C))
    assert (c.matmul_flops, c.vector_flops) == (0, t["vector"])
    assert c.bytes == 4 * (N * C + 1) + 8 * N


def test_maxpool2d_and_conv_transpose2d():
    N, C, H, W, k, st, pad = 1, 2, 5, 4, 3, 2, 1
    x = arr(N, C, H, W)
    P, Q = (H + 2 * pad - k) // st + 1, (W + 2 * pad - k) // st + 1

    def pool(*_):
        y = np.empty((N, C, P, Q), dtype=object)
        for n in range(N):
            for c in range(C):
                for p in range(P):
                    for q in range(Q):
                        taps = [x[n, c, p * st + r - pad, q * st + s - pad] if 0 <= p * st + r - pad < H
                                and 0 <= q * st + s - pad < W else Num(-math.inf) for r in range(k) for s in range(k)]
                        m = taps[0]
                        for v in taps[1:]:
                            m = vmax(m, v)       # padded taps still compared
                        y[n, c, p, q] = m
        return y

    y, t, n = run(pool, x)
    assert torch.allclose(val(y), F.max_pool2d(val(x), k, st, pad))
    check("maxpool2d", {"N": N, "C": C, "H": H, "W": W, "k": k, "stride": st, "pad": pad}, t, n)

    K, R, S = 3, 2, 3
    w = arr(C, K, R, S)
    Po, Qo = (H - 1) * st + R, (W - 1) * st + S

    def up(*_):
        y = np.array([[[[Num(0.0) for _ in range(Qo)] for _ in range(Po)] for _ in range(K)] for _ in range(N)],
                     dtype=object)
        with bucket("matmul"):
            for n in range(N):
                for c in range(C):
                    for h in range(H):
                        for wi in range(W):
                            for o in range(K):
                                for r in range(R):
                                    for s in range(S):
                                        y[n, o, h * st + r, wi * st + s] = y[n, o, h * st + r, wi * st + s] \
                                            + x[n, c, h, wi] * w[c, o, r, s]
        return y

    y, t, n = run(up, x, w)
    assert torch.allclose(val(y), F.conv_transpose2d(val(x), val(w), stride=st))
    check("conv_transpose2d", {"N": N, "C": C, "H": H, "W": W, "K": K, "R": R, "S": S, "stride": st}, t, n)


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


AUTO = {  # formula, torch call of the same operator (counted by the aten rules of automatic SOL)
    **{a: (lambda n, a=a: count_op("activation", {"N": n, "act": a})[1], f) for a, (_, f) in ACTS.items()},
    "relu6": (lambda n: count_op("activation", {"N": n, "act": "hardtanh"})[1], F.relu6),
    "log_softmax": (lambda n: count_op("log_softmax", (4, n // 4))[1], lambda t: torch.log_softmax(t, -1)),
    "cumsum": (lambda n: count_op("scan", (4, n // 4))[1], lambda t: torch.cumsum(t, -1)),
    "argmax": (lambda n: count_op("reduction", {"R": 4, "D": n // 4, "kind": "argmax"})[1], lambda t: t.argmax(-1)),
    "logsumexp": (lambda n: count_op("reduction", {"R": 4, "D": n // 4, "kind": "logsumexp"})[1],
                  lambda t: torch.logsumexp(t, -1)),
}


@pytest.mark.parametrize("name", sorted(AUTO))
def test_aten_rules_agree_with_formulas(name):
    formula, fn = AUTO[name]
    x = torch.randn(4, 6)
    counts, mode = count_module(Fn(fn), [x])
    hand = formula(x.numel())
    assert not mode.uncounted
    assert (counts.matmul_flops, counts.vector_flops, counts.bytes) == \
        (hand.matmul_flops, hand.vector_flops, hand.bytes)
