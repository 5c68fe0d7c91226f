"""Automatic speed of light for any PyTorch reference, without allocating a single real tensor.

The problem's model is built, its inputs are made and its forward is run on torch's meta device
(shapes, dtypes and strides, no data; an operator without a meta kernel fails loudly instead of
falling back to real memory), under `formloop.sol.trace.CountingMode` pricing every aten operator
by `formloop.sol.rules`. A KernelBench-size problem (a 4096 x 393216
fp32 activation, an 8192-sided GEMM, a whole ViT) costs what its graph costs, not what its tensors do.

Minimum bytes: every input, weight and buffer the forward reads (each distinct storage once, only the
part read), every in-place write to them, and every output. Buffers built as triangular masks
(tril/triu of a constant) are index-computable and not counted. Operators without a rule are listed
and the report's `lower_bound` is set: the floor then understates the true speed of light."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

from formloop.dtypes import torch_dtype
from formloop.errors import InvalidInput, StructureError
from formloop.hw.chips import Chip
from formloop.sol import resolve_chip
from formloop.sol.ops import SOL_DTYPES, Counts, normalize_dtype
from formloop.sol.problem import Problem, call_inputs, load_problem
from formloop.sol.report import SOLReport, build_report
from formloop.sol.trace import CountingMode, FunctionLevel, distinct_elements, storage_key

# The element types SOL counts in, as torch dtypes (from the one dtype table).
_TORCH_DTYPES = {name: torch_dtype(name) for name in SOL_DTYPES}


def _tensors(values: Iterable) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def _flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def mask_buffers(model: torch.nn.Module, mode: CountingMode) -> list[torch.Tensor]:
    """Buffers built as triangular masks (their pattern kept from construction): index-computable."""
    return [b for b in model.buffers() if mode.pattern(b) is not None]


def count_module(model: torch.nn.Module, inputs: list, mode: CountingMode | None = None) -> tuple[Counts, CountingMode]:
    """Run `model(*inputs)` once (real or meta tensors) and count FLOPs and minimum bytes. `mode` may
    carry patterns from the model's construction (`traced_problem`): its mask buffers are not read."""
    leaves = _tensors(inputs) + list(model.parameters()) + list(model.buffers())
    mode = mode or CountingMode()
    skip_bytes = mask_buffers(model, mode)
    mode.leaf_keys = {storage_key(t) for t in leaves}
    mode.counting = True
    with torch.no_grad(), mode, FunctionLevel(mode):
        out = model(*inputs)
    skipped = {storage_key(t) for t in skip_bytes}
    nbytes = 0
    for key, views in list(mode.reads.items()) + list(mode.writes.items()):
        if key not in skipped:
            size = next(t.untyped_storage().nbytes() for t in leaves if storage_key(t) == key)
            nbytes += min(size, sum(views.values()))
    seen = set()
    for t in _tensors(_flat(out)):
        key = (storage_key(t), t.storage_offset(), tuple(t.shape), tuple(t.stride()))
        if key not in seen:
            seen.add(key)
            nbytes += distinct_elements(t) * t.element_size()
    return Counts(mode.matmul, mode.vector, nbytes), mode


def _storage_dtype(tensors: list) -> str:
    floats = {t.dtype for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()}
    names = {d: k for k, d in _TORCH_DTYPES.items()}
    if len(floats) != 1 or next(iter(floats)) not in names:
        raise InvalidInput("problem tensor dtypes", sorted(str(d) for d in floats),
                           "one floating dtype among " + ", ".join(_TORCH_DTYPES), fix="pass dtype explicitly")
    return names[next(iter(floats))]


def _traced(problem: Problem, what: str, fn):
    """Run one step of a problem on meta tensors; a failure names the problem, the step and why."""
    try:
        return fn()
    except StructureError:
        raise
    except Exception as exc:  # the reference's own failure, or an operator meta tensors cannot run
        kind = type(exc).__name__
        text = str(exc)
        hint = ("it needs tensor data (.item(), nonzero, masked_select, data-dependent shapes)"
                if "meta" in text.lower() else "make it run on shapes alone")
        raise StructureError(f"problem file {problem.path}: {what} failed on meta tensors: {kind}: "
                             f"{text.splitlines()[0] if text else ''}", fix=hint) from None


def traced_problem(problem: Problem, dtype: str | None = None, *, eval_mode: bool = False, device: str = "meta"):
    """(model, inputs, counting mode) built on `device` (meta: nothing allocated). The model is built
    under the counting mode, so mask buffers keep their triangular pattern; the inputs are not (inputs
    are data, whatever they were made from)."""
    mode = CountingMode()
    mode.counting = False
    with torch.device(device):
        torch.manual_seed(0)
        with mode:
            model = _traced(problem, "building Model", problem.build)
        inputs = _traced(problem, "get_inputs()", lambda: call_inputs(problem, "get_inputs"))
    real = [t for t in _tensors(inputs) + list(model.parameters()) + list(model.buffers()) if not t.is_meta]
    if device == "meta" and real:
        raise StructureError(f"problem file {problem.path}: a tensor of shape {tuple(real[0].shape)} was made on "
                             f"{real[0].device}, not on the default device", fix="create tensors without device=")
    return _finish(model, inputs, mode, dtype, eval_mode)


def meta_problem(problem: Problem, dtype: str | None = None, *, eval_mode: bool = False):
    """`traced_problem` on the meta device: shapes only, nothing allocated."""
    return traced_problem(problem, dtype, eval_mode=eval_mode)


def _finish(model, inputs, mode: CountingMode, dtype: str | None, eval_mode: bool):
    if eval_mode:
        model.eval()
    if dtype is not None:
        if normalize_dtype(dtype) not in ("fp32", "bf16", "fp16"):
            raise InvalidInput("dtype for a problem", dtype, ["fp32", "bf16", "fp16"])
        dt = _TORCH_DTYPES[normalize_dtype(dtype)]
        with mode:
            model = model.to(dt)
            inputs = [t.to(dt) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    mode.forget(model.parameters())
    mode.forget(b for b in model.buffers() if (p := mode.pattern(b)) is None or p.region is None)
    return model, inputs, mode


def sol_for_problem(path_or_problem: str | Path | Problem, chip: str | Chip, dtype: str | None = None, *,
                    clock_mhz: float | None = None, compute_precision: str | None = None,
                    eval_mode: bool = False) -> SOLReport:
    """Speed-of-light report of a problem file's reference `Model`, counted at dispatch level on meta
    tensors. `dtype` (fp32, bf16, fp16) casts the model and its floating inputs first; by default the
    problem's own floating dtype is used. The model runs as KernelBench runs it (training mode: dropout
    and batch statistics on) unless `eval_mode`."""
    problem = path_or_problem if isinstance(path_or_problem, Problem) else load_problem(path_or_problem)
    chip = resolve_chip(chip, clock_mhz)
    model, inputs, mode = meta_problem(problem, dtype, eval_mode=eval_mode)
    storage = _storage_dtype(inputs + list(model.parameters()))
    masks = mask_buffers(model, mode)
    with torch.device("meta"):
        counts, mode = _traced(problem, "Model.forward", lambda: count_module(model, inputs, mode))
    uncounted = tuple(f"{op} x{n}" for op, n in sorted(mode.uncounted.items()))
    notes = [f"uncounted operator {u} (no FLOP rule): the floor is a LOWER bound" for u in uncounted]
    notes += [f"{text} x{n}" if n > 1 else text for text, n in Counter(mode.notes).items()]
    notes += [f"buffer {tuple(b.shape)} is a triangular mask, computable from indices: not counted in bytes"
              for b in masks]
    shape = {f"input{i}": list(t.shape) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
    return build_report(f"problem:{problem.name}", shape, storage, chip, counts, compute_precision=compute_precision,
                        source="dispatch", notes=tuple(notes), uncounted=uncounted, by_op=mode.by_op())
