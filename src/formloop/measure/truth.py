"""The float64 truth of a reference, computed where the reference runs.

The truth is the reference module re-run in float64 (a deep copy with float64 parameters) on the
same inputs promoted to float64. When inputs plus outputs in float64 would not fit the memory budget
(a quarter of the device's free memory, 2 GiB on a CPU), the truth is computed in row blocks along
dim 0 and handed to the comparison as `RowTruth` objects: a block is computed when the comparison
asks for it and kept only while the cache budget allows. Blocking is used only where it is valid:
the reference run on the first block must reproduce the first rows of the full reference output
(within the dtype's tolerance); a batch-coupled model (batch norm in training mode, a matmul whose
second operand has the batch extent) fails that test and gets no truth in place of a wrong one."""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from formloop.measure.compare import compare_outputs, flatten

CPU_BUDGET = 2 << 30


def to64(values: list) -> list:
    """Float tensors promoted to float64, always as copies (a reference that writes its inputs in
    place must not touch the caller's)."""
    return [v.to(torch.float64, copy=True) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for v in values]


def _float_bytes64(values: list) -> int:
    return sum(8 * v.numel() for v in flatten(values) if isinstance(v, torch.Tensor) and v.is_floating_point())


def memory_budget(device: str | torch.device) -> int:
    if str(device).startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index
        free, _ = torch.cuda.mem_get_info(index if index is not None else torch.cuda.current_device())
        return int(free // 4)
    return CPU_BUDGET


class _RowBlocks:
    """Runs the float64 model on row blocks [a, b) of the sliced inputs; caches while budget allows."""

    def __init__(self, model64: Any, inputs: list, sliced: tuple[int, ...], rows: int, block_rows: int,
                 cache_bytes: int):
        self.model64, self.inputs, self.sliced = model64, inputs, sliced
        self.rows, self.block_rows, self.cache_bytes = rows, block_rows, cache_bytes
        self.cache: dict[int, list] = {}
        self.cached = 0
        self.computed = 0

    def block(self, a: int) -> list:
        if a in self.cache:
            return self.cache[a]
        b = min(a + self.block_rows, self.rows)
        args = [v[a:b] if k in self.sliced else v for k, v in enumerate(self.inputs)]
        with torch.no_grad():
            out = flatten(self.model64(*to64(args)))
        self.computed += 1
        size = _float_bytes64(out)
        if self.cached + size <= self.cache_bytes:
            self.cache[a] = out
            self.cached += size
        return out


class RowTruth:
    """Output `k` of a blocked float64 truth (the `TruthChunks` protocol of formloop.measure.compare)."""

    def __init__(self, rows: _RowBlocks, k: int, shape: tuple[int, ...]):
        self._rows, self.k, self.shape = rows, k, shape

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        for a in range(0, self._rows.rows, self._rows.block_rows):
            yield a, min(a + self._rows.block_rows, self._rows.rows), self._rows.block(a)[self.k]

    def value_at(self, flat: int) -> float:
        """The truth at flat index `flat` (computes only the block that holds it)."""
        row = max(1, math.prod(self.shape[1:]))
        a = (flat // row) // self._rows.block_rows * self._rows.block_rows
        return float(self._rows.block(a)[self.k].reshape(-1)[flat - a * row])


def _leading(native: list) -> int | None:
    tensors = [t for t in native if isinstance(t, torch.Tensor)]
    if not tensors or len(tensors) != len(native) or any(t.dim() == 0 for t in tensors):
        return None
    rows = tensors[0].shape[0]
    return rows if rows >= 2 and all(t.shape[0] == rows for t in tensors) else None


def _separable(model: Any, inputs: list, native: list, sliced: tuple[int, ...], m: int) -> bool:
    args = [v[:m] if k in sliced else v for k, v in enumerate(inputs)]
    try:
        with torch.no_grad():
            part = flatten(model(*args))
    except Exception:  # noqa: BLE001 - a model that rejects the block is not separable
        return False
    if len(part) != len(native):
        return False
    return compare_outputs(part, [t[:m] for t in native]).ok


def truth_of(model: Any, model64: Any, inputs: list, native: Any, device: str | torch.device,
             budget: int | None = None) -> tuple[Any, str]:
    """(truth, note): the float64 truth of `native = model(*inputs)`, whole, in row blocks, or None."""
    if model64 is None:
        return None, "no float64 twin of the reference (it could not be copied)"
    budget = memory_budget(device) if budget is None else budget
    outs = flatten(native)
    need = _float_bytes64(inputs) + _float_bytes64(outs)
    if need <= budget:
        try:
            with torch.no_grad():
                return model64(*to64(inputs)), ""
        except Exception as exc:  # noqa: BLE001 - e.g. an op without a float64 kernel on this device
            return None, f"float64 re-run failed ({type(exc).__name__}: {str(exc)[:120]})"
    rows = _leading(outs)
    if rows is None:
        return None, f"float64 truth needs {need / 2**30:.1f} GiB > budget {budget / 2**30:.1f} GiB and the outputs " \
                     "have no common leading extent to block over; compared with the reference itself"
    block_rows = max(1, min(rows, math.floor(rows * budget / (2 * need))))
    candidates = [tuple(k for k, v in enumerate(inputs)
                        if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == rows)]
    if candidates[0][:1] and candidates[0] != candidates[0][:1]:
        candidates.append(candidates[0][:1])
    for sliced in candidates:
        if sliced and _separable(model, inputs, outs, sliced, min(block_rows, max(1, rows // 2))):
            rb = _RowBlocks(model64, inputs, sliced, rows, block_rows, cache_bytes=budget)
            truth = [RowTruth(rb, k, tuple(t.shape)) for k, t in enumerate(outs)]
            return truth, f"float64 truth computed in blocks of {block_rows} rows (inputs {list(sliced)} sliced)"
    return None, "float64 truth too large to compute whole and the reference is not row-separable; " \
                 "compared with the reference itself"
