"""Every operator's FLOPs and bytes against an independent count on small shapes.

The independent count is an instrumented scalar reference: plain Python loops over `Num`, a float
that tallies each arithmetic operation into the current bucket (tensor-eligible "matmul" work,
"vector" work, or "free" for the softmax inside attention, which the convention leaves out). Each
reference's numbers are also checked against torch, so a wrong reference cannot pass silently.
Bytes are the element counts of the distinct arrays a reference reads and writes."""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from formloop.errors import InvalidInput, UnknownName
from formloop.sol import sol_report
from formloop.sol.ops import count_op, get_op, op_names

TALLY = {"matmul": 0, "vector": 0, "free": 0}
_bucket = ["vector"]


@contextmanager
def bucket(name):
    _bucket.append(name)
    try:
        yield
    finally:
        _bucket.pop()


def _tick(n=1):
    TALLY[_bucket[-1]] += n


class Num:
    """A float that counts each arithmetic operation performed on it."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = float(v.v if isinstance(v, Num) else v)

    def _op(self, other, f):
        _tick()
        return Num(f(self.v, other.v if isinstance(other, Num) else float(other)))

    def __add__(self, o): return self._op(o, lambda a, b: a + b)
    def __radd__(self, o): return self._op(o, lambda a, b: b + a)
    def __sub__(self, o): return self._op(o, lambda a, b: a - b)
    def __rsub__(self, o): return self._op(o, lambda a, b: b - a)
    def __mul__(self, o): return self._op(o, lambda a, b: a * b)
    def __rmul__(self, o): return self._op(o, lambda a, b: b * a)
    def __truediv__(self, o): return self._op(o, lambda a, b: a / b)
    def __neg__(self): return Num(-self.v)          # a sign flip is not arithmetic


def fn1(f):
    def g(x):
        _tick()
        return Num(f(x.v))
    return g


exp, erf, tanh = fn1(math.exp), fn1(math.erf), fn1(math.tanh)
rsqrt = fn1(lambda v: 1 / math.sqrt(v))
sigmoid = fn1(lambda v: 1 / (1 + math.exp(-v)))


def vmax(a, b):
    _tick()
    return a if a.v >= b.v else b


def relu(x):
    _tick()
    return Num(max(x.v, 0.0))


def arr(*shape):
    rng = np.random.default_rng(sum(shape) * 7 + len(shape))
    return np.vectorize(Num, otypes=[object])(rng.standard_normal(shape))


def val(a):
    return torch.tensor(np.vectorize(lambda n: n.v)(a), dtype=torch.float64)


def run(ref, *arrays):
    for k in TALLY:
        TALLY[k] = 0
    out = ref(*arrays)
    return out, dict(TALLY), sum(a.size for a in arrays) + sum(o.size for o in (out if isinstance(out, tuple) else (out,)))


def check(op, shape, counted, elems, e=4):
    bound, c = count_op(op, shape, "fp32")
    assert (c.matmul_flops, c.vector_flops) == (counted["matmul"], counted["vector"]), (op, bound)
    assert c.bytes == e * elems, (op, bound)


# ----------------------------------------------------------------------------- references

def ref_gemm(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = np.empty((M, N), dtype=object)
    with bucket("matmul"):
        for i in range(M):
            for j in range(N):
                s = Num(0.0)
                for k in range(K):
                    s = s + a[i, k] * b[k, j]
                c[i, j] = s
    return c


def test_gemm_and_bmm():
    a, b = arr(3, 5), arr(5, 4)
    c, t, n = run(ref_gemm, a, b)
    assert torch.allclose(val(c), val(a) @ val(b))
    check("gemm", (3, 4, 5), t, n)
    A, B = arr(2, 3, 5), arr(2, 5, 4)
    c, t, n = run(lambda A, B: np.stack([ref_gemm(A[i], B[i]) for i in range(2)]), A, B)
    assert torch.allclose(val(c), val(A) @ val(B))
    check("bmm", (2, 3, 4, 5), t, n)


ACTS = {
    "none": lambda x: x,
    "relu": relu,
    "gelu": lambda x: x * (1 + erf(x / math.sqrt(2))) * 0.5,
    "gelu_tanh": lambda x: 0.5 * x * (1 + tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x)))),
    "silu": lambda x: x * sigmoid(x),
    "sigmoid": sigmoid, "tanh": tanh, "exp": exp,
}
TORCH_ACTS = {"none": lambda x: x, "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
              "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp}


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias,residual", [(1, 0), (0, 1), (1, 1), (0, 0)])
def test_linear_with_epilogue(act, bias, residual):
    M, N, K = 3, 4, 5
    x, w, b, r = arr(M, K), arr(N, K), arr(N), arr(M, N)

    def ref(*arrays):
        y = ref_gemm(x, w.T)
        for i in range(M):
            for j in range(N):
                v = y[i, j] + b[j] if bias else y[i, j]
                v = ACTS[act](v)
                y[i, j] = v + r[i, j] if residual else v
        return y

    used = (x, w) + ((b,) if bias else ()) + ((r,) if residual else ())
    y, t, n = run(ref, *used)
    expect = TORCH_ACTS[act](val(x) @ val(w).T + (val(b) if bias else 0)) + (val(r) if residual else 0)
    assert torch.allclose(val(y), expect)
    check("linear", {"M": M, "N": N, "K": K, "bias": bias, "act": act, "residual": residual}, t, n)


@pytest.mark.parametrize("stride,pad,groups,bias", [(1, 0, 1, 0), (1, 1, 1, 1), (2, 1, 2, 1), (2, 0, 1, 0)])
def test_conv2d(stride, pad, groups, bias):
    N, C, H, W, K, R, S = 1, 4, 5, 4, 4, 3, 2
    x, w, b = arr(N, C, H, W), arr(K, C // groups, R, S), arr(K)
    P, Q = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1

    def ref(*_):
        y = np.empty((N, K, P, Q), dtype=object)
        cg, kg = C // groups, K // groups
        for n in range(N):
            for k in range(K):
                g = k // kg
                for p in range(P):
                    for q in range(Q):
                        s = Num(0.0)
                        with bucket("matmul"):
                            for c in range(cg):
                                for r in range(R):
                                    for t in range(S):
                                        h, wi = p * stride + r - pad, q * stride + t - pad
                                        xv = x[n, g * cg + c, h, wi] if 0 <= h < H and 0 <= wi < W else Num(0.0)
                                        s = s + xv * w[k, c, r, t]     # padded taps still cost a MAC
                        y[n, k, p, q] = s + b[k] if bias else s
        return y

    y, t, n = run(ref, *((x, w, b) if bias else (x, w)))
    expect = F.conv2d(val(x), val(w), val(b) if bias else None, stride=stride, padding=pad, groups=groups)
    assert torch.allclose(val(y), expect)
    check("conv2d", {"N": N, "C": C, "H": H, "W": W, "K": K, "R": R, "S": S, "stride": stride, "pad": pad,
                     "groups": groups, "bias": bias}, t, n)
    with FlopCounterMode(display=False) as fc:   # torch's own counter agrees on the MACs
        F.conv2d(val(x), val(w), None, stride=stride, padding=pad, groups=groups)
    assert fc.get_total_flops() == t["matmul"]


def ref_attention(q, k, v, causal):
    B, H, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    o = np.empty((B, H, Sq, D), dtype=object)
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for i in range(Sq):
                keys = [j for j in range(Skv) if not causal or j <= i]
                with bucket("matmul"):
                    s = []
                    for j in keys:
                        acc = Num(0.0)
                        for d in range(D):
                            acc = acc + q[b, h, i, d] * k[b, g, j, d]
                        s.append(acc)
                with bucket("free"):
                    s = [x / math.sqrt(D) for x in s]
                    m = s[0]
                    for x in s[1:]:
                        m = vmax(m, x)
                    p = [exp(x - m) for x in s]
                    z = p[0]
                    for x in p[1:]:
                        z = z + x
                    p = [x / z for x in p]
                with bucket("matmul"):
                    for d in range(D):
                        acc = Num(0.0)
                        for pj, j in zip(p, keys):
                            acc = acc + pj * v[b, g, j, d]
                        o[b, h, i, d] = acc
    return o


@pytest.mark.parametrize("B,H,Hkv,Sq,Skv,D,causal", [
    (1, 2, 2, 3, 3, 2, 0), (1, 2, 1, 4, 4, 2, 1), (2, 4, 2, 2, 5, 3, 1), (1, 2, 1, 5, 3, 2, 1), (2, 2, 1, 1, 6, 2, 0)])
def test_attention(B, H, Hkv, Sq, Skv, D, causal):
    q, k, v = arr(B, H, Sq, D), arr(B, Hkv, Skv, D), arr(B, Hkv, Skv, D)
    o, t, n = run(lambda *a: ref_attention(*a, causal), q, k, v)
    kk, vv = (val(a).repeat_interleave(H // Hkv, dim=1) for a in (k, v))
    mask = torch.ones(Sq, Skv).tril().bool() if causal else None      # top-left, as torch's is_causal
    assert torch.allclose(val(o), F.scaled_dot_product_attention(val(q), kk, vv, attn_mask=mask))
    check("attention", {"B": B, "H": H, "Hkv": Hkv, "Sq": Sq, "Skv": Skv, "D": D, "causal": causal}, t, n)
    if Sq == Skv:
        check("attention_prefill", {"B": B, "H": H, "Hkv": Hkv, "S": Sq, "D": D, "causal": causal}, t, n)
    if Sq == 1 and not causal:
        check("attention_decode", {"B": B, "H": H, "Hkv": Hkv, "L": Skv, "D": D}, t, n)


def _mean(xs):
    s = xs[0]
    for x in xs[1:]:
        s = s + x
    return s / len(xs)


def test_rmsnorm_layernorm_softmax():
    R, D = 3, 5
    x, w, b = arr(R, D), arr(D), arr(D)

    def rms(*_):
        y = np.empty((R, D), dtype=object)
        for i in range(R):
            r = rsqrt(_mean([x[i, j] * x[i, j] for j in range(D)]) + 1e-6)
            for j in range(D):
                y[i, j] = x[i, j] * r * w[j]
        return y

    y, t, n = run(rms, x, w)
    assert torch.allclose(val(y), F.rms_norm(val(x), (D,), val(w), 1e-6))
    check("rmsnorm", (R, D), t, n)

    def ln(*_):
        y = np.empty((R, D), dtype=object)
        for i in range(R):
            mu = _mean(list(x[i]))
            dev = [x[i, j] - mu for j in range(D)]
            r = rsqrt(_mean([d * d for d in dev]) + 1e-5)
            for j in range(D):
                y[i, j] = dev[j] * r * w[j] + b[j]
        return y

    y, t, n = run(ln, x, w, b)
    assert torch.allclose(val(y), F.layer_norm(val(x), (D,), val(w), val(b)))
    check("layernorm", (R, D), t, n)

    def sm(*_):
        y = np.empty((R, D), dtype=object)
        for i in range(R):
            m = x[i, 0]
            for j in range(1, D):
                m = vmax(m, x[i, j])
            p = [exp(x[i, j] - m) for j in range(D)]
            z = p[0]
            for q in p[1:]:
                z = z + q
            for j in range(D):
                y[i, j] = p[j] / z
        return y

    y, t, n = run(sm, x)
    assert torch.allclose(val(y), torch.softmax(val(x), -1))
    check("softmax", (R, D), t, n)


@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh", "exp", "silu", "gelu", "gelu_tanh"])
def test_activation(act):
    x = arr(7)
    y, t, n = run(lambda x: np.array([ACTS[act](v) for v in x], dtype=object), x)
    assert torch.allclose(val(y), TORCH_ACTS[act](val(x)))
    check("activation", {"N": 7, "act": act}, t, n)


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div", "swiglu"])
def test_elementwise(kind):
    f = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "div": lambda a, b: a / b, "swiglu": lambda a, b: ACTS["silu"](a) * b}[kind]
    tf = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "swiglu": lambda a, b: F.silu(a) * b}[kind]
    x, y = arr(6), arr(6)
    z, t, n = run(lambda x, y: np.array([f(a, b) for a, b in zip(x, y)], dtype=object), x, y)
    assert torch.allclose(val(z), tf(val(x), val(y)))
    check("elementwise", {"N": 6, "kind": kind}, t, n)


@pytest.mark.parametrize("kind", ["sum", "mean", "max"])
def test_reduction(kind):
    x = arr(3, 5)

    def ref(x):
        out = []
        for row in x:
            if kind == "mean":
                out.append(_mean(list(row)))
                continue
            s = row[0]
            for v in row[1:]:
                s = vmax(s, v) if kind == "max" else s + v
            out.append(s)
        return np.array(out, dtype=object)

    y, t, n = run(ref, x)
    assert torch.allclose(val(y), {"sum": torch.sum, "mean": torch.mean, "max": torch.amax}[kind](val(x), -1))
    check("reduction", {"R": 3, "D": 5, "kind": kind}, t, n)


def test_rope():
    B, S, H, D = 2, 3, 2, 4
    x, cos, sin = arr(B, S, H, D), arr(S, D), arr(S, D)

    def ref(*_):
        y = np.empty(x.shape, dtype=object)
        half = D // 2
        for b in range(B):
            for s in range(S):
                for h in range(H):
                    rot = [-x[b, s, h, d + half] for d in range(half)] + [x[b, s, h, d] for d in range(half)]
                    for d in range(D):
                        y[b, s, h, d] = x[b, s, h, d] * cos[s, d] + rot[d] * sin[s, d]
        return y

    y, t, n = run(ref, x, cos, sin)
    xv = val(x)
    rot = torch.cat((-xv[..., D // 2:], xv[..., :D // 2]), -1)
    assert torch.allclose(val(y), xv * val(cos)[:, None] + rot * val(sin)[:, None])
    check("rope", (B, S, H, D), t, n)


def _sum_counts(parts):
    return sum(c.matmul_flops for c in parts), sum(c.vector_flops for c in parts)


def test_swiglu_mlp_is_three_gemms_and_a_gate():
    M, Dm, Fh = 5, 8, 12
    _, c = count_op("swiglu_mlp", (M, Dm, Fh))
    parts = [count_op("gemm", (M, Fh, Dm))[1]] * 2 + [count_op("gemm", (M, Dm, Fh))[1],
                                                       count_op("elementwise", {"N": M * Fh, "kind": "swiglu"})[1]]
    assert (c.matmul_flops, c.vector_flops) == _sum_counts(parts)
    assert c.bytes == 4 * (M * Dm + 3 * Dm * Fh + M * Dm)   # x, three weights, y; no intermediates


def test_decoder_layer_is_the_sum_of_its_operators():
    B, S, Dm, H, Hkv, Dh, Fh = 2, 6, 16, 4, 2, 8, 24
    T = B * S
    _, c = count_op("decoder_layer", (B, S, Dm, H, Hkv, Dh, Fh))
    parts = [
        count_op("rmsnorm", (T, Dm))[1],
        count_op("gemm", (T, H * Dh, Dm))[1], count_op("gemm", (T, Hkv * Dh, Dm))[1], count_op("gemm", (T, Hkv * Dh, Dm))[1],
        count_op("rmsnorm", (T * H, Dh))[1], count_op("rmsnorm", (T * Hkv, Dh))[1],
        count_op("rope", (B, S, H, Dh))[1], count_op("rope", (B, S, Hkv, Dh))[1],
        count_op("attention_prefill", (B, H, Hkv, S, Dh, 1))[1],
        count_op("linear", {"M": T, "N": Dm, "K": H * Dh, "bias": 0, "residual": 1})[1],
        count_op("rmsnorm", (T, Dm))[1],
        count_op("swiglu_mlp", (T, Dm, Fh))[1],
        count_op("elementwise", {"N": T * Dm, "kind": "add"})[1],
    ]
    assert (c.matmul_flops, c.vector_flops) == _sum_counts(parts)
    weights = Dm * (H + 2 * Hkv) * Dh + H * Dh * Dm + 3 * Dm * Fh + 2 * Dm + 2 * Dh
    assert c.bytes == 4 * (2 * T * Dm + weights + 2 * S * Dh)


def test_torch_flop_counter_agrees_on_gemm_family():
    for op, shape, fn in [
        ("gemm", (7, 9, 11), lambda: torch.randn(7, 11) @ torch.randn(11, 9)),
        ("bmm", (3, 7, 9, 11), lambda: torch.bmm(torch.randn(3, 7, 11), torch.randn(3, 11, 9))),
    ]:
        with FlopCounterMode(display=False) as fc:
            fn()
        assert count_op(op, shape)[1].matmul_flops == fc.get_total_flops()


def test_every_registered_op_is_covered_here():
    covered = {"gemm", "bmm", "linear", "conv2d", "attention", "attention_prefill", "attention_decode", "rmsnorm",
               "layernorm", "softmax", "activation", "elementwise", "reduction", "rope", "swiglu_mlp", "decoder_layer"}
    from tests.test_sol_ops_vector import COVERED   # the operators added with the KernelBench-size problems
    assert set(op_names()) == covered | COVERED


def test_bytes_scale_with_dtype_and_flops_do_not():
    a, b = sol_report("decoder_layer", (1, 8, 32, 4, 2, 8, 64), "fp32", "h100"), \
        sol_report("decoder_layer", (1, 8, 32, 4, 2, 8, 64), "bf16", "h100")
    assert a.bytes == 2 * b.bytes and a.flops == b.flops


@pytest.mark.parametrize("op,shape,field", [
    ("gemm", (4, -1, 4), "gemm N"), ("gemm", (4, 4), "missing K"), ("gemm", {"M": 1, "N": 1, "K": 1, "Z": 2}, "Z"),
    ("gemm", (1, 2, 3, 4), "shape of gemm"), ("attention", (1, 3, 2, 4, 4, 8), "Hkv"),
    ("activation", {"N": 4, "act": "swish"}, "act"), ("linear", {"M": 1, "N": 1, "K": 1, "bias": 2}, "bias"),
    ("conv2d", (1, 3, 2, 2, 4, 3, 3), "conv2d shape"), ("gemm", (1.5, 2, 2), "gemm M")])
def test_bad_shapes_name_the_field(op, shape, field):
    with pytest.raises(InvalidInput, match=field):
        count_op(op, shape)


def test_unknown_op_and_dtype():
    with pytest.raises(UnknownName, match="gemm"):
        get_op("matmul3")
    with pytest.raises(InvalidInput, match="dtype"):
        sol_report("gemm", (2, 2, 2), "int4", "h100")
