"""Attention over 16-bit storage (bf16, fp16) for `formloop optimize`: which program computes a
captured attention, its instance, and the ModelNew's call.

Where the proved attention-prefill family applies (Lq = Lk, a head dim of HEAD_DIMS, Hq a multiple
of Hkv, causal or no mask, scale 1/√D — attention_workload.check_shape and `prefill_scope`), the
program is the family's own (attention_prefill_kernel.PrefillPlan.run, on contiguous q, K, V: a
captured view is copied by .contiguous() first) and the instance is the attention-prefill MILP's
for the region's shape (attention_service.solve, the template's priors). Attempt k > 0 pins the
(k-1)-th other tile of ALT_TILES (Br, Bc) and lets the MILP choose the rest (S, W, GQ, TM), as
attention_fp32.choose_config does; a pin the template refuses moves on to the next tile.

Decode (one query token, no mask, a plain [B, Hkv, L, D] K/V, the same head and scale conditions):
the proved attention-decode family (attention_decode_kernel.DecodePlan.run on q[:, :, 0, :], with the
plan's float32 workspace for split partials allocated once per plan and device), the instance the
attention-decode MILP's (attention_service.solve, page 0); attempt k > 0 pins another (Bn, KS).

Elsewhere (cross lengths, a causal single query, another scale, a head dim outside HEAD_DIMS) the
flash kernel of attention_fp32_kernel runs at 16-bit storage: not the proved program, its walk
checked by tests against a float64 reference only."""
from __future__ import annotations

import copy
import dataclasses
import functools
import math
from typing import Any

from formloop.errors import InvalidInput
from formloop.hw.chips import get_chip
from formloop.library import attention_service
from formloop.library.attention_decode import KS as KS_DECISION
from formloop.library.attention_decode import NAME as DECODE
from formloop.library.attention_decode import Bn as BN_DECISION
from formloop.library.attention_prefill import NAME as PREFILL
from formloop.library.attention_prefill import Bc as BC_DECISION
from formloop.library.attention_prefill import Br as BR_DECISION
from formloop.library.attention_workload import check_shape
from formloop.solve import SOLVERS
from formloop.template import Constraint

DTYPES = ("bf16", "fp16")
ALT_TILES = ((64, 64), (128, 64), (64, 32), (128, 128), (128, 32))    # prefill (Br, Bc) by attempt
ALT_SPLITS = ((64, 1), (64, 4), (128, 2), (32, 8), (64, 16))           # decode (Bn, KS) by attempt
PINS = {PREFILL: (ALT_TILES, (BR_DECISION, BC_DECISION)), DECODE: (ALT_SPLITS, (BN_DECISION, KS_DECISION))}
# Interpreter tier: small tiles (several tiles and the causal diagonal at SMALL sizes), pointer loads.
INTERPRETER = {"Br": 32, "Bc": 16, "S": 1, "W": 4, "GQ": 1, "TM": 0}
# Decode in the interpreter: two splits merged in launch (the last arriver), pointer loads; QP fitted to G.
INTERPRETER_DECODE = {"Bn": 16, "KS": 2, "S": 1, "W": 4, "MG": 1, "TM": 0}
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


def decode_scope(B: int, Hq: int, Hkv: int, Lq: int, Lk: int, D: int, causal: bool, scale: float | None) -> str:
    """'' where the proved attention-decode program computes this attention, else why it does not."""
    if Lq != 1:
        return f"Lq={Lq} (the decode family attends one query token)"
    if causal and Lk > 1:
        return "a causal single query (top-left) sees key 0 only, not the decode family's whole cache"
    return prefill_scope(B, Hq, Hkv, Lk, Lk, D, scale)


def interpreter_decode(Hq: int, Hkv: int) -> dict[str, int]:
    """INTERPRETER_DECODE with QP the largest power of two <= 4 dividing the GQA group."""
    g = Hq // Hkv
    return {**INTERPRETER_DECODE, "QP": max(q for q in (1, 2, 4) if g % q == 0)}


def _milp(name: str, shape: dict, dtype: str, chip: str, attempt: int, **opts) -> dict[str, Any]:
    """attention_service.solve's design for `name`; attempt k > 0: the (k-1)-th of PINS[name] (values
    of its decisions) that differs from it, pinned, the MILP choosing the rest (a refused pin: the
    next). Solved once per argument set (a model's layers repeat one shape); each caller gets a copy."""
    return copy.deepcopy(_milp_once(name, tuple(shape.items()), dtype, chip, attempt, tuple(sorted(opts.items()))))


@functools.lru_cache(maxsize=256)
def _milp_once(name: str, shape_items: tuple, dtype: str, chip: str, attempt: int, opt_items: tuple) -> dict:
    shape, opts = dict(shape_items), dict(opt_items)
    pins, decisions = PINS[name]
    if not attempt:
        r = attention_service.solve(name, shape, chip=chip, dtype=dtype, **opts)
        fields = ",".join(f"{k}={v}" for k, v in {**shape, **opts}.items())
        return {"config": {k: int(v) for k, v in r["design"].items()}, "source": f"{name} MILP at {fields}, {dtype}",
                "predicted_us": float(r["objective_us"]), "template_hash": r["template_hash"]}
    first = _milp_once(name, shape_items, dtype, chip, 0, opt_items)
    design, cost, source = dict(first["config"]), first["predicted_us"], first["source"]
    t = attention_service.template(name, dtype)
    f = t.formulate(attention_service.attention_workload(name, shape, dtype, **opts), get_chip(chip))
    base = tuple(design[d.name] for d in decisions)
    others = [x for x in pins if x != base]
    for i in range(len(others)):
        pin = others[(attempt - 1 + i) % len(others)]
        expr = decisions[0].eq(pin[0])
        for d, val in zip(decisions[1:], pin[1:]):
            expr = expr & d.eq(val)
        sol = SOLVERS["milp"](dataclasses.replace(f, constraints=(*f.constraints, Constraint(
            "pinned", expr, "scope", "the attempt's tile"))))
        if sol.assignment:
            design, cost = {k: int(v) for k, v in sol.assignment.items()}, float(sol.objective)
            pinned = "x".join(f"{d.name}={v}" for d, v in zip(decisions, pin))
            source += f", {pinned} pinned (attempt {attempt})"
            break
    return {"config": design, "source": source, "predicted_us": cost, "template_hash": first["template_hash"]}


def choose_decode(B: int, Hq: int, Hkv: int, L: int, D: int, dtype: str, *, chip: str = "h200",
                  attempt: int = 0) -> dict[str, Any]:
    """The attention-decode MILP's instance (contiguous cache, page 0) for one shape."""
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    shape = {"B": B, "Hq": Hq, "Hkv": Hkv, "D": D, "L": L}
    return _milp(DECODE, shape, dtype, chip, attempt, page=0)


def choose_prefill(B: int, Hq: int, Hkv: int, L: int, D: int, causal: bool, dtype: str, *, chip: str = "h200",
                   attempt: int = 0) -> dict[str, Any]:
    """The attention-prefill MILP's instance for one shape: {'config', 'source', 'predicted_us',
    'template_hash'}; attempt k > 0 pins another tile (see the module doc)."""
    if dtype not in DTYPES:
        raise InvalidInput("dtype", dtype, DTYPES)
    shape = {"B": B, "Hq": Hq, "Hkv": Hkv, "D": D, "L": L}
    return _milp(PREFILL, shape, dtype, chip, attempt, causal=int(bool(causal)))


_PLANS: dict[tuple, Any] = {}


def _storage(q, k, v) -> str:
    """'bf16' or 'fp16': the one 16-bit type of q, K and V (else a named error)."""
    import torch  # noqa: PLC0415

    names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
    if q.dtype not in names or k.dtype != q.dtype or v.dtype != q.dtype:
        raise InvalidInput("dtype", [str(t.dtype) for t in (q, k, v)], "torch.bfloat16 or torch.float16, all alike")
    return names[q.dtype]


def prefill_attention(q, k, v, *, causal: bool, config: dict[str, int]):
    """The ModelNew's call on the proved path: PrefillPlan(...).run on contiguous q [B, Hq, L, D] and
    K, V [B, Hkv, L, D] (views copied), out contiguous in q's type. Plans are kept per shape and config."""
    import torch  # noqa: PLC0415

    from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan  # noqa: PLC0415 (triton)

    dtype = _storage(q, k, v)
    B, Hq, L, D = q.shape
    Hkv = k.shape[1]
    key = (B, Hq, Hkv, D, L, q.dtype, bool(causal), tuple(sorted(config.items())))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS.setdefault(key, PrefillPlan(PrefillConfig(**config), B, Hq, Hkv, D, L, dtype,
                                                  int(bool(causal))))
    q, k, v = (x if x.is_contiguous() else x.contiguous() for x in (q, k, v))
    out = torch.empty((B, Hq, L, D), device=q.device, dtype=q.dtype)
    plan.run(q, k, v, out)
    return out


_WORKSPACES: dict[tuple, Any] = {}


def decode_attention(q, k, v, *, config: dict[str, int]):
    """The ModelNew's call on the proved decode path: DecodePlan.run on q[:, :, 0, :] [B, Hq, D] and a
    plain cache K, V [B, Hkv, L, D] (copied where not contiguous), out [B, Hq, 1, D] in q's type."""
    import torch  # noqa: PLC0415

    from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan  # noqa: PLC0415 (triton)

    dtype = _storage(q, k, v)
    B, Hq, Lq, D = q.shape
    Hkv, L = k.shape[1], k.shape[2]
    if Lq != 1:
        raise InvalidInput("query length", Lq, "1 (decode)")
    key = (B, Hq, Hkv, D, L, q.dtype, tuple(sorted(config.items())))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS.setdefault(key, DecodePlan(DecodeConfig(**config), B, Hq, Hkv, D, L, dtype))
    ws = None
    if plan.config.KS > 1:
        ws = _WORKSPACES.get((key, q.device))
        if ws is None:
            ws = _WORKSPACES.setdefault((key, q.device), plan.new_workspace(q.device))
    q1 = q[:, :, 0, :]
    q1, k, v = (x if x.is_contiguous() else x.contiguous() for x in (q1, k, v))
    out = torch.empty((B, Hq, D), device=q.device, dtype=q.dtype)
    plan.run(q1, k, v, out, ws)
    return out[:, :, None, :]


def _splits_fit(config: dict[str, int], L: int, group: int) -> bool:
    """The decode config runs at KV length L and GQA group `group` (every split gets a tile, QP | G)."""
    bn, ks, qp = config.get("Bn", 64), config.get("KS", 1), config.get("QP", 1)
    per = -(-(-(-L // bn)) // ks)
    return group % qp == 0 and (ks - 1) * per * bn < L


FLASH_FALLBACK = {"Br": 64, "Bc": 64, "W": 4, "S": 2}


def attention16(q, k, v, *, program: str, causal: bool = False, scale: float | None = None,
                config: dict[str, int] | None = None):
    """The ModelNew's call for a 16-bit attention region: `program` 'prefill' or 'decode' (the proved
    families) or 'flash' (attention_fp32_kernel at 16-bit storage, not the proved program). A call
    whose shapes lie outside the chosen family (not the problem's own: the integrity battery's probes
    of other shapes) runs the flash kernel, with the family's scale 1/√D."""
    if program not in ("prefill", "decode", "flash"):
        raise InvalidInput("attention program", program, ("prefill", "decode", "flash"))
    config = dict(config or {})
    if program != "flash" and q.dim() == k.dim() == 4:
        (B, Hq, Lq, D), (Hkv, Lk) = q.shape, k.shape[1:3]
        if program == "prefill" and not prefill_scope(B, Hq, Hkv, Lq, Lk, D, None):
            return prefill_attention(q, k, v, causal=causal, config=config)
        if program == "decode" and not decode_scope(B, Hq, Hkv, Lq, Lk, D, causal, None) \
                and _splits_fit(config, Lk, Hq // Hkv):
            return decode_attention(q, k, v, config=config)
    from formloop.library.attention_fp32_kernel import fp32_attention  # noqa: PLC0415 (imports triton)

    return fp32_attention(q, k, v, causal=causal, scale=scale if program == "flash" else None,
                          config=config if program == "flash" else FLASH_FALLBACK)
