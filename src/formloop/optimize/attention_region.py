"""The attention region: F.scaled_dot_product_attention (is_causal, scale, enable_gqa, or K/V widened by
repeat_interleave on the head axis), and the same computation written out,
softmax((q @ kᵀ) · scale [masked]) @ v, with the scale a number or a size-derived scalar
(1 / math.sqrt(k.size(-1))) and the mask a masked_fill(cond, -inf) or an added 0/-inf tensor.

A mask is accepted only after it is evaluated: its subgraph (buffers, torch.full/ones/tril/triu,
comparisons, slices by traced sizes) is run on the CPU with the problem's own buffers (the model is
built on the CPU once per capture, at the captured sizes) and the allowed set must be exactly
causal (tril, top-left) or everything; anything else stays PyTorch, with the reason. Dropout is
accepted only with p = 0. For fp32 q/K/V the kernel is formloop.library.attention_fp32_kernel (fp32
storage, dot precision by error bound, instance by the prefill MILP rebound to fp32); it is not the
proved bf16 prefill/decode program, which the region notes say. For bf16 or fp16 q/K/V (all one type)
the region is the 16-bit implementer's (formloop.optimize.attention16_region): the proved prefill
program where it applies, else the same flash kernel at 16-bit storage."""
from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import fx
from torch.nn import functional as F

from formloop.optimize.capture import Captured
from formloop.optimize.gemm_region import DTYPES
from formloop.optimize.recognize import Implementer, Region, is_layout, register
from formloop.sol.problem import call_inputs

MATMULS = {torch.matmul, operator.matmul}
STATIC_FUNCS = {"full", "ones", "zeros", "triu", "tril", "eq", "ne", "lt", "le", "gt", "ge", "getitem", "sqrt",
                "truediv", "mul", "floordiv", "logical_not", "invert", "not_", "neg", "sub", "add", "pow", "arange",
                "ones_like", "zeros_like", "full_like", "masked_fill", "float", "bool", "to", "view", "reshape",
                "unsqueeze", "expand", "t", "transpose", "contiguous", "rsqrt", "type_as", "getattr"}
MAX_STATIC = 1 << 26   # elements a mask evaluation may build
NAME, NAME_16BIT = "attention-fp32", "attention-16bit"


class NotStatic(Exception):
    """The value depends on the inputs (or on something the evaluator does not run)."""


def _is_sdpa(n: Any) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and n.target is F.scaled_dot_product_attention


def _is_matmul(n: Any) -> bool:
    return isinstance(n, fx.Node) and ((n.op == "call_function" and n.target in MATMULS)
                                       or (n.op == "call_method" and n.target == "matmul"))


def _name(n: fx.Node) -> str:
    return n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")


def _arg(n: fx.Node, i: int, key: str, default=None):
    return n.args[i] if len(n.args) > i else n.kwargs.get(key, default)


def _cpu_model(cap: Captured) -> torch.nn.Module:
    model = cap.__dict__.get("_attention_cpu_model")
    if model is None:
        with torch.device("cpu"), torch.no_grad():
            model = cap.problem.Model(*call_inputs(cap.problem, "get_init_inputs"))
        cap.__dict__["_attention_cpu_model"] = model
    return model


def static_value(x: Any, cap: Captured, seen: set) -> Any:
    """The concrete value of `x` when it does not depend on the inputs; raises NotStatic otherwise.
    Nodes evaluated are added to `seen`."""
    if isinstance(x, (list, tuple)):
        return type(x)(static_value(a, cap, seen) for a in x)
    if isinstance(x, slice):
        return slice(*(static_value(a, cap, seen) for a in (x.start, x.stop, x.step)))
    if isinstance(x, dict):
        return {k: static_value(a, cap, seen) for k, a in x.items()}
    if not isinstance(x, fx.Node):
        return x
    if x.op == "get_attr":
        obj = _cpu_model(cap)
        for part in x.target.split("."):
            obj = getattr(obj, part)
        return obj.detach() if isinstance(obj, torch.Tensor) else obj
    if x.op == "call_method" and x.target == "size":
        shape = cap.shape(x.args[0])
        if shape is None:
            raise NotStatic("size of a value without a shape")
        dim = _arg(x, 1, "dim")
        return torch.Size(shape) if dim is None else shape[static_value(dim, cap, seen)]
    if x.op == "call_function" and x.target is getattr and x.args[1] in ("shape", "device", "dtype"):
        if x.args[1] == "device":
            return torch.device("cpu")
        if x.args[1] == "dtype":
            return cap.dtype(x.args[0])
        return torch.Size(cap.shape(x.args[0]))
    if x.op not in ("call_function", "call_method") or _name(x) not in STATIC_FUNCS:
        raise NotStatic(f"{x.op} {_name(x)}")
    args = static_value(list(x.args), cap, seen)
    kwargs = {k: (torch.device("cpu") if k == "device" else static_value(v, cap, seen)) for k, v in x.kwargs.items()}
    size = [a for a in args if isinstance(a, (tuple, list, torch.Size))]
    if _name(x) in ("full", "ones", "zeros") and size and math.prod(int(s) for s in size[0]) > MAX_STATIC:
        raise NotStatic("mask too large to evaluate")
    out = getattr(args[0], x.target)(*args[1:], **kwargs) if x.op == "call_method" else x.target(*args, **kwargs)
    seen.add(x)
    return out


def mask_kind(allowed: torch.Tensor, lq: int, lk: int) -> str:
    """'causal' (exactly tril, top-left), 'none' (all allowed) or the reason it is neither."""
    allowed = torch.broadcast_to(allowed, (*allowed.shape[:-2], lq, lk)).reshape(-1, lq, lk)
    if not bool((allowed == allowed[:1]).all()):
        return "the mask differs between heads or sequences"
    a = allowed[0]
    if bool(a.all()):
        return "none"
    if torch.equal(a, torch.ones(lq, lk, dtype=torch.bool).tril()):
        return "causal"
    return "the mask is neither causal (tril) nor empty"


def _scalar(x: Any, cap: Captured, seen: set) -> float:
    v = static_value(x, cap, seen)
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise NotStatic("not a scalar")
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise NotStatic("not a number")
    return float(v)


def _gqa_source(kv: Any) -> tuple[Any, list[fx.Node]]:
    """K or V before a head-axis repeat_interleave (the node dropped into the region), or itself."""
    if isinstance(kv, fx.Node) and _name(kv) == "repeat_interleave" and len(kv.users) == 1:
        dim = _arg(kv, 2, "dim")
        if isinstance(_arg(kv, 1, "repeats"), int) and dim in (1, -3):
            return kv.args[0], [kv]
    return kv, []


def _region(cap: Captured, nodes: list[fx.Node], q, k, v, causal: bool, scale, notes: list[str]) -> Region | None:
    sq, sk, sv = cap.shape(q), cap.shape(k), cap.shape(v)
    if any(s is None or len(s) != 4 for s in (sq, sk, sv)):
        return None
    if sk != sv or sq[0] != sk[0] or sq[3] != sk[3] or sq[1] % sk[1]:
        return None
    dtype = DTYPES.get(cap.dtype(q))
    if dtype is None or any(cap.dtype(x) != cap.dtype(q) for x in (k, v)):
        return None
    order = {n: i for i, n in enumerate(cap.gm.graph.nodes)}
    nodes = sorted(set(nodes), key=order.__getitem__)
    inside = set(nodes)
    if any(u not in inside for n in nodes[:-1] for u in n.users):
        return None          # a replaced value is read outside the region
    b, hq, lq, d = sq
    return Region("attention", NAME if dtype == "fp32" else NAME_16BIT, nodes,
                  {"q": q, "k": k, "v": v, "causal": bool(causal), "scale": scale, "tensors": {},
                   "dims": [b, hq, sk[1], lq, sk[2], d], "dtype": dtype,
                   "shape_text": f"B={b} Hq={hq} Hkv={sk[1]} Lq={lq} Lk={sk[2]} D={d}"}, notes)


def _match_sdpa(n: fx.Node, cap: Captured) -> Region | None:
    q, k, v = (_arg(n, i, key) for i, key in enumerate(("query", "key", "value")))
    if _arg(n, 3, "attn_mask") is not None or _arg(n, 4, "dropout_p", 0.0) not in (0, 0.0):
        return None
    causal, scale = bool(_arg(n, 5, "is_causal", False)), _arg(n, 6, "scale")
    if scale is not None and not isinstance(scale, (int, float)):
        return None
    k, extra_k = _gqa_source(k)
    v, extra_v = _gqa_source(v)
    return _region(cap, [*extra_k, *extra_v, n], q, k, v, causal, scale, [])


def _transposed_source(x: Any, cap: Captured) -> Any:
    if not isinstance(x, fx.Node) or _name(x) not in ("transpose",) or cap.shape(x) is None:
        return None
    nd = len(cap.shape(x))
    dims = {d % nd for d in x.args[1:3]} if len(x.args) >= 3 else set()
    return x.args[0] if dims == {nd - 1, nd - 2} else None


def _match_manual(m1: fx.Node, cap: Captured) -> Region | None:
    """matmul(q, kᵀ) -> [scale | mask]* -> softmax(dim=-1) -> matmul(·, v)."""
    k = _transposed_source(m1.args[1], cap) if len(m1.args) == 2 else None
    shape = cap.shape(m1)
    if k is None or shape is None or len(shape) != 4:
        return None
    q, lq, lk = m1.args[0], shape[2], shape[3]
    nodes, cur, scale, kind, notes = [m1], m1, 1.0, "none", []
    side: set = set()
    while len(cur.users) == 1:
        u = next(iter(cur.users))
        f = _name(u)
        try:
            if f in ("mul", "truediv") and u.op == "call_function" and len(u.args) == 2 and cur in u.args:
                other = u.args[1] if u.args[0] is cur else u.args[0]
                val = _scalar(other, cap, side)
                if f == "truediv" and (u.args[0] is not cur or val == 0):
                    return None
                scale = scale * val if f == "mul" else scale / val
            elif f == "masked_fill" and u.args[0] is cur and kind == "none":
                fill = _arg(u, 2, "value")
                if fill != float("-inf"):
                    return None
                allowed = ~static_value(_arg(u, 1, "mask"), cap, side).bool()
                kind = mask_kind(allowed, lq, lk)
            elif f == "add" and u.op == "call_function" and len(u.args) == 2 and kind == "none":
                other = u.args[1] if u.args[0] is cur else u.args[0]
                m = static_value(other, cap, side)
                if not isinstance(m, torch.Tensor) or not bool(((m == 0) | (m == float("-inf"))).all()):
                    return None
                kind = mask_kind(m == 0, lq, lk)
            elif f == "softmax" and (_arg(u, 1, "dim") in (-1, 3)) and _arg(u, 2, "dtype") is None:
                nodes.append(u)
                m2 = next(iter(u.users)) if len(u.users) == 1 else None
                if _inactive_dropout(m2, cap):
                    nodes.append(m2)
                    m2 = next(iter(m2.users)) if len(m2.users) == 1 else None
                if not (_is_matmul(m2) and m2.args[0] is nodes[-1]):
                    return None
                if kind not in ("none", "causal"):
                    notes.append(kind)
                    return None
                if scale <= 0:
                    return None
                extra = _side_nodes(side, {*nodes, m2})
                return _region(cap, [*nodes, *extra, m2], q, k, m2.args[1], kind == "causal", scale, notes)
            else:
                return None
        except NotStatic:
            return None
        nodes.append(u)
        cur = u
    return None


def _inactive_dropout(n: Any, cap: Captured) -> bool:
    """F.dropout / nn.Dropout with p = 0 (an identity in training and eval alike)."""
    if not isinstance(n, fx.Node):
        return False
    if n.op == "call_module":
        mod = cap.gm.get_submodule(n.target)
        return isinstance(mod, torch.nn.Dropout) and mod.p == 0
    return n.op == "call_function" and n.target is F.dropout and _arg(n, 1, "p", 0.5) in (0, 0.0)


def _side_nodes(side: set, region: set) -> list[fx.Node]:
    """The compute nodes of the scale and mask subgraphs read only inside the region (others stay)."""
    keep = {s for s in side if not is_layout(s)}
    while True:
        drop = {s for s in keep if any(u not in keep and u not in region for u in s.users)}
        if not drop:
            return list(keep)
        keep -= drop


def _consumers(n: fx.Node, depth: int = 6) -> list[fx.Node]:
    """The nodes reached from `n` through single-user chains (a mask builder's way to its scores)."""
    out, cur = [], n
    for _ in range(depth):
        if len(cur.users) != 1:
            break
        cur = next(iter(cur.users))
        out.append(cur)
    return out


def match(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    if _is_sdpa(node):
        return _match_sdpa(node, cap)
    if _is_matmul(node):
        return _match_manual(node, cap)
    if node.op in ("call_function", "call_method"):   # a mask or scale builder, or a GQA repeat, before its anchor
        for c in _consumers(node):
            anchor = c if _is_sdpa(c) else None
            if anchor is None and _name(c) in ("masked_fill", "add", "mul", "truediv"):
                a = c.args[0] if isinstance(c.args[0], fx.Node) else None
                while a is not None and not _is_matmul(a) and _name(a) in ("mul", "truediv", "masked_fill", "add") \
                        and len(a.users) == 1:
                    a = a.args[0] if isinstance(a.args[0], fx.Node) else None
                anchor = a if _is_matmul(a) else None
            if anchor is not None:
                region = _match_sdpa(anchor, cap) if _is_sdpa(anchor) else _match_manual(anchor, cap)
                if region is not None and node in region.nodes and not (set(region.nodes) & taken):
                    return region
                return None
    return None


def choose(region: Region, *, tier: str, attempt: int = 0, fp32_operands: str = "tf32", **_: Any) -> dict[str, Any]:
    from formloop.library.attention_fp32 import INTERPRETER, choose_config, precision_for

    p = region.params
    b, hq, hkv, lq, lk, d = p["dims"]
    precision, preds = precision_for(floor="tf32x3" if fp32_operands == "fp32" else None)
    if tier == "gpu":
        inst = choose_config(b, hq, hkv, lq, lk, d, p["causal"], precision, attempt=attempt)
    else:
        inst = {"config": dict(INTERPRETER), "source": "interpreter tiles (small, to exercise tails)"}
    region.notes.append(f"fp32 flash-attention kernel (library/attention_fp32_kernel.py), not the proved bf16 "
                        f"prefill/decode program; instance: {inst['source']}")
    region.notes.append(f"dot precision {precision}: predicted worst error {preds[precision]:.2g} (model, unit-scale "
                        f"inputs) vs KernelBench fp32 tolerance 1e-4; tf32 predicted {preds['tf32']:.2g}")
    design = {"config": inst["config"], "precision": precision, "causal": int(p["causal"]), "source": inst["source"],
              "tensors": []}   # plain numbers and strings: the ModelNew writes the designs as a literal
    if p["scale"] is not None:
        design["scale"] = float(p["scale"])
    if inst.get("predicted_us") is not None:
        design["predicted_us"] = float(inst["predicted_us"])
    return design


def replace_with_call(region: Region, graph: fx.Graph, fn, kwargs: dict[str, Any]) -> fx.Node:
    """The region's nodes replaced by one call fn(q, k, v, **kwargs) (both attention implementers)."""
    p = region.params
    with graph.inserting_before(region.output):
        call = graph.call_function(fn, (p["q"], p["k"], p["v"]), kwargs)
    return region.swap_in(call, graph)


def emit(region: Region, design: dict[str, Any], graph: fx.Graph) -> fx.Node:
    from formloop.library.attention_fp32 import attention

    return replace_with_call(region, graph, attention, {"causal": bool(design["causal"]), "scale": design.get("scale"),
                                                        "config": design["config"], "precision": design["precision"]})


def match_for(name: str):
    """`match` narrowed to the regions of implementer `name` (fp32 or 16-bit storage)."""
    def only(node: fx.Node, cap: Captured, taken: set) -> Region | None:
        region = match(node, cap, taken)
        return region if region is not None and region.implementer == name else None
    return only


ATTENTION = register(Implementer(NAME, "attention", match_for(NAME), choose, emit,
                                 ("from formloop.library.attention_fp32 import attention",)))
