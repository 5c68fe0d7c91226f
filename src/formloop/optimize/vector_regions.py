"""Row-wise and elementwise regions, implemented by the vector families (formloop.library.rowwise,
formloop.library.elementwise; docs/vector.md).

* row-wise: softmax / log-softmax over the last dimension, LayerNorm and RMSNorm over the last
  dimension with their affine weights, and last-dimension reductions (sum, mean, amax, argmax,
  logsumexp; keepdim off). The row length is the last dimension, the rows everything before it.
* elementwise: a chain of the gemm-epilogue vocabulary (activations, scale, clamp, bias, tile add
  and mul) starting from a graph value, extended while each value has one user.

The instance is the family's MILP design for the region's shape (solved_design)."""
from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import fx, nn
from torch.nn import functional as F

from formloop.hw.chips import get_chip
from formloop.optimize.capture import Captured
from formloop.optimize.gemm_region import DTYPES, arg_of, chain_op, fn_of
from formloop.optimize.recognize import Implementer, Region, register

SOFTMAX = {F.softmax: "softmax", torch.softmax: "softmax", F.log_softmax: "log-softmax",
           torch.log_softmax: "log-softmax"}
REDUCE_FN = {torch.sum: "sum", torch.mean: "mean", torch.amax: "max", torch.argmax: "argmax",
             torch.logsumexp: "logsumexp"}
REDUCE_METHOD = {"sum": "sum", "mean": "mean", "amax": "max", "argmax": "argmax", "logsumexp": "logsumexp",
                 "softmax": "softmax", "log_softmax": "log-softmax"}
ROW_CHAIN = ("softmax", "logsumexp")   # row ops of the gemm vocabulary: rowwise's, not elementwise's


def _last(dim: Any, nd: int) -> bool:
    dim = dim[0] if isinstance(dim, (list, tuple)) and len(dim) == 1 else dim
    return isinstance(dim, int) and nd > 0 and dim % nd == nd - 1


def _last_extent(ns: Any, x: fx.Node, shape: tuple) -> bool:
    """normalized_shape is (C,) for x's last extent C: the number, or x.shape[-1] / x.size(-1) traced."""
    if not isinstance(ns, (list, tuple)) or len(ns) != 1:
        return False
    d = ns[0]
    if isinstance(d, int):
        return d == shape[-1]
    if not (isinstance(d, fx.Node) and d.op == "call_function" and d.target is operator.getitem):
        return False
    src, idx = d.args
    if not isinstance(idx, int) or idx % len(shape) != len(shape) - 1 or not isinstance(src, fx.Node):
        return False
    shape_of = src.op == "call_function" and src.target is getattr and src.args == (x, "shape")
    return shape_of or (src.op == "call_method" and src.target == "size" and src.args == (x,))


def _row(node: fx.Node, cap: Captured) -> dict[str, Any] | None:
    if not node.args or not isinstance(node.args[0], fx.Node):
        return None
    x = node.args[0]
    shape = cap.shape(x)
    if shape is None or cap.dtype(x) not in DTYPES:
        return None
    nd = len(shape)
    f = fn_of(node, cap)
    if node.op == "call_module":
        mod = cap.gm.get_submodule(node.target)
        if isinstance(mod, nn.Softmax) and mod.dim is not None and _last(mod.dim, nd):
            return {"op": "softmax", "x": x}
        if isinstance(mod, nn.LayerNorm) and tuple(mod.normalized_shape) == shape[-1:] and mod.weight is not None \
                and mod.bias is not None:
            return {"op": "layernorm", "x": x, "weight": f"{node.target}.weight", "bias": f"{node.target}.bias",
                    "eps": float(mod.eps)}
        if hasattr(nn, "RMSNorm") and isinstance(mod, nn.RMSNorm) and tuple(mod.normalized_shape) == shape[-1:] \
                and mod.weight is not None:
            eps = mod.eps if mod.eps is not None else torch.finfo(cap.dtype(x)).eps
            return {"op": "rmsnorm", "x": x, "weight": f"{node.target}.weight", "eps": float(eps)}
        return None
    name = SOFTMAX.get(f) if node.op == "call_function" else None
    name = name or (REDUCE_METHOD.get(f) if node.op == "call_method" and isinstance(f, str) else None)
    name = name or (REDUCE_FN.get(f) if node.op == "call_function" else None)
    if name is None:
        if f is F.rms_norm and _last_extent(arg_of(node, 1, "normalized_shape"), x, shape):
            w = arg_of(node, 2, "weight")
            eps = arg_of(node, 3, "eps")
            if isinstance(w, fx.Node) and (eps is None or isinstance(eps, float)):
                return {"op": "rmsnorm", "x": x, "weight": w,
                        "eps": float(eps if eps is not None else torch.finfo(cap.dtype(x)).eps)}
        return None
    dim = arg_of(node, 1, "dim")
    keep = arg_of(node, 2, "keepdim", False) if name not in ("softmax", "log-softmax") else False
    if name in ("softmax", "log-softmax") and node.kwargs.get("dtype") is not None:
        return None
    if not _last(dim, nd) or keep or (name in ("sum", "mean") and node.kwargs.get("dtype") is not None):
        return None
    return {"op": name, "x": x}


def match_row(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    r = _row(node, cap)
    if r is None:
        return None
    shape = cap.shape(r["x"])
    return Region("rowwise", "rowwise", [node], {**r, "rows": math.prod(shape[:-1]), "cols": shape[-1],
                                                 "dtype": DTYPES[cap.dtype(r["x"])]})


# Attempts after the MILP's pick try tile widths the model prices within this fraction of its optimum (the
# row reductions' model prices BC 64 ... 2048 within 2 %, while they measured 0.87-1.01x of eager).
TIE_BAND = 0.02


def choose_row(region: Region, *, tier: str, attempt: int = 0, **_: Any) -> dict[str, Any]:
    """Attempt 0: the MILP's design; attempt k: the k-th of `spread_designs` over the tile width (the tie
    farthest from the pick's width first), or the MILP's again when the tie band holds fewer."""
    from formloop.library.rowwise import make, solved_design, workload
    from formloop.solve.enumerate import spread_pick

    p = region.params
    first = solved_design(p["op"], p["rows"], p["cols"], p["dtype"], "h200")
    cfg = first if attempt < 1 else spread_pick(
        make(p["op"], p["dtype"]).formulate(workload(p["rows"], p["cols"], p["dtype"]), get_chip("h200")),
        first, attempt, axis="BC", band=TIE_BAND)
    solver = "milp (HiGHS)" if cfg == first else f"enumeration: tile width {attempt} of the model's ties"
    return {"config": cfg, "op": p["op"], "solver": solver, "template": f"rowwise-{p['op']}"}


def emit_row(region: Region, design: dict[str, Any], graph: fx.Graph) -> fx.Node:
    from formloop.library.fused_vector import row_op

    p = region.params
    with graph.inserting_before(region.output):
        kw: dict[str, Any] = {"config": design["config"]}
        for k in ("weight", "bias"):
            if p.get(k) is not None:
                kw[k] = graph.get_attr(p[k]) if isinstance(p[k], str) else p[k]
        if "eps" in p:
            kw["eps"] = p["eps"]
        call = graph.call_function(row_op, (p["op"], p["x"]), kw)
    return region.swap_in(call, graph)   # the region is the one node


def match_ew(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    if node.op == "call_module" or not node.args or not isinstance(node.args[0], fx.Node):
        return None
    x = node.args[0]
    if cap.shape(x) is None or cap.dtype(x) not in DTYPES or cap.shape(node) != cap.shape(x):
        return None
    tensors: dict[str, Any] = {}
    text = chain_op(node, x, cap, tensors)
    if text is None or text in ROW_CHAIN:
        return None
    chain, nodes, cur = [text], [node], node
    while len(cur.users) == 1:
        u = next(iter(cur.users))
        if u in taken or u.op == "output":
            break
        t = chain_op(u, cur, cap, tensors)
        if t is None or t in ROW_CHAIN or cap.shape(u) != cap.shape(x):
            break
        chain.append(t)
        nodes.append(u)
        cur = u
    shape = cap.shape(x)
    return Region("elementwise", "elementwise", nodes,
                  {"x": x, "chain": chain, "tensors": tensors, "dtype": DTYPES[cap.dtype(x)],
                   "rows": max(1, math.prod(shape[:-1])), "cols": shape[-1] if shape else 1})


def choose_ew(region: Region, *, tier: str, attempt: int = 0, **_: Any) -> dict[str, Any]:
    from formloop.library.elementwise import solved_design

    p = region.params
    chain = " >> ".join(p["chain"])
    cfg = solved_design(chain, p["rows"], p["cols"], p["dtype"], "", "h200")   # also checks the chain
    solver = "milp (HiGHS)"
    if tier != "gpu":   # the interpreter runs programs one by one: few coarse tiles (correctness only)
        if cfg.get("F"):   # the MILP's layout (the flat walk) with a coarse block
            cfg = {**cfg, "BF": min(_pow2(p["rows"] * p["cols"]), 4096), "W": 4}
        else:
            bn = min(_pow2(p["cols"]), 2048)
            cfg = {**cfg, "BN": bn, "BM": max(1, min(_pow2(p["rows"]), 4096 // bn)), "W": 4}
        solver = "interpreter tile"
        region.notes.append(f"interpreter tier: tile {cfg} instead of the MILP's (correctness only)")
    return {"config": cfg, "chain": chain, "solver": solver, "template": "elementwise"}


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def emit_ew(region: Region, design: dict[str, Any], graph: fx.Graph) -> fx.Node:
    from formloop.library.fused_vector import ew_chain

    p = region.params
    with graph.inserting_before(region.output):
        call = graph.call_function(ew_chain, (design["chain"], p["x"], dict(p["tensors"])),
                                   {"config": design["config"]})
    return region.swap_in(call, graph)


ROWWISE = register(Implementer("rowwise", "rowwise", match_row, choose_row, emit_row,
                               ("from formloop.library.fused_vector import row_op",)))
ELEMENTWISE = register(Implementer("elementwise", "elementwise", match_ew, choose_ew, emit_ew,
                                   ("from formloop.library.fused_vector import ew_chain",)))
