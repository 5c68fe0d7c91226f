"""Regions of the vecops family (formloop.library.vecops; kernels vecops_kernel, vecops_gather) on fp32, bf16 or
fp16 storage (fp32 arithmetic inside; cross-entropy fp32 only):

* norm: nn.GroupNorm, nn.InstanceNorm*d (no running statistics), nn.BatchNorm*d (momentum set; training or
  eval decided at call time, running statistics updated in place as the module does): split statistics,
  their combination, the affine normalization (designs: vecops-norm-stats and vecops-norm-apply).
* scan: torch.cumsum / Tensor.cumsum over the last dim (vecops-scan).
* colreduce: torch.argmax / argmin over a dim that is not the last, keepdim off (vecops-colreduce; the last
  dim is the rowwise family's).
* gather: F.unfold / nn.Unfold and F.max_pool2d / nn.MaxPool2d (floor mode, no indices) on [N, C, H, W]
  (vecops-gather).
* cross-entropy: F.cross_entropy(logits [N, C], targets [N]) with reduction 'mean', no class weights and no
  label smoothing (rowwise-logsumexp's design for the row pass).
The instance is the MILP design of the template for the region's shape (solved_design); the workload's bytes
and element size are the storage dtype's (2 for bf16)."""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx, nn
from torch.nn import functional as F

from formloop.library.vecops import pool_row_taps, solved_design
from formloop.optimize.capture import Captured
from formloop.optimize.gemm_region import arg_of, fn_of
from formloop.optimize.recognize import Implementer, Region, register

NORM_MODULES = (nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d, nn.BatchNorm1d, nn.BatchNorm2d,
                nn.BatchNorm3d)
FLOATS = (torch.float32, torch.bfloat16, torch.float16)   # the storage the kernels take (vecops_kernel.FLOATS)


def _float(node: Any, cap: Captured, rank: int | None = None, dtypes: tuple = FLOATS) -> tuple | None:
    shape = cap.shape(node) if isinstance(node, fx.Node) else None
    if shape is None or cap.dtype(node) not in dtypes or (rank is not None and len(shape) != rank):
        return None
    return shape


def _elem(node: fx.Node, cap: Captured) -> int:
    """Bytes per element of the region's input (its storage dtype)."""
    return int(cap.dtype(node).itemsize)


def _const(*vals: Any) -> bool:
    return all(not isinstance(v, fx.Node) for v in vals)


def _region(kind: str, node: fx.Node, params: dict[str, Any]) -> Region:
    return Region(f"vecops-{kind}", f"vecops-{kind}", [node], params)


def match_norm(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    if node.op != "call_module" or not node.args:
        return None
    mod = cap.gm.get_submodule(node.target)
    if not isinstance(mod, NORM_MODULES):
        return None
    shape = _float(node.args[0], cap)
    if shape is None or len(shape) < 2:
        return None
    if isinstance(mod, (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)) and mod.track_running_stats:
        return None
    if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)) and mod.momentum is None:
        return None
    n, c = shape[0], shape[1]
    hw = math.prod(shape[2:])
    return _region("norm", node, {"x": node.args[0], "module": node.target, "rows": n * c, "cols": hw,
                                  "numel": n * c * hw, "norm": type(mod).__name__,
                                  "elem": _elem(node.args[0], cap)})


def match_scan(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    f = fn_of(node, cap)
    if not (f is torch.cumsum or (node.op == "call_method" and f == "cumsum")) or not node.args:
        return None
    shape = _float(node.args[0], cap)
    dim = arg_of(node, 1, "dim")
    if shape is None or not shape or not isinstance(dim, int) or dim % len(shape) != len(shape) - 1 \
            or node.kwargs.get("dtype") is not None:
        return None
    return _region("scan", node, {"x": node.args[0], "rows": math.prod(shape[:-1]), "cols": shape[-1],
                                  "elem": _elem(node.args[0], cap)})


def match_colreduce(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    f = fn_of(node, cap)
    op = {torch.argmax: "argmax", torch.argmin: "argmin", "argmax": "argmax", "argmin": "argmin"}.get(f) \
        if node.op in ("call_function", "call_method") and (callable(f) or isinstance(f, str)) else None
    if op is None or not node.args:
        return None
    shape = _float(node.args[0], cap)
    dim, keep = arg_of(node, 1, "dim"), arg_of(node, 2, "keepdim", False)
    if shape is None or not shape or not isinstance(dim, int) or keep or dim % len(shape) == len(shape) - 1:
        return None
    d = dim % len(shape)
    return _region("colreduce", node, {"x": node.args[0], "op": op, "dim": d, "rows": math.prod(shape[:d]) *
                                       math.prod(shape[d + 1:]), "cols": shape[d], "numel": math.prod(shape),
                                       "elem": _elem(node.args[0], cap)})


def _pool_args(node: fx.Node, cap: Captured) -> dict[str, Any] | None:
    if node.op == "call_module":
        mod = cap.gm.get_submodule(node.target)
        if isinstance(mod, nn.MaxPool2d) and not mod.ceil_mode and not mod.return_indices:
            return {"op": "max_pool2d", "kernel_size": mod.kernel_size, "stride": mod.stride, "padding": mod.padding,
                    "dilation": mod.dilation}
        if isinstance(mod, nn.Unfold):
            return {"op": "unfold", "kernel_size": mod.kernel_size, "stride": mod.stride, "padding": mod.padding,
                    "dilation": mod.dilation}
        return None
    if node.op != "call_function":
        return None
    if node.target is F.unfold:
        a = {"op": "unfold", "kernel_size": arg_of(node, 1, "kernel_size"), "dilation": arg_of(node, 2, "dilation", 1),
             "padding": arg_of(node, 3, "padding", 0), "stride": arg_of(node, 4, "stride", 1)}
    elif node.target in (F.max_pool2d, torch.max_pool2d):
        if arg_of(node, 5, "ceil_mode", False) or arg_of(node, 6, "return_indices", False):
            return None
        a = {"op": "max_pool2d", "kernel_size": arg_of(node, 1, "kernel_size"), "stride": arg_of(node, 2, "stride"),
             "padding": arg_of(node, 3, "padding", 0), "dilation": arg_of(node, 4, "dilation", 1)}
    else:
        return None
    return a if _const(*a.values()) else None


def match_gather(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    a = _pool_args(node, cap) if node.args else None
    if a is None:
        return None
    shape, out = _float(node.args[0], cap, 4), cap.shape(node)
    if shape is None or out is None or not math.prod(out):
        return None
    rows, cols = math.prod(out[:-1]), out[-1]
    # bytes: the output once and the input once (the windows overlap in the L2 when they share inputs)
    e = _elem(node.args[0], cap)
    nbytes = (math.prod(out) + math.prod(shape)) * e
    taps = row_taps = 0
    if a["op"] == "max_pool2d":   # loads per output: the window's taps, or the window-row runs' elements
        k = _pair(a["kernel_size"])
        taps = k[0] * k[1]
        row_taps = pool_row_taps(k, _pair(a["stride"] or a["kernel_size"])[1], _pair(a["dilation"])[1])[1]
    return _region("gather", node, {"x": node.args[0], **a, "rows": rows, "cols": cols, "bytes": nbytes,
                                    "taps": max(taps, 1), "row_taps": row_taps, "elem": e})


def _pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))


def match_xent(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    if node.op != "call_function" or node.target is not F.cross_entropy or len(node.args) < 2:
        return None
    x, t = node.args[0], node.args[1]
    shape = _float(x, cap, 2, (torch.float32,))
    ts = cap.shape(t) if isinstance(t, fx.Node) else None
    if shape is None or ts != shape[:1] or cap.dtype(t) != torch.int64:
        return None
    extra = {k: arg_of(node, i, k, d) for i, k, d in ((2, "weight", None), (3, "size_average", None),
                                                      (5, "reduce", None), (6, "reduction", "mean"),
                                                      (7, "label_smoothing", 0.0))}
    ignore = arg_of(node, 4, "ignore_index", -100)
    if extra != {"weight": None, "size_average": None, "reduce": None, "reduction": "mean", "label_smoothing": 0.0} \
            or not isinstance(ignore, int):
        return None
    return _region("xent", node, {"x": x, "targets": t, "ignore_index": ignore, "rows": shape[0], "cols": shape[1]})


# the decision attempts spread over: the tile's width along the contiguous side (colreduce: RP, the output columns
# whose run a warp reads; the others: BC)
SPREAD_AXIS = {"colreduce": "RP"}


def _milp(kind: str, rows: int, cols: int, nbytes: int, taps: int = 1, row_taps: int = 0, elem: int = 4,
          attempt: int = 0) -> dict:
    """The MILP's design (attempt 0), or attempt k's: the k-th tile width of the model's tie band (the MILP's
    again where the band holds fewer)."""
    first = solved_design(kind, rows, cols, nbytes, "h200", taps, row_taps, elem=elem)
    if attempt < 1:
        return first
    from formloop.hw.chips import get_chip
    from formloop.library.vecops import make, workload
    from formloop.optimize.vector_regions import TIE_BAND
    from formloop.solve.enumerate import spread_pick

    f = make(kind).formulate(workload(rows, cols, nbytes, taps, row_taps, elem), get_chip("h200"))
    return spread_pick(f, first, attempt, axis=SPREAD_AXIS.get(kind, "BC"), band=TIE_BAND)


def choose(region: Region, *, tier: str, attempt: int = 0, **_: Any) -> dict[str, Any]:
    """Attempt 0: the MILP's designs. Attempt k: the k-th tile widths of the model's tie band; where the band holds
    no other width they are attempt 0's, labelled alike, so that the engine records a repeat (unmeasured)."""
    d = _designs(region, tier, attempt)
    if tier != "gpu":
        region.notes.append("interpreter tier: coarse tiles instead of the MILP's (correctness only)")
    elif attempt >= 1 and d != _designs(region, tier, 0):
        d["solver"] = f"enumeration: attempt {attempt}'s tile widths among the model's ties (the MILP's where fewer)"
    return d


def _designs(region: Region, tier: str, attempt: int) -> dict[str, Any]:
    p, kind = region.params, region.kind.removeprefix("vecops-")
    d: dict[str, Any] = {"solver": "milp (HiGHS)"}
    e = p.get("elem", 4)
    if kind == "norm":
        d["stats"] = _milp("norm-stats", p["rows"], p["cols"], p["numel"] * e, elem=e, attempt=attempt)
        d["apply"] = _milp("norm-apply", p["rows"], p["cols"], 2 * p["numel"] * e, elem=e, attempt=attempt)
        d["template"] = "vecops-norm-stats + vecops-norm-apply"
    elif kind == "xent":
        from formloop.library.rowwise import solved_design

        d["config"] = solved_design("logsumexp", p["rows"], p["cols"], "fp32", "h200")
        d["template"] = "rowwise-logsumexp (row pass)"
    else:
        nbytes = {"scan": 2 * p["rows"] * p["cols"] * e, "colreduce": p.get("numel", 0) * e + p["rows"] * 8,
                  "gather": p.get("bytes", 0)}[kind]
        d["config"] = _milp(kind, p["rows"], p["cols"], nbytes, p.get("taps", 1), p.get("row_taps", 0), e, attempt)
        d["template"] = f"vecops-{kind}"
    if tier != "gpu":   # the interpreter runs programs one by one: few coarse tiles (correctness only)
        for key in ("stats", "apply", "config"):
            if key in d:
                bc = min(_pow2(p["cols"]), 1024)
                d[key] = {**d[key], "BC": bc, "RP": max(1, min(_pow2(p["rows"]), 4096 // bc, 64)), "W": 4,
                          **({"SPLIT": 2} if "SPLIT" in d[key] and key != "config" else {})}
        d["solver"] = "interpreter tile"
    return d


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def emit(region: Region, design: dict[str, Any], graph: fx.Graph) -> fx.Node:
    from formloop.library import vecops_gather as vg
    from formloop.library import vecops_kernel as vk

    p, kind = region.params, region.kind.removeprefix("vecops-")
    if kind == "norm":
        with graph.inserting_before(region.output):
            fn, args, kw = vk.module_norm, (p["x"], graph.get_attr(p["module"])), {"stats": design["stats"],
                                                                                   "apply": design["apply"]}
    elif kind == "scan":
        fn, args, kw = vk.row_scan, (p["x"],), {"config": design["config"]}
    elif kind == "colreduce":
        fn, args, kw = vk.col_argreduce, (p["op"], p["x"], p["dim"]), {"config": design["config"]}
    elif kind == "xent":
        fn, args, kw = vg.cross_entropy, (p["x"], p["targets"]), {"config": design["config"],
                                                                 "ignore_index": p["ignore_index"]}
    else:
        fn = vg.unfold2d if p["op"] == "unfold" else vg.max_pool2d
        args = (p["x"], p["kernel_size"])
        kw = {"config": design["config"], **{k: p[k] for k in ("stride", "padding", "dilation")}}
    # the region's one node becomes the call in place: later regions that read it keep a live node
    node = region.output
    node.op, node.target, node.args, node.kwargs = "call_function", fn, args, kw
    return node


_IMPORTS = ("from formloop.library.vecops_kernel import module_norm, row_scan, col_argreduce",
            "from formloop.library.vecops_gather import unfold2d, max_pool2d, cross_entropy")
NORM = register(Implementer("vecops-norm", "vecops-norm", match_norm, choose, emit, _IMPORTS))
SCAN = register(Implementer("vecops-scan", "vecops-scan", match_scan, choose, emit, _IMPORTS))
COLREDUCE = register(Implementer("vecops-colreduce", "vecops-colreduce", match_colreduce, choose, emit, _IMPORTS))
GATHER = register(Implementer("vecops-gather", "vecops-gather", match_gather, choose, emit, _IMPORTS))
XENT = register(Implementer("vecops-xent", "vecops-xent", match_xent, choose, emit, _IMPORTS))
