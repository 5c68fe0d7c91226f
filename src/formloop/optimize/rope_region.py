"""Rotate-half RoPE regions, implemented by the rope family (formloop.library.rope; kernel rope_kernel).

The pattern, from the `add` that ends it (operands in either order, factors in either order):

    x * cos + cat((-x2, x1), dim=-1) * sin

x1, x2 the two halves of x's last dim: x.chunk(2, -1) / torch.chunk, x.split(D/2, -1) / torch.split, or the
slices x[..., :D/2] and x[..., D/2:] (bounds as numbers or from x.shape[-1] // 2). cos and sin broadcast to
x's shape without growing it, with a last dim of D ([S, D], [S, 1, D], [1, S, 1, D], ...), and share x's
dtype (fp32, bf16, fp16). The region's nodes are the two products, the negation, the cat, the halves and the
add (the halves and the cat when nothing else reads them). A recognizable attempt that breaks a rule (the cat
or the halves on another dim, the other sign convention, a table that grows x or has a last dim other than
D, mixed dtypes, an intermediate read elsewhere) is refused with its reason (recognize.Refused).
The instance is the family's MILP design for the region's shape (rope.solved_design)."""
from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import fx

from formloop.optimize.capture import Captured
from formloop.optimize.gemm_region import DTYPES, arg_of
from formloop.optimize.recognize import Implementer, Refused, Region, register

ADD = (operator.add, torch.add)
MUL = (operator.mul, torch.mul)
NEG = (operator.neg, torch.neg)
DEPTH = 5   # from a compute node of the pattern to its add: x.shape[-1] // 2 -> slice -> neg -> cat -> mul -> add


def _is(node: Any, fns: tuple, method: str) -> bool:
    return isinstance(node, fx.Node) and ((node.op == "call_function" and node.target in fns)
                                          or (node.op == "call_method" and node.target == method))


def _static_int(v: Any, cap: Captured, nodes: list) -> int | None:
    """An int the graph computes from shapes only (x.shape[-1] // 2, x.size(-1)), or None; the arithmetic
    nodes (floordiv: a compute node to recognize) join `nodes`."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, fx.Node):
        return None
    if v.op == "call_function" and v.target is operator.floordiv:
        a, b = (_static_int(u, cap, nodes) for u in v.args)
        nodes.append(v)
        return a // b if a is not None and b else None
    if v.op == "call_function" and v.target is operator.getitem and isinstance(v.args[1], int):
        src = v.args[0]
        if isinstance(src, fx.Node) and src.op == "call_function" and src.target is getattr \
                and src.args[1] == "shape" and cap.shape(src.args[0]) is not None:
            return cap.shape(src.args[0])[v.args[1]]
    if v.op == "call_method" and v.target == "size" and len(v.args) == 2 and cap.shape(v.args[0]) is not None:
        return cap.shape(v.args[0])[v.args[1]] if isinstance(v.args[1], int) else None
    return None


def _half(node: Any, cap: Captured, nodes: list) -> tuple[fx.Node, int] | None:
    """(x, 0 | 1) when `node` is the first or second half of x's last dim; refused on another dim."""
    if not (isinstance(node, fx.Node) and node.op == "call_function" and node.target is operator.getitem):
        return None
    src, idx = node.args
    if not isinstance(src, fx.Node):
        return None
    if src.op in ("call_method", "call_function") and getattr(src.target, "__name__", src.target) in ("chunk", "split"):
        x = src.args[0]
        shape = cap.shape(x)
        if shape is None or not isinstance(idx, int):
            return None
        name = getattr(src.target, "__name__", src.target)
        dim = arg_of(src, 2, "dim", 0)
        n = arg_of(src, 1, "chunks" if name == "chunk" else "split_size_or_sections",
                   src.kwargs.get("split_size"))
        if not isinstance(dim, int) or dim % len(shape) != len(shape) - 1:
            raise Refused(f"the halves are split along dim {dim}, not the last of {list(shape)}")
        if (name == "chunk" and n != 2) or (name == "split" and (not isinstance(n, int) or 2 * n != shape[-1])) \
                or shape[-1] % 2:
            raise Refused(f"{name}({n}) of a last dim of {shape[-1]} is not two equal halves")
        nodes += [src, node]
        return x, idx
    shape = cap.shape(src)
    if shape is None or not isinstance(idx, tuple) or not idx or not isinstance(idx[-1], slice):
        return None
    lead = idx[:-1]
    if not (lead == (Ellipsis,) or (len(idx) == len(shape) and all(s == slice(None) for s in lead))):
        raise Refused(f"the halves slice {idx}, not x[..., :D/2] and x[..., D/2:]")
    sl, d = idx[-1], shape[-1]
    lo, hi = _static_int(sl.start, cap, nodes) if sl.start is not None else 0, \
        _static_int(sl.stop, cap, nodes) if sl.stop is not None else d
    if sl.step is not None or d % 2 or (lo, hi) not in ((0, d // 2), (d // 2, d)):
        raise Refused(f"the slice {sl} of a last dim of {d} is not a half")
    nodes.append(node)
    return src, 0 if lo == 0 else 1


def _table(t: Any, x: fx.Node, cap: Captured, name: str) -> fx.Node:
    shape, ts = cap.shape(x), cap.shape(t)
    if ts is None:
        raise Refused(f"{name} is not a tensor value of the graph")
    if cap.dtype(t) != cap.dtype(x):
        raise Refused(f"{name} dtype {cap.dtype(t)} differs from x's {cap.dtype(x)}")
    try:
        grown = tuple(torch.broadcast_shapes(shape, ts))
    except RuntimeError:
        grown = None
    if grown != shape or not ts or ts[-1] != shape[-1]:
        raise Refused(f"{name} {list(ts)} does not broadcast to x {list(shape)} with a last dim of {shape[-1]}")
    return t


def match_at(add: fx.Node, cap: Captured) -> Region | None:
    """The rope region ending at `add`, None when it is no rotate-half pattern; Refused when it is one that
    breaks a rule."""
    if not _is(add, ADD, "add") or len(add.args) != 2 or add.kwargs.get("alpha", 1) != 1 \
            or not all(_is(a, MUL, "mul") and len(a.args) == 2 for a in add.args):
        return None
    m1, m2 = add.args
    has_cat = [any(_is(u, (torch.cat,), "cat") for u in m.args) for m in (m1, m2)]
    if has_cat.count(True) != 1:
        return None
    plain, rot = (m2, m1) if has_cat[0] else (m1, m2)
    cat = next(u for u in rot.args if _is(u, (torch.cat,), "cat"))
    sin = next(u for u in rot.args if u is not cat) if rot.args.count(cat) == 1 else None
    parts, dim = arg_of(cat, 0, "tensors"), arg_of(cat, 1, "dim", 0)
    if not isinstance(parts, (list, tuple)) or len(parts) != 2 or sin is None:
        return None
    nd = len(cap.shape(cat) or ())
    if not isinstance(dim, int) or nd == 0 or dim % nd != nd - 1:
        raise Refused(f"the rotation's cat is along dim {dim}, not the last of {nd}")
    neg, first = parts
    if not _is(neg, NEG, "neg"):
        raise Refused("the rotation is not cat((-x2, x1)) (the other sign convention or no negation)")
    nodes: list[fx.Node] = []
    h2, h1 = _half(neg.args[0], cap, nodes), _half(first, cap, nodes)
    if h2 is None or h1 is None:
        return None
    if h2[0] is not h1[0] or (h2[1], h1[1]) != (1, 0):
        raise Refused("the rotation is not cat((-second half, first half)) of one tensor")
    x = h1[0]
    if x not in plain.args or plain.args.count(x) != 1:
        raise Refused("the product with cos does not read the tensor the rotation halves")
    cos = next(u for u in plain.args if u is not x)
    shape = cap.shape(x)
    if cap.dtype(x) not in DTYPES:
        raise Refused(f"x dtype {cap.dtype(x)} is not one of fp32, bf16, fp16")
    _table(cos, x, cap, "cos"), _table(sin, x, cap, "sin")
    if cap.shape(add) != shape:
        raise Refused(f"the result {list(cap.shape(add) or ())} is not x's shape {list(shape)}")
    inner = {plain, rot, neg, cat}
    for n in inner:
        if any(u not in inner and u is not add for u in n.users):
            raise Refused(f"{n.name} is also read outside the rotation")
    order = {n: i for i, n in enumerate(cap.gm.graph.nodes)}
    members = sorted(set(nodes) | inner | {add}, key=order.__getitem__)
    d = shape[-1]
    q = math.prod(cap.shape(cos)) // d if cap.shape(cos) == cap.shape(sin) else math.prod(shape) // d
    return Region("rope", "rope", members, {"x": x, "cos": cos, "sin": sin, "rows": math.prod(shape) // d, "d": d,
                                            "q": max(1, q), "dtype": DTYPES[cap.dtype(x)]})


def match_rope(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    """The rope region this compute node belongs to: the adds within DEPTH uses of it, tried in graph order."""
    seen, frontier, adds = {node}, [node], []
    for _ in range(DEPTH):
        frontier = [u for n in frontier for u in n.users if u not in seen and not seen.add(u)]
        adds += [u for u in frontier if _is(u, ADD, "add")]
    for add in ([node] if _is(node, ADD, "add") else []) + adds:
        region = match_at(add, cap)
        if region is not None and node in region.nodes and not taken.intersection(region.nodes):
            return region
    return None


def choose_rope(region: Region, *, tier: str, attempt: int = 0, **_: Any) -> dict[str, Any]:
    from formloop.library.rope import pairs_block, pow2, solved_design

    p = region.params
    cfg = solved_design(p["rows"], p["d"], p["q"], p["dtype"], "h200")
    solver = "milp (HiGHS)"
    if tier != "gpu":   # the interpreter runs programs one by one: a few tall tiles (correctness only)
        cfg = {**cfg, "RP": max(1, min(pow2(p["rows"]), 4096 // pairs_block(p["d"]), 64)), "W": 4}
        solver = "interpreter tile"
        region.notes.append(f"interpreter tier: tile {cfg} instead of the MILP's (correctness only)")
    return {"config": cfg, "solver": solver, "template": "rope"}


def emit_rope(region: Region, design: dict[str, Any], graph: fx.Graph) -> fx.Node:
    from formloop.library.rope_kernel import rope_apply

    p = region.params
    with graph.inserting_before(region.output):
        call = graph.call_function(rope_apply, (p["x"], p["cos"], p["sin"]), {"config": design["config"]})
    region.output.replace_all_uses_with(call)
    for n in reversed(region.nodes):
        if not n.users:
            graph.erase_node(n)
    return call


ROPE = register(Implementer("rope", "rope", match_rope, choose_rope, emit_rope,
                            ("from formloop.library.rope_kernel import rope_apply",)), before="elementwise")
