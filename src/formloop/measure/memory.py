"""What the harness does around each candidate call: poison every uninitialized allocation, wait
for work the candidate left running, and snapshot inputs to prove they came back unchanged."""
from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from formloop.measure.compare import CHUNK_ELEMS

POISON = float("nan")
_EMPTY_OPS = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided"}


def _fill(t: torch.Tensor, value: float) -> None:
    if t.is_floating_point() or t.is_complex():
        t.fill_(value)
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).min if value != value else int(value) % 127)


class PoisonedAllocations(TorchDispatchMode):
    """Fill every uninitialized allocation (empty, empty_like, new_empty, ...) as it is made.

    `value` poisons with a constant (NaN by default); `stale` emulates a caching allocator handing
    back a freed buffer: an allocation with the numel and dtype of a stale tensor receives its values."""

    def __init__(self, value: float = POISON, stale: list[torch.Tensor] | None = None):
        super().__init__()
        self.value, self.stale, self.count = value, stale or [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.name in _EMPTY_OPS:
            if isinstance(out, torch.Tensor) and out.numel():
                self.count += 1
                donor = next((s for s in self.stale if s.numel() == out.numel() and s.dtype == out.dtype), None)
                if donor is not None and out.is_contiguous():
                    out.view(-1).copy_(donor.reshape(-1).to(out.device))
                else:
                    _fill(out, self.value)
        return out


@contextmanager
def poisoned(value: float = POISON, stale: list[torch.Tensor] | None = None) -> Iterator[PoisonedAllocations]:
    if torch.cuda.is_available():  # also poison the caching allocator's free blocks (all-ones bytes are NaN)
        block = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        block.fill_(0xFF)
        del block
    mode = PoisonedAllocations(value, stale)
    with mode:
        yield mode


def settle(before: set[threading.Thread], timeout: float = 10.0) -> list[str]:
    """Wait for work the candidate left running (threads it started, other CUDA streams), each thread up to
    `timeout` seconds; returns the threads still running after that, named with what they run."""
    late = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    for t in late:
        t.join(timeout)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return [_thread_name(t) for t in late if t.is_alive()]


def _thread_name(t: threading.Thread) -> str:
    target = getattr(t, "_target", None)
    if target is None:
        return f"{t.name} ({type(t).__name__})"
    where = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
    return f"{t.name} ({where})"


def clone_all(values: list) -> list:
    return [v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in values]


def changed_inputs(before: list, after: list, chunk: int = CHUNK_ELEMS) -> list[dict[str, Any]]:
    """Which tensor inputs differ (NaN = NaN) after a call, with how much changed; compared where the
    tensors live, in blocks (no float64 copy of a whole input)."""
    out = []
    for i, (b, a) in enumerate(zip(before, after)):
        if not isinstance(b, torch.Tensor):
            continue
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            out.append({"input": i, "changed_fraction": 1.0, "max_abs_change": float("inf")})
            continue
        bf, af = b.detach().reshape(-1), a.detach().reshape(-1).to(b.device)
        n_diff, worst = 0, 0.0
        for s in range(0, bf.numel(), chunk):
            x, y = bf[s:s + chunk], af[s:s + chunk]
            same = (x == y) | (torch.isnan(x) & torch.isnan(y)) if x.is_floating_point() else (x == y)
            k = int((~same).sum())
            if k:
                n_diff += k
                d = torch.where(same, 0.0, (y.double() - x.double()).abs())
                worst = max(worst, float(torch.nan_to_num(d, nan=float("inf")).max()))
        if n_diff:
            out.append({"input": i, "changed_fraction": n_diff / max(bf.numel(), 1), "max_abs_change": worst})
    return out
