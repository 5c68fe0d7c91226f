"""Automatic speed of light for any PyTorch reference: run it once under a dispatch mode that counts
FLOPs per aten operator (the convention of `formloop.sol.ops`), and take the minimum bytes as its
inputs + parameters + buffers + outputs, each distinct storage once.

Operators without a rule are not guessed: they are listed in the report's notes as uncounted."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from formloop.dtypes import torch_dtype
from formloop.errors import InvalidInput
from formloop.hw.chips import Chip
from formloop.sol import resolve_chip
from formloop.sol.ops import ACT_FLOPS, SOL_DTYPES, Counts, causal_pairs, normalize_dtype
from formloop.sol.problem import Problem, call_inputs, load_problem
from formloop.sol.report import SOLReport, build_report

aten = torch.ops.aten

def _numel(t) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 1


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


# --- rules: (args dict, output) -> (matmul FLOPs, vector FLOPs) ------------------------------------

def _mm(a, out):
    m, k = a["self"].shape
    return 2 * m * k * a["mat2"].shape[1], 0


def _addmm(a, out):
    m, k = a["mat1"].shape
    n = a["mat2"].shape[1]
    return 2 * m * n * k, m * n


def _bmm(a, out):
    b, m, k = a["self"].shape
    return 2 * b * m * k * a["mat2"].shape[2], 0


def _baddbmm(a, out):
    b, m, k = a["batch1"].shape
    n = a["batch2"].shape[2]
    return 2 * b * m * n * k, b * m * n


def _conv(a, out):
    w = a["weight"]
    per_out = w.shape[1] * w[0, 0].numel()          # C/groups x kernel window
    bias = _numel(out) if a.get("bias") is not None else 0
    return 2 * _numel(out) * per_out, bias


def _sdpa(a, out):
    q, k = a["query"], a["key"]
    *batch, sq, d = q.shape
    skv = k.shape[-2]
    heads = 1
    for x in batch:
        heads *= x
    pairs = causal_pairs(sq, skv) if a.get("is_causal") else sq * skv
    if a.get("attn_mask") is not None:
        raise InvalidInput("attention mask in automatic SOL", "attn_mask",
                           "is_causal or no mask (an arbitrary mask's kept pairs are data-dependent)")
    return 4 * heads * pairs * d, 0


def _pointwise(k: int) -> Callable:
    return lambda a, out: (0, k * _numel(_first(out)))


def _reduce(minus_out: bool) -> Callable:
    return lambda a, out: (0, _numel(a["self"]) - (_numel(_first(out)) if minus_out else 0))


def _softmax(a, out):
    x = a["self"]
    rows = _numel(x) // x.shape[a["dim"]] if x.dim() else 1
    return 0, 5 * _numel(x) - 2 * rows


def _layer_norm(a, out):
    x = a["input"]
    d = 1
    for s in a["normalized_shape"]:
        d *= s
    rows = _numel(x) // d
    affine = (a.get("weight") is not None) + (a.get("bias") is not None)
    return 0, rows * ((5 + affine) * d + 2)


def _gelu(a, out):
    k = ACT_FLOPS["gelu_tanh" if a.get("approximate") == "tanh" else "gelu"]
    return 0, k * _numel(out)


RULES: dict[str, Callable] = {
    "mm": _mm, "addmm": _addmm, "bmm": _bmm, "baddbmm": _baddbmm, "convolution": _conv,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa, "_scaled_dot_product_flash_attention": _sdpa,
    "_scaled_dot_product_efficient_attention": _sdpa, "_scaled_dot_product_cudnn_attention": _sdpa,
    "_softmax": _softmax, "native_layer_norm": _layer_norm, "gelu": _gelu,
    "silu": _pointwise(ACT_FLOPS["silu"]),
    "sum": _reduce(True), "amax": _reduce(True), "max": _reduce(True), "mean": _reduce(False),
}
RULES.update({name: _pointwise(1) for name in (
    "add", "sub", "mul", "div", "rsub", "pow", "rsqrt", "sqrt", "exp", "log", "tanh", "sigmoid", "erf",
    "reciprocal", "relu", "maximum", "minimum", "clamp", "clamp_min", "clamp_max")})

# Operators that move or relabel data without arithmetic.
FREE = frozenset("""view _unsafe_view reshape t transpose permute expand clone copy copy_ contiguous cat stack
split split_with_sizes chunk slice select index unsqueeze squeeze neg _to_copy to detach alias lift_fresh
empty empty_like zeros zeros_like ones ones_like full full_like fill fill_ arange repeat repeat_interleave
masked_fill embedding flatten unflatten unbind narrow as_strided expand_as view_as new_empty new_zeros
new_ones _reshape_alias unsafe_view index_select gather roll flip where""".split())


class CountingMode(TorchDispatchMode):
    """Counts FLOPs of every dispatched aten operator by `RULES`; remembers the ones it cannot."""

    def __init__(self):
        super().__init__()
        self.matmul = 0
        self.vector = 0
        self.by_op: Counter = Counter()
        self.uncounted: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__.rstrip("_")   # in-place variants count as their op
        if name in FREE:
            return out
        rule = RULES.get(name)
        if rule is None:
            self.uncounted[func.name()] += 1
            return out
        bound = dict(zip((a.name for a in func._schema.arguments), args))
        bound.update(kwargs)
        mm, vec = rule(bound, out)
        self.matmul += mm
        self.vector += vec
        self.by_op[name] += mm + vec
        return out


def count_module(model: torch.nn.Module, inputs: list) -> tuple[Counts, CountingMode]:
    """Run `model(*inputs)` once and count FLOPs and minimum bytes."""
    mode = CountingMode()
    with torch.no_grad(), mode:
        out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers())
    tensors += [t for t in outs if isinstance(t, torch.Tensor)]
    seen, nbytes = set(), 0
    for t in tensors:
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
        if key not in seen:
            seen.add(key)
            nbytes += t.numel() * t.element_size()
    return Counts(mode.matmul, mode.vector, nbytes), mode


def _storage_dtype(tensors: list) -> str:
    floats = {t.dtype for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()}
    names = {str(torch_dtype(d)): d for d in SOL_DTYPES}
    if len(floats) != 1 or str(next(iter(floats))) not in names:
        raise InvalidInput("problem tensor dtypes", sorted(str(d) for d in floats),
                           "one floating dtype among " + ", ".join(SOL_DTYPES), fix="pass dtype explicitly")
    return names[str(next(iter(floats)))]


def sol_for_problem(path_or_problem: str | Path | Problem, chip: str | Chip, dtype: str | None = None, *,
                    clock_mhz: float | None = None, compute_precision: str | None = None) -> SOLReport:
    """Speed-of-light report of a problem file's reference `Model`, counted at dispatch level.

    `dtype` (fp32, bf16, fp16) casts the model and its floating inputs first; by default the
    problem's own floating dtype is used."""
    problem = path_or_problem if isinstance(path_or_problem, Problem) else load_problem(path_or_problem)
    torch.manual_seed(0)
    model = problem.build().eval()
    inputs = call_inputs(problem, "get_inputs")
    if dtype is not None:
        if normalize_dtype(dtype) not in ("fp32", "bf16", "fp16"):
            raise InvalidInput("dtype for a problem", dtype, ["fp32", "bf16", "fp16"])
        dt = torch_dtype(normalize_dtype(dtype))
        model = model.to(dt)
        inputs = [t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    storage = _storage_dtype(inputs + list(model.parameters()))
    counts, mode = count_module(model, inputs)
    notes = tuple(f"uncounted operator {op} x{n} (no FLOP rule)" for op, n in sorted(mode.uncounted.items()))
    shape = {f"input{i}": list(t.shape) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
    return build_report(f"problem:{problem.name}", shape, storage, resolve_chip(chip, clock_mhz), counts,
                        compute_precision=compute_precision, source="dispatch", notes=notes)
