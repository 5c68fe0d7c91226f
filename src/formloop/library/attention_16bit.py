"""Attention over 16-bit storage (bf16, fp16) for `formloop optimize`: which program computes a
captured attention, its instance, and the ModelNew's call.

Where the proved attention-prefill family applies (Lq = Lk, a head dim of HEAD_DIMS, Hq a multiple
of Hkv, causal or no mask, scale 1/√D — attention_workload.check_shape and `prefill_scope`), the
program is the family's own (attention_prefill_kernel.PrefillPlan.run, on contiguous q, K, V: a
captured view is copied by .contiguous() first) and the instance is the attention-prefill MILP's
for the region's shape (attention_service.solve, the template's priors). Attempt k > 0 pins the
(k-1)-th other tile of ALT_TILES (Br, Bc) and lets the MILP choose the rest (S, W, GQ, TM), as
attention_fp32.choose_config does; a pin the template refuses moves on to the next tile.

Elsewhere (decode Lq = 1, cross lengths, another scale, a head dim outside HEAD_DIMS) the flash
kernel of attention_fp32_kernel runs at 16-bit storage: not the proved program, its walk checked by
tests against a float64 reference only."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from formloop.errors import InvalidInput
from formloop.hw.chips import get_chip
from formloop.library import attention_service
from formloop.library.attention_prefill import NAME as PREFILL
from formloop.library.attention_prefill import Bc as BC_DECISION
from formloop.library.attention_prefill import Br as BR_DECISION
from formloop.library.attention_workload import check_shape
from formloop.solve import SOLVERS
from formloop.template import Constraint

DTYPES = ("bf16", "fp16")
ALT_TILES = ((64, 64), (128, 64), (64, 32), (128, 128), (128, 32))
# Interpreter tier: small tiles (several tiles and the causal diagonal at SMALL sizes), pointer loads.
INTERPRETER = {"Br": 32, "Bc": 16, "S": 1, "W": 4, "GQ": 1, "TM": 0}
SCALE_RTOL = 1e-15   # a scale written as 1/math.sqrt(D) or D**-0.5: the same number to the last bits


def prefill_scope(B: int, Hq: int, Hkv: int, Lq: int, Lk: int, D: int, scale: float | None) -> str:
    """'' where the proved attention-prefill program computes this attention, else why it does not."""
    if Lq != Lk:
        return f"Lq={Lq} != Lk={Lk} (the prefill family attends L queries to the same L keys)"
    try:
        check_shape({"B": B, "Hq": Hq, "Hkv": Hkv, "D": D, "L": Lq})
    except InvalidInput as exc:
        return f"outside the prefill family: {exc}"
    if scale is not None and not math.isclose(float(scale), 1.0 / math.sqrt(D), rel_tol=SCALE_RTOL, abs_tol=0.0):
        return f"scale {float(scale):.6g} is not 1/sqrt(D) = {1.0 / math.sqrt(D):.6g} (the family's fixed scale)"
    return ""


def choose_prefill(B: int, Hq: int, Hkv: int, L: int, D: int, causal: bool, dtype: str, *, chip: str = "h200",
                   attempt: int = 0) -> dict[str, Any]:
    """The attention-prefill MILP's instance for one shape: {'config', 'source', 'predicted_us',
    'template_hash'}; attempt k > 0 pins another tile (see the module doc)."""
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    shape = {"B": B, "Hq": Hq, "Hkv": Hkv, "D": D, "L": L}
    r = attention_service.solve(PREFILL, shape, chip=chip, dtype=dtype, causal=int(bool(causal)))
    design, cost = {k: int(v) for k, v in r["design"].items()}, float(r["objective_us"])
    source = f"attention-prefill MILP at B={B} Hq={Hq} Hkv={Hkv} D={D} L={L} causal={int(bool(causal))}, {dtype}"
    if attempt:
        t = attention_service.template(PREFILL, dtype)
        f = t.formulate(attention_service.attention_workload(PREFILL, shape, dtype, causal=int(bool(causal))),
                        get_chip(chip))
        others = [x for x in ALT_TILES if x != (design["Br"], design["Bc"])]
        for i in range(len(others)):
            br, bc = others[(attempt - 1 + i) % len(others)]
            pin = Constraint("pinned_tile", BR_DECISION.eq(br) & BC_DECISION.eq(bc), "scope", "the attempt's tile")
            sol = SOLVERS["milp"](dataclasses.replace(f, constraints=(*f.constraints, pin)))
            if sol.assignment:
                design, cost = {k: int(v) for k, v in sol.assignment.items()}, float(sol.objective)
                source += f", tile {br}x{bc} pinned (attempt {attempt})"
                break
    return {"config": design, "source": source, "predicted_us": cost, "template_hash": r["template_hash"]}


_PLANS: dict[tuple, Any] = {}


def prefill_attention(q, k, v, *, causal: bool, config: dict[str, int]):
    """The ModelNew's call on the proved path: PrefillPlan(...).run on contiguous q [B, Hq, L, D] and
    K, V [B, Hkv, L, D] (views copied), out contiguous in q's type. Plans are kept per shape and config."""
    import torch  # noqa: PLC0415

    from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan  # noqa: PLC0415 (triton)

    names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
    if q.dtype not in names or k.dtype != q.dtype or v.dtype != q.dtype:
        raise InvalidInput("dtype", [str(t.dtype) for t in (q, k, v)], "torch.bfloat16 or torch.float16, all alike")
    B, Hq, L, D = q.shape
    Hkv = k.shape[1]
    key = (B, Hq, Hkv, D, L, q.dtype, bool(causal), tuple(sorted(config.items())))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS.setdefault(key, PrefillPlan(PrefillConfig(**config), B, Hq, Hkv, D, L, names[q.dtype],
                                                  int(bool(causal))))
    q, k, v = (x if x.is_contiguous() else x.contiguous() for x in (q, k, v))
    out = torch.empty((B, Hq, L, D), device=q.device, dtype=q.dtype)
    plan.run(q, k, v, out)
    return out


def attention16(q, k, v, *, program: str, causal: bool = False, scale: float | None = None,
                config: dict[str, int] | None = None):
    """The ModelNew's call for a 16-bit attention region: `program` 'prefill' (the proved family) or
    'flash' (attention_fp32_kernel at 16-bit storage, not the proved program)."""
    if program == "prefill":
        return prefill_attention(q, k, v, causal=causal, config=dict(config or {}))
    if program == "flash":
        from formloop.library.attention_fp32_kernel import fp32_attention  # noqa: PLC0415 (imports triton)

        return fp32_attention(q, k, v, causal=causal, scale=scale, config=config)
    raise InvalidInput("attention program", program, ("prefill", "flash"))
