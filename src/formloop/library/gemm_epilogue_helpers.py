"""The Triton helper functions every emitted gemm-epilogue module carries (as source text, written
into the module ahead of its epilogue: the activations spelled for the fast paths)."""

HELPERS = '''from formloop.library.gemm_dot import round_bf16 as _round_bf16


@triton.jit
def _sigmoid(x):
    # 1 / (1 + e^-x), spelled out so the division is visibly the fast one (Triton lowers an fp32
    # divide to div.full, 2 ulp; tl.math.div_rn would be the IEEE one) and exp is ex2.approx
    return tl.fdiv(1.0, 1.0 + tl.exp(-x))


@triton.jit
def _silu(x):
    # x * sigmoid(x) as one fast division: x / (1 + e^-x)
    return tl.fdiv(x, 1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    # 2*sigmoid(2x) - 1: exact in the limits (+-1), no libdevice call, runs in the interpreter
    return 2.0 * _sigmoid(2.0 * x) - 1.0


@triton.jit
def _softplus(x, beta, threshold):
    return tl.where(x * beta > threshold, x, tl.log(1.0 + tl.exp(x * beta)) / beta)'''
