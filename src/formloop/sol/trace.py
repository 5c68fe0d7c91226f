"""The counting dispatch mode: every aten operator the reference runs is priced by `formloop.sol.rules`,
works equally on real and on fake tensors (shapes only), and keeps what the minimum-bytes count needs.

* FLOPs: each operator becomes an `Event`. Elements a kernel could produce from indices alone (the
  masked part of causal attention, see `formloop.sol.structure`) are not charged: an operator whose
  output is partly known pays for the unknown part only, a matmul with a triangular operand pays
  only for its nonzero part, and when a mask lands on a matmul's output the matmul (and the scaling
  between them) is pruned back to the kept part.
* bytes: the reads and in-place writes that touch the *leaf* storages (inputs, weights, buffers);
  `formloop.sol.auto` adds the outputs.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import torch
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from formloop.sol.rules import RULES, SDPA_OPS, UNANNOTATED_WRITES, Call, attention_pairs
from formloop.sol.structure import Pattern, Region, combine, select

MATMUL_A = {"mm": ("self", "mat2"), "bmm": ("self", "mat2"), "addmm": ("mat1", "mat2"),
            "baddbmm": ("batch1", "batch2")}
KEEPS_LAST_TWO = frozenset("""view _unsafe_view reshape _reshape_alias expand expand_as unsqueeze squeeze alias detach
clone contiguous lift_fresh view_as copy""".split())
CONSTANT_FILL = {"zeros": 0.0, "zeros_like": 0.0, "new_zeros": 0.0, "zero": 0.0, "ones": 1.0, "ones_like": 1.0,
                 "new_ones": 1.0}


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def distinct_elements(t: torch.Tensor) -> int:
    """Elements a view really holds: broadcast (stride-0) dimensions repeat one element."""
    return math.prod(s for s, st in zip(t.shape, t.stride()) if st != 0) if t.dim() else 1


def _view_key(t: torch.Tensor) -> tuple:
    return t.storage_offset(), tuple(t.shape), tuple(t.stride())


def _last_two(t) -> tuple:
    return tuple(t.shape[-2:]) if isinstance(t, torch.Tensor) and t.dim() >= 2 else ()


def op_name(func) -> str:
    name = func.overloadpacket.__name__
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


@dataclass
class Event:
    name: str
    matmul: int
    vector: int
    traffic_bytes: int
    source: int | None = None            # the event that produced the data input a mask may prune through
    kind: str = "other"                  # matmul | chain (a view or a scalar pointwise op) | other
    pruned: bool = False


SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


class FunctionLevel(TorchFunctionMode):
    """Counts `F.scaled_dot_product_attention` as one operator at the torch-function level, so the
    count is the same whichever backend (fused, or the math decomposition) runs underneath."""

    def __init__(self, counter: CountingMode):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention or not self.counter.counting:
            return func(*args, **kwargs)
        self.counter.counting = False
        try:
            out = func(*args, **kwargs)
        finally:
            self.counter.counting = True
        self.counter.count_attention(args, kwargs, out)
        return out


class CountingMode(TorchDispatchMode):
    """Counts FLOPs by `RULES`, lists operators without a rule, records leaf reads and writes.
    `counting=False` while the model is built: patterns of buffers are kept, nothing is charged."""

    def __init__(self, leaves=()):
        super().__init__()
        self.counting = True
        self.events: list[Event] = []
        self.uncounted: Counter = Counter()
        self.notes: list[str] = []
        self.patterns: dict[int, Pattern] = {}
        self.producer: dict[int, int] = {}
        self._alive: list[torch.Tensor] = []      # keeps ids in `patterns`/`producer` unique
        self.leaf_keys = {storage_key(t) for t in leaves if isinstance(t, torch.Tensor)}
        self.reads: dict[int, dict[tuple, int]] = {}
        self.writes: dict[int, dict[tuple, int]] = {}

    # --- totals -----------------------------------------------------------------------------------
    @property
    def matmul(self) -> int:
        return sum(e.matmul for e in self.events)

    @property
    def vector(self) -> int:
        return sum(e.vector for e in self.events)

    def by_op(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for e in self.events:
            row = out.setdefault(e.name, {"calls": 0, "flops": 0, "unfused_bytes": 0})
            row["calls"] += 1
            row["flops"] += e.matmul + e.vector
            row["unfused_bytes"] += e.traffic_bytes
        return out

    def pattern(self, value) -> Pattern | None:
        if isinstance(value, torch.Tensor):
            return self.patterns.get(id(value))
        if isinstance(value, (bool, int, float)):
            return Pattern.constant(value)
        return None

    def forget(self, tensors) -> None:
        """Parameters are data even when initialized to a constant: drop their patterns."""
        for t in tensors:
            self.patterns.pop(id(t), None)

    # --- dispatch ---------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace == "prim":
            return out
        schema = func._schema.arguments
        bound = dict(zip((a.name for a in schema), args))
        bound.update(kwargs)
        outs = tuple(o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor))
        call = Call(op_name(func), func._overloadname, bound, outs)
        pattern = self._propagate(call)
        # found before the outputs are remembered: an in-place mask overwrites its input's entries
        prune = self._prune_targets(call, pattern) if self.counting else []
        self._remember(outs, pattern)
        if not self.counting:
            return out
        rule = RULES.get(call.name)
        written = {a.name for a in schema if a.alias_info is not None and a.alias_info.is_write}
        if call.args.get("training"):
            written.update(UNANNOTATED_WRITES.get(call.name, ()))
        self._record_leaf_access(call, written, "io" if rule is None else rule.traffic)
        if rule is None:     # its data still counts as read; its FLOPs are unknown, and said so
            self.uncounted[func.name()] += 1
            return out
        mm, vec = self._flops(call, rule)
        if pattern is not None and outs and outs[0].dim() >= 1:
            vec = int(vec * pattern.unknown_fraction(*_rows_cols(outs[0])))
        self.events.append(Event(call.name, mm, vec, self._traffic(call, rule.traffic), *self._chain(call)))
        for o in outs:
            self.producer[id(o)] = len(self.events) - 1
        for index, fraction in prune:
            self._prune(index, fraction)
        return out

    def _remember(self, outs: tuple, pattern: Pattern | None) -> None:
        self._alive.extend(outs)
        for i, t in enumerate(outs):
            if pattern is None or i:
                self.patterns.pop(id(t), None)
            else:
                self.patterns[id(t)] = pattern

    # --- FLOPs --------------------------------------------------------------------------------------
    def _flops(self, c: Call, rule) -> tuple[int, int]:
        if c.name in SDPA_OPS:
            return self._attention(c)
        mm, vec = rule.flops(c)
        if c.name in MATMUL_A:
            for key in MATMUL_A[c.name]:
                p = self.pattern(c.args.get(key))
                if p is not None:           # a zero triangle of an operand needs no multiply-adds
                    live = 1.0 - p.share(*_rows_cols(c.args[key]), lambda v: v == 0)
                    mm = int(mm * live)
                    break
        return mm, vec

    def _attention(self, c: Call) -> tuple[int, int]:
        mask = c.args.get("attn_mask", c.args.get("attn_bias"))
        live = None
        if isinstance(mask, torch.Tensor):
            p = self.pattern(mask)
            if p is None:
                self.notes.append(f"{c.name}: attention mask with data-dependent content, counted dense "
                                  "(the floor may overstate the minimum)")
            else:
                def keep(v):
                    return v is None or (bool(v) if mask.dtype == torch.bool else v != -math.inf)
                live = lambda sq, skv: round(p.share(sq, skv, keep) * sq * skv)  # noqa: E731
        heads, pairs, d, dv = attention_pairs(c, live)
        return 2 * heads * pairs * (d + dv), 0

    def _chain(self, c: Call) -> tuple[int | None, str]:
        """The producer of the data input a later mask may prune back through, and the event's kind."""
        if c.name in MATMUL_A:
            return None, "matmul"
        tensors = [v for v in c.args.values() if isinstance(v, torch.Tensor)]
        if not c.outs or not tensors:
            return None, "other"
        data = tensors[0]
        scalars_only = all(t is data or t.dim() == 0 for t in tensors)
        if scalars_only and _last_two(data) == _last_two(c.outs[0]) and (
                c.name in KEEPS_LAST_TWO or c.name in ("mul", "div", "add", "sub")):
            return self.producer.get(id(data)), "chain"
        return None, "other"

    def _prune_targets(self, c: Call, pattern: Pattern | None) -> list[tuple[int, float]]:
        """A mask made part of this output known: the data feeding it needed work only on the rest."""
        if pattern is None or pattern.region is None or not c.outs:
            return []
        found = []
        for key in ("self", "other", "input"):
            t = c.args.get(key)
            if isinstance(t, torch.Tensor) and self.pattern(t) is None and _last_two(t) == _last_two(c.outs[0]) \
                    and id(t) in self.producer:
                found.append((self.producer[id(t)], pattern.unknown_fraction(*_rows_cols(t))))
        return found

    def _prune(self, index: int | None, fraction: float) -> None:
        while index is not None:
            e = self.events[index]
            if e.pruned:
                return
            if e.kind == "matmul":
                e.matmul, e.vector, e.pruned = int(e.matmul * fraction), int(e.vector * fraction), True
                self.notes.append(f"{e.name}: output masked by a triangular pattern, counted on its kept "
                                  f"{fraction:.4f} (causal)")
                return
            if e.kind != "chain" or e.source is None:
                return
            e.vector, e.pruned = int(e.vector * fraction), True
            index = e.source

    # --- bytes --------------------------------------------------------------------------------------
    def _record_leaf_access(self, c: Call, written: set[str], traffic: str) -> None:
        if traffic in ("none", "write"):
            return
        for name, value in c.args.items():
            for t in value if isinstance(value, (list, tuple)) else [value]:
                if not isinstance(t, torch.Tensor) or storage_key(t) not in self.leaf_keys:
                    continue
                elems = distinct_elements(t)
                if traffic == "gather" and name in ("weight", "self"):
                    elems = min(elems, c.out_numel)
                self.reads.setdefault(storage_key(t), {})[_view_key(t)] = elems * t.element_size()
                if name in written:
                    self.writes.setdefault(storage_key(t), {})[_view_key(t)] = elems * t.element_size()

    def count_attention(self, args: tuple, kwargs: dict, out) -> None:
        """F.scaled_dot_product_attention as one operator (matmul FLOPs of the kept pairs), whichever
        backend it would dispatch to: fused kernels on a GPU, the decomposed math path on meta tensors."""
        bound = dict(zip(SDPA_ARGS, args))
        bound.update(kwargs)
        outs = tuple(o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor))
        call = Call("scaled_dot_product_attention", "", bound, outs)
        self._record_leaf_access(call, set(), "io")
        self.events.append(Event(call.name, *self._attention(call), self._traffic(call, "io")))
        for o in outs:
            self._alive.append(o)
            self.producer[id(o)] = len(self.events) - 1

    @staticmethod
    def _traffic(c: Call, traffic: str) -> int:
        if traffic == "none":
            return 0
        written = sum(distinct_elements(o) * o.element_size() for o in c.outs)
        if traffic == "write":
            return written
        seen, read = set(), 0
        for value in c.args.values():
            for t in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(t, torch.Tensor) and (storage_key(t), _view_key(t)) not in seen:
                    seen.add((storage_key(t), _view_key(t)))
                    n = distinct_elements(t)
                    read += (min(n, c.out_numel) if traffic == "gather" and t.is_floating_point() else n) \
                        * t.element_size()
        return read + written

    # --- patterns -----------------------------------------------------------------------------------
    def _propagate(self, c: Call) -> Pattern | None:
        n, a = c.name, c.args
        P = self.pattern
        first = next((v for v in a.values() if isinstance(v, torch.Tensor)), None)
        out = c.outs[0] if c.outs else None
        if n in CONSTANT_FILL:
            return Pattern.constant(CONSTANT_FILL[n])
        if n in ("full", "full_like", "new_full", "fill", "scalar_tensor"):
            return Pattern.constant(a.get("fill_value", a.get("value", a.get("s"))))
        if n in ("tril", "triu"):
            x = P(a["self"])
            inside = x.inside if x is not None and x.region is None else None
            return Pattern(Region(n == "tril", int(a.get("diagonal") or 0)), inside, 0.0)
        x = P(first)
        if n in KEEPS_LAST_TWO:
            return x if x is not None and (x.region is None or _last_two(first) == _last_two(out)) else None
        if n == "_to_copy":
            return None if x is None else x.cast(a.get("dtype") == torch.bool)
        if x is not None and n in ("slice", "select", "transpose", "permute", "t"):
            return _layout(n, a, first, x)
        if n in ("eq", "ne", "lt", "le", "gt", "ge") and x is not None:
            other = P(a.get("other"))
            if other is None or other.region is not None or other.inside is None:
                return None
            test = {"eq": float.__eq__, "ne": float.__ne__, "lt": float.__lt__, "le": float.__le__,
                    "gt": float.__gt__, "ge": float.__ge__}[n]
            return x.map(lambda v: float(test(v, other.inside)))
        if n in ("logical_not", "bitwise_not") and x is not None:
            return x.map(lambda v: float(not v))
        if n in ("add", "sub", "mul", "div"):
            other = P(a.get("other"))
            alpha = a.get("alpha")
            if other is not None and alpha not in (None, 1):
                other = other.map(lambda v: v * alpha)
            return combine(x, other, n)
        if n == "masked_fill":
            return select(P(a["mask"]), P(a["value"]), x)
        if n == "where":
            return select(P(a["condition"]), P(a.get("self")), P(a.get("other")))
        if x is None:
            return None
        if n in ("_softmax", "_log_softmax") and a.get("dim") in (-1, first.dim() - 1):
            dead = 0.0 if n == "_softmax" else -math.inf
            return x.map(lambda v: dead if v == -math.inf else None)
        if n == "exp":
            return x.map(math.exp)
        if n == "relu":
            return x.map(lambda v: max(v, 0.0))
        if n in ("native_dropout", "neg"):
            return x.map(lambda v: 0.0 if v == 0 else (-v if n == "neg" else None))
        return None


def _rows_cols(t: torch.Tensor) -> tuple[int, int]:
    if t.dim() >= 2:
        return t.shape[-2], t.shape[-1]
    return 1, (t.shape[-1] if t.dim() else 1)


def _layout(n: str, a, x_t: torch.Tensor, x: Pattern) -> Pattern | None:
    """Slices, selects and transposes move the triangle with the last two dimensions, or keep it."""
    if x.region is None:
        return x
    nd = x_t.dim()
    if n == "t":
        return Pattern(x.region.transposed(), x.inside, x.outside)
    if n in ("slice", "select"):
        dim = a.get("dim", 0) % nd
        if dim < nd - 2:
            return x
        if n == "select" or (a.get("step") or 1) != 1:
            return None
        start = a.get("start") or 0
        start = start + x_t.shape[dim] if start < 0 else start
        region = x.region.shifted(rows=start) if dim == nd - 2 else x.region.shifted(cols=start)
        return Pattern(region, x.inside, x.outside)
    if n == "transpose":
        dims = sorted(d % nd for d in (a["dim0"], a["dim1"]))
        if dims[1] < nd - 2:
            return x
        return Pattern(x.region.transposed(), x.inside, x.outside) if dims == [nd - 2, nd - 1] else None
    perm = [d % nd for d in a["dims"]]
    if perm[-2:] == [nd - 2, nd - 1]:
        return x
    return Pattern(x.region.transposed(), x.inside, x.outside) if perm[-2:] == [nd - 1, nd - 2] else None
