"""The GEMM + epilogue region: nn.Linear / F.linear / matmul / mm / bmm, followed by the elementwise
and row operations the gemm-epilogue template fuses (bias, residual add, scale, activations, clamp,
softmax, logsumexp), while each value has exactly one user.

The instance is chosen through the kernel spec language (formloop.dsl.service): the region becomes
a spec with its shape and open fields, the template's MILP solves them and the instance is checked
against the proved template. A chain the template refuses (a row op on rows wider than one tile)
is shortened from its end until it is accepted; what was dropped stays PyTorch, noted."""
from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import fx, nn
from torch.nn import functional as F

from formloop.hw.chips import get_chip
from formloop.optimize.capture import Captured
from formloop.optimize.precision import check_option, decide
from formloop.optimize.recognize import Implementer, Region, register
from formloop.optimize.spec_memo import checked_spec, solver_of

# Tiles tried after the MILP's own choice (attempt 1, 2, ...): pinned, the MILP solves the rest.
ALT_TILES = ((64, 64, 32), (128, 128, 32), (64, 128, 64), (128, 64, 64), (32, 64, 64), (128, 256, 64))
INTERPRETER_TILE = (64, 64, 64)
ACTS_MODULE = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid", nn.SiLU: "silu", nn.Mish: "mish"}
ACTS_FUNCTION = {torch.relu: "relu", F.relu: "relu", torch.tanh: "tanh", torch.sigmoid: "sigmoid", F.silu: "silu",
                 F.mish: "mish", F.sigmoid: "sigmoid", F.tanh: "tanh"}
ACTS_METHOD = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid"}
MATMULS = {torch.matmul, operator.matmul, torch.mm, torch.bmm}
DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def fn_of(node: fx.Node, cap: Captured):
    if node.op == "call_module":
        return type(cap.gm.get_submodule(node.target))
    return node.target


def arg_of(node: fx.Node, i: int, name: str, default=None):
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def _anchor(node: fx.Node, cap: Captured) -> dict[str, Any] | None:
    """A GEMM at `node`: its A and B values (nodes or get_attr paths), B's layout, operation, bias."""
    if node.op == "call_module" and isinstance(cap.gm.get_submodule(node.target), nn.Linear):
        mod = cap.gm.get_submodule(node.target)
        return {"a": node.args[0], "b": f"{node.target}.weight", "lb": "col", "op": "gemm",
                "bias": f"{node.target}.bias" if mod.bias is not None else None}
    if node.op == "call_function" and node.target is F.linear:
        return {"a": node.args[0], "b": arg_of(node, 1, "weight"), "lb": "col", "op": "gemm",
                "bias": arg_of(node, 2, "bias")}
    if (node.op == "call_function" and node.target in MATMULS) or (
            node.op == "call_method" and node.target in ("matmul", "mm", "bmm")):
        a, b = node.args[0], node.args[1]
        sa, sb = cap.shape(a), cap.shape(b)
        if sa is None or sb is None:
            return None
        lb, src = "row", b
        if isinstance(b, fx.Node) and len(b.users) == 1 and _is_last_two_transpose(b, cap):
            lb, src = "col", b.args[0]
        if len(sb) == 2 and len(sa) >= 2:
            return {"a": a, "b": src, "lb": lb, "op": "gemm", "bias": None}
        if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0]:
            return {"a": a, "b": src, "lb": lb, "op": "batched_gemm", "bias": None}
    return None


def _is_last_two_transpose(b: fx.Node, cap: Captured) -> bool:
    shape = cap.shape(b.args[0]) if b.args and isinstance(b.args[0], fx.Node) else None
    if shape is None:
        return False
    nd = len(shape)
    if b.op == "call_method" and b.target == "t" or (b.op == "call_function" and b.target is torch.t):
        return nd == 2
    if (b.op == "call_method" and b.target == "transpose") or (b.op == "call_function" and b.target is torch.transpose):
        dims = {d % nd for d in b.args[1:3]} if len(b.args) >= 3 else set()
        return dims == {nd - 1, nd - 2}
    return False


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def chain_op(u: fx.Node, cur: fx.Node, cap: Captured, tensors: dict) -> str | None:
    """The chain text of `u` applied to `cur` (its only input from the region), or None."""
    f = fn_of(u, cap)
    shape = cap.shape(cur)
    if u.op == "call_module":
        mod = cap.gm.get_submodule(u.target)
        if type(mod) in ACTS_MODULE:
            return ACTS_MODULE[type(mod)]
        if isinstance(mod, nn.GELU):
            return f"gelu(approx={'tanh' if mod.approximate == 'tanh' else 'erf'})"
        if isinstance(mod, nn.LeakyReLU):
            return f"leaky_relu(slope={float(mod.negative_slope)!r})"
        if isinstance(mod, nn.Hardtanh):
            return f"hardtanh(lo={float(mod.min_val)!r},hi={float(mod.max_val)!r})"
        if isinstance(mod, nn.Softmax) and mod.dim is not None and mod.dim % len(shape) == len(shape) - 1:
            return "softmax"
        return None
    if u.args and u.args[0] is not cur and f not in (operator.add, torch.add, operator.mul, torch.mul):
        return None
    if f in ACTS_FUNCTION or (u.op == "call_method" and f in ACTS_METHOD):
        return ACTS_FUNCTION.get(f) or ACTS_METHOD[f]
    if f is F.gelu:
        return f"gelu(approx={'tanh' if u.kwargs.get('approximate', 'none') == 'tanh' else 'erf'})"
    if f is F.leaky_relu:
        return f"leaky_relu(slope={float(arg_of(u, 1, 'negative_slope', 0.01))!r})"
    if f is F.hardtanh:
        return f"hardtanh(lo={float(arg_of(u, 1, 'min_val', -1.0))!r},hi={float(arg_of(u, 2, 'max_val', 1.0))!r})"
    if f is torch.clamp or (u.op == "call_method" and f == "clamp"):
        lo, hi = arg_of(u, 1, "min"), arg_of(u, 2, "max")
        if not all(v is None or _number(v) for v in (lo, hi)) or (lo is None and hi is None):
            return None
        parts = [f"lo={float(lo)!r}"] if lo is not None else []
        return "clamp(" + ",".join(parts + ([f"hi={float(hi)!r}"] if hi is not None else [])) + ")"
    if f in (F.softmax, torch.softmax) or (u.op == "call_method" and f == "softmax"):
        dim = arg_of(u, 1, "dim")
        return "softmax" if isinstance(dim, int) and dim % len(shape) == len(shape) - 1 else None
    if f is torch.logsumexp or (u.op == "call_method" and f == "logsumexp"):
        dim, keep = arg_of(u, 1, "dim"), arg_of(u, 2, "keepdim", False)
        dim = dim[0] if isinstance(dim, (list, tuple)) and len(dim) == 1 else dim
        ok = isinstance(dim, int) and dim % len(shape) == len(shape) - 1 and not keep and len(shape) == 2
        return "logsumexp" if ok else None
    if f in (operator.truediv, torch.div) and u.args[0] is cur and _number(u.args[1]) and u.args[1] != 0:
        return f"scale(by={1.0 / float(u.args[1])!r})"
    if f in (operator.mul, torch.mul, operator.add, torch.add) and len(u.args) == 2:
        other = u.args[1] if u.args[0] is cur else u.args[0]
        if other is cur:
            return None
        if f in (operator.mul, torch.mul) and _number(other):
            return f"scale(by={float(other)!r})"
        if not isinstance(other, fx.Node) or cap.shape(other) is None:
            return None
        name = f"t{len(tensors)}"
        if cap.shape(other) == shape and cap.dtype(other) == cap.dtype(cur):
            tensors[name] = other
            return f"add(name={name})" if f in (operator.add, torch.add) else f"mul(name={name})"
        if cap.shape(other) == (shape[-1],):
            tensors[name] = other
            return f"bias(axis=row,name={name})" if f in (operator.add, torch.add) else f"scale(by=row,name={name})"
    return None


def match(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    g = _anchor(node, cap)
    if g is None or cap.dtype(node) not in DTYPES:
        return None
    tensors: dict[str, Any] = {}
    chain: list[str] = []
    if g["bias"] is not None:
        tensors["bias"] = g["bias"]
        chain.append("bias(axis=row,name=bias)")
    nodes, cur = [node], node
    while len(cur.users) == 1 and not chain[-1:] == ["logsumexp"]:
        u = next(iter(cur.users))
        if u in taken or u.op == "output":
            break
        text = chain_op(u, cur, cap, tensors)
        if text is None:
            break
        chain.append(text)
        nodes.append(u)
        cur = u
    sa = cap.shape(g["a"])
    sb = cap.shape(g["b"]) if isinstance(g["b"], fx.Node) else tuple(cap.gm.get_parameter(g["b"]).shape)
    if g["op"] == "gemm":
        dims = (math.prod(sa[:-1]), sb[0] if g["lb"] == "col" else sb[1], sa[-1])
    else:
        dims = (sa[0], sa[1], sb[-2] if g["lb"] == "col" else sb[-1], sa[-1])
    dtype = DTYPES[cap.dtype(node)]
    return Region("gemm-epilogue", "gemm-epilogue-gpu", nodes,
                  {**g, "chain": chain, "tensors": tensors, "dims": list(dims), "dtype": dtype,
                   "shape_text": " x ".join(str(d) for d in dims)})


def kmajor_b(ab: str, lb: str, dims: list[int], op: str = "gemm") -> bool:
    """Whether B is copied K-major before the GEMM: tf32 and tf32x3 operands stored [K, N] (row), where
    the copy pays. Hopper's wgmma reads 32-bit operands from shared memory K-major only (the transposed
    forms are for 16-bit types); Triton serves an N-major fp32 B by rearranging it on chip: its tf32 GEMM
    measured 4.1x cuBLAS TF32's time on bmm_heads' [128, 1024, 2048] B, against 1.29x on an nn.Linear
    weight, which is K-major (benchmarks/fp32_gemm.py, RESULTS.md). The copy reads and writes B once,
    so it pays only where the rearrangement's cost, a multiple of the tensor-core time, exceeds it: at
    `dims` ([batch,] M, N, K) the copy is made when its DRAM time is at most the GEMM's tensor-core time
    (tf32x3: three products). Measured (2026-12-02): bmm_heads, copy 0.2-0.6x the GEMM, tf32x3 7762 ->
    5315 us with the copy; gemm_skinny (16 x 8192 x 8192), copy 6-19x, tf32x3 78 -> 545 us."""
    if ab not in ("tf32", "tf32x3") or lb != "row":
        return False
    copy_s, gemm_s = _b_copy_us(dims, op) / 1e6, _tensor_core_s(dims, op, ab)
    return copy_s <= gemm_s


def _tensor_core_s(dims: list[int], op: str, ab: str) -> float:
    """The GEMM's time at the H200's tf32 tensor-core peak (tf32x3: three products)."""
    *lead, n, k = dims
    flops = 2 * math.prod(lead) * n * k
    return flops * (3 if ab == "tf32x3" else 1) / get_chip("h200").peak("tf32")


def spec_text(region: Region, chain: list[str], *, ab: str, tile: tuple[int, int, int] | None = None,
              interpreter: bool = False) -> str:
    p = region.params
    c = p["dtype"]
    lb = "col" if kmajor_b(ab, p["lb"], p["dims"], p["op"]) else p["lb"]
    lines = [f"kernel region = {p['op']} {{", f"    a = {ab} row", f"    b = {ab} {lb}", f"    c = {c} row",
             "    arch = sm90", f"    shape = {p['shape_text']}"]
    if interpreter:  # the interpreter runs every program serially: few, large tiles, one split, pointer loads
        lines += ["    split_k = 1", "    load = ptr"]
        tile = tile or INTERPRETER_TILE
    if tile is not None:
        lines.append(f"    tile = {tile[0]} x {tile[1]} x {tile[2]}")
    lines.append("}")
    return "\n".join(lines + [f">> {op.replace('=', ' = ').replace(',', ', ')}" for op in chain]) + "\n"


def _reduced_after(node: fx.Node) -> bool:
    """Whether the value's only user is a row log-sum-exp (any keepdim) that stays PyTorch."""
    if len(node.users) != 1:
        return False
    u = next(iter(node.users))
    lse = (u.op, u.target) in (("call_function", torch.logsumexp), ("call_method", "logsumexp"))
    dim = arg_of(u, 1, "dim") if lse else None
    dim = dim[0] if isinstance(dim, (list, tuple)) and len(dim) == 1 else dim
    meta = node.meta.get("tensor_meta")
    nd = len(meta.shape) if meta is not None and hasattr(meta, "shape") else 0
    return lse and u.args[0] is node and isinstance(dim, int) and nd > 0 and dim % nd == nd - 1


def operand_precision(region: Region, chain: list[str], fp32_operands: str, tolerance: str) -> dict[str, Any]:
    """The operand precision of an fp32 region (formloop.optimize.precision.decide) at its shape; a row
    log-sum-exp the region leaves to PyTorch (keepdim) counts in the bound as the chain's own would."""
    p = region.params
    if not chain[-1:] == ["logsumexp"] and _reduced_after(region.output):
        chain = [*chain, "logsumexp"]
    *lead, n, k = p["dims"]
    outputs = math.prod(lead) * (1 if chain[-1:] and chain[-1].startswith("logsumexp") else n)
    linear_weight = isinstance(p["b"], str)   # an nn.Linear's own weight: PyTorch's default init
    return decide(fp32_operands, K=k, N=n, outputs=outputs, rms_ab=1 / math.sqrt(3 * k) if linear_weight else 1.0,
                  chain=chain, rule=tolerance)


def choose(region: Region, *, tier: str, attempt: int = 0, fp32_operands: str = "auto",
           spec: str | None = None, tolerance: str = "kernelbench") -> dict[str, Any]:
    """The instance for `attempt` (0: the MILP's choice; k: tile ALT_TILES[k-1] pinned). Shortens a
    refused chain from its end (the dropped nodes leave the region). Raises ValueError if none.
    With `spec` (an agent's kernel spec), its fields fix the instance (open ones solved by the MILP
    at the region's shape) and its operand type is used; the chain stays the problem's.
    fp32 regions take `fp32_operands` (auto | tf32 | tf32x3 | fp32; auto: the fastest whose error
    bound fits `tolerance`, formloop.optimize.precision) on every tier: the interpreter emulates
    tf32 and tf32x3 (formloop.library.gemm_dot); the choice and its bound go into the notes."""
    from formloop.dsl.service import check_spec

    p = region.params
    check_option(fp32_operands)
    if spec is not None:
        return _from_spec(region, spec, check_spec)
    tile = None if attempt == 0 else ALT_TILES[(attempt - 1) % len(ALT_TILES)]
    chain = list(p["chain"])
    fixed = 1 if p["bias"] is not None else 0
    # the bound follows the whole matched chain: ops the template refuses still run (in PyTorch) on
    # the kernel's output, so their gain (a row log-sum-exp's averaging) applies all the same
    decision = operand_precision(region, chain, fp32_operands, tolerance) if p["dtype"] == "fp32" else None
    ab = decision["precision"] if decision else p["dtype"]
    while True:   # the longest chain the template accepts (with the MILP's own tile)
        text = spec_text(region, chain, ab=ab, interpreter=tier != "gpu")
        out = checked_spec(text)
        if out.get("ok"):
            break
        if len(chain) <= fixed:
            raise ValueError("the gemm-epilogue template refused the region: " + "; ".join(out.get("lines", []))[:300])
        dropped = chain.pop()
        region.notes.append(f"dropped '{dropped}' from the chain (template refused it: "
                            f"{(out.get('lines') or ['?'])[0][:160]}); it stays PyTorch")
        region.nodes.pop()
    if tile is not None:   # attempt k > 0: another tile pinned, the MILP chooses the rest
        text = spec_text(region, chain, ab=ab, tile=tile, interpreter=tier != "gpu")
        out = checked_spec(text)
        if not out.get("ok"):
            raise ValueError(f"tile {tile} refused for this region: " + "; ".join(out.get("lines", []))[:300])
    design = out["design"]
    keep = {k: int(v) for k, v in design["assignment"].items()}
    if decision:
        region.notes.append(decision["note"])
    chosen = {"config": keep, "ab": ab, "chain": " >> ".join(chain), "spec": text,
              "predicted_us": design.get("predicted_us"), "template_hash": design.get("template_hash"),
              "solver": solver_of(design),
              "tensors": [k for k in p["tensors"] if f"name={k}" in " ".join(chain)]}
    if kmajor_b(ab, p["lb"], p["dims"], p["op"]):   # the copy's DRAM time (B read and written once) joins
        copy_us = _b_copy_us(p["dims"], p["op"])       # the prediction
        region.notes.append(f"B ({p['lb']}, [K, N]) copied K-major before the {ab} GEMM (the tensor cores read "
                            f"32-bit operands K-major): {copy_us:.3g} us model")
        chosen["b_kmajor"] = True
        if chosen["predicted_us"] is not None:
            chosen["predicted_us"] = float(chosen["predicted_us"]) + copy_us
    return chosen


def _b_copy_us(dims: list[int], op: str) -> float:
    """B's copy at the H200's DRAM bandwidth: 8 bytes per fp32 element (read and written)."""
    *lead, n, k = dims
    batch = lead[0] if op == "batched_gemm" else 1
    return 1e6 * 8 * batch * k * n / get_chip("h200").bandwidth


def _from_spec(region: Region, spec: str, check_spec) -> dict[str, Any]:
    p = region.params
    out = check_spec(text=spec, shape=p["shape_text"])
    if not out.get("ok"):
        raise ValueError("the submitted spec was refused: " + "; ".join(out.get("lines", []))[:400])
    ab = out["a"].split()[0]
    if out["operation"] != p["op"] or (p["dtype"] != "fp32" and ab != p["dtype"]):
        raise ValueError(f"the spec is a {out['operation']} on {ab} operands; "
                         f"the region is a {p['op']} on {p['dtype']}")
    chain = list(p["chain"])
    return {"config": {k: int(v) for k, v in out["design"]["assignment"].items()}, "ab": ab,
            "chain": " >> ".join(chain),
            "spec": spec, "predicted_us": out["design"].get("predicted_us"), "solver": "agent spec",
            "template_hash": out["design"].get("template_hash"),
            "tensors": [k for k in p["tensors"] if f"name={k}" in " ".join(chain)]}


def emit(region: Region, design: dict[str, Any], graph: fx.Graph) -> fx.Node:
    from formloop.library.fused_gemm import gemm_chain

    p = region.params
    with graph.inserting_before(region.output):
        def value(v):
            return graph.get_attr(v) if isinstance(v, str) else v
        tensors = {k: value(p["tensors"][k]) for k in design["tensors"]}
        call = graph.call_function(gemm_chain, (value(p["a"]), value(p["b"])),
                                   {"op": p["op"], "ab": design["ab"], "c": p["dtype"], "lb": p["lb"],
                                    "chain": design["chain"], "config": design["config"], "tensors": tensors,
                                    **({"b_kmajor": True} if design.get("b_kmajor") else {})})
    return region.swap_in(call, graph)


GEMM_EPILOGUE = register(Implementer("gemm-epilogue-gpu", "gemm-epilogue", match, choose, emit,
                                     ("from formloop.library.fused_gemm import gemm_chain",)))
