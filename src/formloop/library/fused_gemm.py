"""What an assembled `ModelNew` calls for a GEMM region: one gemm-epilogue instance, planned once
per (spec, tile configuration, shape) and launched on the caller's tensors.

`gemm_chain(a, b, op=..., ab=..., lb=..., chain=..., config=..., tensors=...)` computes
chain(a · B) where B is `b` as stored: `lb="col"` takes an nn.Linear weight [N, K] (B = Wᵀ), `lb="row"`
a [K, N] matrix; `op="batched_gemm"` takes a [batch, M, K] and b [batch, K, N] (row) or
[batch, N, K] (col). `a` of a gemm may carry leading dimensions ([..., K]); they are flattened into M
and restored on the output. The load path is chosen per call (`load_path`): a TMA design (L=1) on
operands the copy engine cannot take (a ragged K or N: row pitches not a multiple of 16 bytes; an
unaligned base or batch stride) runs the pointer path with the same tiles. Operands whose stored
rows are strided (a transposed view passed in) are copied dense first: both paths read unit-stride
rows. The tile configuration is the
MILP's choice written into the ModelNew (formloop.optimize); the chain is
gemm_epilogue_ops.chain_text. Set TRITON_INTERPRET=1 before the
first triton import to run in the interpreter (no CUDA device)."""
from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import torch

from formloop.errors import InvalidInput
from formloop.library.gemm_epilogue_emit import KernelSpec, Shape
from formloop.library.gemm_epilogue_ops import parse_chain_text

_PLANS: dict[tuple, object] = {}


@lru_cache(maxsize=256)
def _spec(op: str, ab: str, c: str, lb: str, chain: str) -> KernelSpec:
    return KernelSpec(op=op, ab=ab, c=c, la="row", lb=lb, lc="row", chain=parse_chain_text(chain),
                      name=f"fused_{op}")


def _plan(spec: KernelSpec, config: tuple, shape: Shape):
    from formloop.library.gemm_epilogue_kernel import EpiloguePlan
    from formloop.library.gemm_tiling_kernel import TileConfig

    key = (spec, config, shape)
    if key not in _PLANS:
        _PLANS[key] = EpiloguePlan(spec, TileConfig(**dict(config)), shape)
    return _PLANS[key]


def _tma_ok(t: torch.Tensor) -> bool:
    """Unit inner stride, 16-byte aligned base and outer strides (row pitch, batch stride): what a
    TMA descriptor takes (triton.tools.tensor_descriptor asserts the same)."""
    e = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all((s * e) % 16 == 0 for s in t.stride()[:-1])


def load_path(config: Mapping[str, int], a: torch.Tensor, b: torch.Tensor) -> int:
    """The load path of one call: the design's L, except 0 (pointer loads) where a TMA design meets
    an operand (as stored: a [.., M, K], b [.., K, N] or [.., N, K]) the copy engine cannot take."""
    return 1 if config.get("L") and _tma_ok(a) and _tma_ok(b) else 0


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def gemm_chain(a: torch.Tensor, b: torch.Tensor, *, op: str = "gemm", ab: str = "fp32", c: str = "fp32",
               lb: str = "col", chain: str = "", config: Mapping[str, int],
               tensors: Mapping[str, torch.Tensor] | None = None, presplit: bool = False,
               b_kmajor: bool = False) -> torch.Tensor:
    """chain(a · B) through the gemm-epilogue kernel (see the module docstring). `presplit` (tf32x3
    only): the operands split into tf32 parts first and one TF32 GEMM over 3K (tf32_split); `config`
    is then that GEMM's tile configuration. `b_kmajor` (a row-layout b): b is copied K-major first
    ([.., N, K], the kernel reads it as lb="col"), the layout Hopper's tensor cores take 32-bit
    operands in (formloop.optimize.gemm_region.kmajor_b)."""
    if op not in ("gemm", "batched_gemm"):
        raise InvalidInput("fused op", op, "gemm, batched_gemm")
    if presplit and ab != "tf32x3":
        raise InvalidInput("presplit operand precision", ab, "tf32x3")
    if b_kmajor and lb == "row":
        b, lb = b.transpose(-1, -2).contiguous(), "col"
    spec = _spec(op, "tf32" if presplit else ab, c, lb, chain)
    lead = tuple(a.shape[:-1])
    b = _dense(b)   # stored rows (b [K, N] by rows, W [N, K] by columns) are read with unit stride
    if presplit:
        from formloop.library.tf32_split import A_PARTS, B_PARTS, split3

        a = split3(_dense(a.reshape(-1, a.shape[-1])) if op == "gemm" else _dense(a), -1, A_PARTS)
        b = split3(b, -1 if lb == "col" else -2, B_PARTS)
    if op == "gemm":
        a2 = _dense(a.reshape(-1, a.shape[-1]))
        m, k = a2.shape
        n = b.shape[0] if lb == "col" else b.shape[1]
        shape, batch = Shape(m, n, k), 1
    else:
        a2 = _dense(a)
        batch, m, k = a2.shape
        n = b.shape[-2] if lb == "col" else b.shape[-1]
        shape = Shape(m, n, k, batch=batch)
    b2 = b if lb == "row" else b.transpose(-1, -2)     # the logical [K, N] (a view of the stored W)
    if config.get("L") and not load_path(config, a2, b):
        config = {**config, "L": 0}   # the copy engine needs 16-byte pitches: the pointer path, same tiles
    plan = _plan(spec, tuple(sorted(config.items())), shape)
    inputs = {"a": a2, "b": b2}
    for name, t in (tensors or {}).items():
        if t.dim() >= 2 and op == "gemm":
            t = t.reshape(-1, t.shape[-1])
        inputs[name] = _dense(t)
    from formloop.library.gemm_epilogue_kernel import new_output

    out = new_output(plan, a.device)
    plan.launch(inputs, out, plan.new_workspace(a.device))
    if op == "gemm":
        return out.reshape(*lead, *out.shape[1:]) if plan.facts.reduces is False else out.reshape(lead)
    return out
