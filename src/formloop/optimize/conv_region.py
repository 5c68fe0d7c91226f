"""The convolution region: nn.Conv2d / F.conv2d (NCHW, groups 1, zero padding) followed by its bias,
an eval-mode BatchNorm2d (running statistics folded into a per-channel scale and shift) and the
elementwise ops the gemm-epilogue template fuses (activations, scalar scale, clamp), while each
value has one user. Implemented by `formloop.library.fused_conv.conv_chain`: the implicit-GEMM
`conv2d` operation of the gemm-epilogue template, or, where stride == filter without padding
(patch embedding, 1x1 convs), a plain GEMM over the patch rows (see that module for the layouts).

Training-mode BatchNorm (what KernelBench runs: no `.eval()`) is not folded: it normalizes with the
batch's statistics over all N·P·Q outputs of a channel, a grid-wide reduction that must finish
before any output can be normalized. The region still takes it: the kernel writes the conv output,
torch reduces it per channel and updates the running statistics, and one elementwise pass (the
elementwise family's MILP design) applies the normalization and the chain after it (`post`).
ConvTranspose2d is not implemented (the recognizer's fallback reason says so).

The instance is chosen through the kernel spec language (formloop.dsl.service) like the GEMM
region: a `conv2d` (or `gemm`) spec with the region's geometry and open fields, solved by the
template's MILP and checked against the proved template."""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx, nn
from torch.nn import functional as F

from formloop.optimize.capture import Captured
from formloop.optimize.gemm_region import ALT_TILES, DTYPES, INTERPRETER_TILE, arg_of, chain_op
from formloop.optimize.precision import check_option, decide
from formloop.optimize.recognize import Implementer, Region, register
from formloop.optimize.spec_memo import checked_spec, solver_of

FUSED_OPS = ("relu", "tanh", "sigmoid", "silu", "mish", "gelu", "leaky_relu", "hardtanh", "clamp", "scale(by=")
BN_TRAINING = ("training-mode BatchNorm2d: not folded into the conv kernel (its batch statistics over all N*P*Q "
               "outputs of a channel are a grid-wide reduction that must end before any output is normalized); "
               "torch reduces the kernel's output per channel, one elementwise pass normalizes and runs the "
               "chain after it")
BN_OPS = ["scale(by=row,name=bn_scale)", "bias(axis=row,name=bn_shift)"]


def operand_type(dtype: str, tier: str, fp32_operands: str = "auto", gemm: list[int] | None = None,
                 tolerance: str = "kernelbench", notes: list[str] | None = None) -> str:
    """The operand type of the conv's dot products: the model's dtype, except fp32 models on the GPU
    tier, which take `fp32_operands` (the engine's fp32 compute mode; auto: the GEMM region's error-bound
    decision, formloop.optimize.precision, at the implicit GEMM's M x N x K = `gemm`, weights at
    PyTorch's default init); the interpreter runs fp32 operands as they are. The reference a candidate
    is checked against is fp32 math (cuDNN TF32 off, formloop.measure.mathmode), so the bound is held
    against the problem's math, never against a TF32 reference conv."""
    check_option(fp32_operands)
    if dtype != "fp32":
        return dtype
    if tier != "gpu":
        return "fp32"
    if fp32_operands != "auto":
        return fp32_operands
    m, n, k = gemm
    d = decide("auto", K=k, N=n, outputs=m * n, rms_ab=1 / math.sqrt(3 * k), rule=tolerance)
    if notes is not None:
        notes.append(d["note"])
    return d["precision"]


def _pair(v: Any) -> tuple[int, int] | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return (v, v)
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, int) for i in v):
        return (int(v[0]), int(v[1]))
    return None


def _anchor(node: fx.Node, cap: Captured) -> dict[str, Any] | None:
    """A conv at `node`: input, weight and bias (nodes or parameter paths) and geometry, or None."""
    if node.op == "call_module":
        mod = cap.gm.get_submodule(node.target)
        if type(mod) is not nn.Conv2d or mod.groups != 1 or mod.padding_mode != "zeros":
            return None
        if isinstance(mod.padding, str):
            return None
        g = {"x": node.args[0], "w": f"{node.target}.weight", "bias": f"{node.target}.bias" if mod.bias is not None
             else None, "stride": _pair(mod.stride), "padding": _pair(mod.padding), "dilation": _pair(mod.dilation)}
    elif node.op == "call_function" and node.target in (F.conv2d, torch.conv2d):
        if arg_of(node, 6, "groups", 1) != 1:
            return None
        g = {"x": node.args[0], "w": arg_of(node, 1, "weight"), "bias": arg_of(node, 2, "bias"),
             "stride": _pair(arg_of(node, 3, "stride", 1)), "padding": _pair(arg_of(node, 4, "padding", 0)),
             "dilation": _pair(arg_of(node, 5, "dilation", 1))}
        if not isinstance(g["w"], fx.Node) or not (g["bias"] is None or isinstance(g["bias"], fx.Node)):
            return None
    else:
        return None
    if None in (g["stride"], g["padding"], g["dilation"]) or not isinstance(g["x"], fx.Node):
        return None
    return g


def _weight_shape(w: Any, cap: Captured) -> tuple[int, ...] | None:
    return cap.shape(w) if isinstance(w, fx.Node) else tuple(cap.gm.get_parameter(w).shape)


def match(node: fx.Node, cap: Captured, taken: set) -> Region | None:
    g = _anchor(node, cap)
    if g is None or cap.dtype(node) not in DTYPES or cap.dtype(g["x"]) != cap.dtype(node):
        return None
    xs, ws, ys = cap.shape(g["x"]), _weight_shape(g["w"], cap), cap.shape(node)
    if xs is None or ws is None or ys is None or len(xs) != 4 or len(ws) != 4 or ws[1] != xs[1]:
        return None
    chain, post, nodes, cur, notes = [], [], [node], node, []
    if g["bias"] is not None:
        chain.append("bias(axis=row,name=bias)")
    bn = None
    while len(cur.users) == 1:
        u = next(iter(cur.users))
        if u in taken or u.op == "output":
            break
        if u.op == "call_module" and type(cap.gm.get_submodule(u.target)) is nn.BatchNorm2d and bn is None \
                and len(nodes) == 1:
            mod = cap.gm.get_submodule(u.target)
            bn = u.target
            if mod.training or mod.running_mean is None:
                notes.append(f"{u.name}: {BN_TRAINING}")
                post += BN_OPS
            else:
                chain += BN_OPS
        else:
            text = chain_op(u, cur, cap, {})
            if text is None or "name=" in text or not text.startswith(FUSED_OPS):
                break
            (post if post else chain).append(text)
        nodes.append(u)
        cur = u
    n, c, h, w = xs
    k, _, r, s = ws
    via = "gemm" if g["stride"] == (r, s) and g["padding"] == (0, 0) and g["dilation"] == (1, 1) else "implicit"
    p, q = ys[2], ys[3]
    shape_text = f"{n} x {h} x {w} x {c} x {k}" if via == "implicit" else f"{n * p * q} x {k} x {c * r * s}"
    region = Region("conv2d-epilogue", "conv2d-epilogue-gpu", nodes,
                    {**g, "bn": bn, "chain": chain, "post": post, "via": via, "dtype": DTYPES[cap.dtype(node)],
                     "dims": [n, h, w, c, k, r, s], "gemm": [n * p * q, k, c * r * s], "shape_text": shape_text})
    region.notes += notes
    return region


def spec_text(region: Region, chain: list[str], *, ab: str, tile: tuple[int, int, int] | None = None,
              interpreter: bool = False) -> str:
    p = region.params
    if p["via"] == "gemm":
        lines = ["kernel region = gemm {", f"    a = {ab} row", f"    b = {ab} col"]
    else:
        r, s = p["dims"][5], p["dims"][6]
        lines = ["kernel region = conv2d {", f"    a = {ab} nhwc", f"    b = {ab} krsc",
                 f"    filter = {r} x {s}", f"    stride = {p['stride'][0]} x {p['stride'][1]}",
                 f"    padding = {p['padding'][0]} x {p['padding'][1]}",
                 f"    dilation = {p['dilation'][0]} x {p['dilation'][1]}", "    load = ptr"]
    lines += [f"    c = {p['dtype']} {'row' if p['via'] == 'gemm' else 'nhwc'}", "    arch = sm90",
              f"    shape = {p['shape_text']}"]
    if interpreter:   # the interpreter runs every program serially: few, large tiles, one split
        lines += ["    split_k = 1"] + (["    load = ptr"] if p["via"] == "gemm" else [])
        tile = tile or INTERPRETER_TILE
    if tile is not None:
        lines.append(f"    tile = {tile[0]} x {tile[1]} x {tile[2]}")
    lines.append("}")
    return "\n".join(lines + [f">> {op.replace('=', ' = ').replace(',', ', ')}" for op in chain]) + "\n"


def choose(region: Region, *, tier: str, attempt: int = 0, fp32_operands: str = "auto",
           tolerance: str = "kernelbench", **_: Any) -> dict[str, Any]:
    """The instance for `attempt` (0: the MILP's choice; k: tile ALT_TILES[k-1] pinned). A chain the
    template refuses is shortened from its end (bias and a folded BatchNorm are kept). Raises ValueError."""
    p = region.params
    ab = operand_type(p["dtype"], tier, fp32_operands, p["gemm"], tolerance, region.notes)
    tile = None if attempt == 0 else ALT_TILES[(attempt - 1) % len(ALT_TILES)]
    chain = list(p["chain"])
    fixed = sum(1 for t in chain if "name=" in t)
    while True:
        text = spec_text(region, chain, ab=ab, tile=tile, interpreter=tier != "gpu")
        out = checked_spec(text)
        if out.get("ok"):
            break
        if len(chain) <= fixed:
            raise ValueError("the gemm-epilogue template refused the conv region: "
                             + "; ".join(out.get("lines", []))[:300])
        dropped = chain.pop()
        region.notes.append(f"dropped '{dropped}' from the chain (template refused it: "
                            f"{(out.get('lines') or ['?'])[0][:160]}); it stays PyTorch")
        region.nodes.pop()
    design = out["design"]
    post, post_config = " >> ".join(p["post"]), {}   # (the design is written into the ModelNew as JSON: no None)
    if post:
        from formloop.library.elementwise import solved_design

        m, k = p["gemm"][0], p["gemm"][1]
        post_config = solved_design(post, m, k, p["dtype"], "", "h200")
        if tier != "gpu":   # the interpreter runs programs one by one: one coarse tile (correctness only)
            bn_ = 1 << max(0, k - 1).bit_length()
            post_config = {"BN": bn_, "BM": max(1, min(1 << max(0, m - 1).bit_length(), 4096 // bn_)), "W": 4}
    return {"post": post, "post_config": post_config,
            "config": {k: int(v) for k, v in design["assignment"].items()}, "ab": ab, "via": p["via"],
            "chain": " >> ".join(chain), "spec": text, "predicted_us": design.get("predicted_us"),
            "template_hash": design.get("template_hash"), "solver": solver_of(design)}


def emit(region: Region, design: dict[str, Any], graph: fx.Graph) -> fx.Node:
    from formloop.library.fused_conv import conv_chain

    p = dict(region.params)
    anchor = region.nodes[0]   # its arguments as they are now (an earlier region may have replaced them)
    p["x"] = anchor.args[0]
    if anchor.op == "call_function":
        p["w"], p["bias"] = arg_of(anchor, 1, "weight"), arg_of(anchor, 2, "bias")
    with graph.inserting_before(region.output):
        def value(v):
            return graph.get_attr(v) if isinstance(v, str) else v
        kw = {"stride": p["stride"], "padding": p["padding"], "dilation": p["dilation"], "via": design["via"],
              "ab": design["ab"], "c": p["dtype"], "chain": design["chain"], "config": design["config"]}
        if p["bias"] is not None:
            kw["bias"] = value(p["bias"])
        if p["bn"] is not None:
            kw["bn"] = graph.get_attr(p["bn"])
        if design["post"]:
            kw["post"], kw["post_config"] = design["post"], design["post_config"]
        call = graph.call_function(conv_chain, (p["x"], value(p["w"])), kw)
    return region.swap_in(call, graph)


CONV_EPILOGUE = register(Implementer("conv2d-epilogue-gpu", "conv2d-epilogue", match, choose, emit,
                                     ("from formloop.library.fused_conv import conv_chain",)))
