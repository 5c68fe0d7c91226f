"""Choices for the fp32-storage flash-attention kernel (formloop.library.attention_fp32_kernel): the dot
precision by an error bound, and the instance (Br, Bc, S, W) by the attention-prefill template's MILP
rebound to fp32 storage.

Precision. With unit-scale inputs (the problems' randn) and scale = 1/√D, rounding q and K to a
format of unit roundoff u perturbs each score by about √2·u (rms; the √D terms of q·k, each with
relative error ≤ 2u, scaled by 1/√D), and the softmax carries a score error δ to the output as about
δ·rms(v) (rows with few keys: Σp² ≈ 1); P·V adds about u·rms(v). The predicted rms output error is
(√2 + 1)·u_eff, and the worst of many elements is taken as MAX_SIGMA times it; the cheapest precision
whose worst error stays under the tolerance is chosen. u_eff: TF32 2^-11; 3×TF32 (tf32x3) keeps
the hi·hi, hi·lo and lo·hi products, dropping lo·lo (2^-22) beside fp32 accumulation (2^-24):
2^-22; IEEE fp32 2^-24. At KernelBench's fp32 tolerance (1e-4) TF32 (predicted worst 8e-3) is refused
and tf32x3 (2e-6) chosen.

Instance. The prefill template's cost model (formloop.library.attention_prefill) with e = 4 bytes,
the tensor rate of the chosen precision (tf32: the TF32 peak; tf32x3: a third of it; ieee: the
fp32 CUDA-core peak), and the pointer-load path (TM = 0: this kernel has no TMA path), solved by the
MILP. Its walls C1 and C2 are evaluated at 4-byte elements, and C1_fp32 (smem_wall) adds the q tile's
second copy that the 3xTF32 split keeps in shared memory (measured by sm_90 compiles); the split's
registers are not in the C2 model. Decode (one query token) and cross-length
shapes are outside the template (its L is both lengths): a fixed menu instead, say so in `source`."""
from __future__ import annotations

import math
from typing import Any

from formloop.dtypes import get_dtype
from formloop.errors import InvalidInput
from formloop.hw.chips import get_chip
from formloop.library.attention_prefill import attention_prefill
from formloop.expr import substitute
from formloop.solve import SOLVERS
from formloop.template import Constraint, Formulation

UNIT_ROUNDOFF = {"tf32": 2.0 ** -11, "tf32x3": 2.0 ** -22, "ieee": 2.0 ** -24}
ORDER = ("tf32", "tf32x3", "ieee")          # cheapest first
MAX_SIGMA = 6.0
# Decode / cross-length menu: (Br, Bc, W, S), tried by attempt.
SMALL_MENU = ({"Br": 16, "Bc": 64, "W": 4, "S": 3}, {"Br": 16, "Bc": 128, "W": 4, "S": 2},
              {"Br": 32, "Bc": 64, "W": 4, "S": 3})
ALT_TILES = ((64, 64), (128, 64), (64, 32), (128, 128), (128, 32), (32, 32))
INTERPRETER = {"Br": 32, "Bc": 16, "W": 4, "S": 1}   # small tiles: several tiles and tails at SMALL sizes


def predicted_error(precision: str, v_rms: float = 1.0) -> float:
    """Predicted worst absolute output error (model) for unit-scale q, K and V of rms `v_rms`."""
    if precision not in UNIT_ROUNDOFF:
        raise InvalidInput("precision", precision, sorted(UNIT_ROUNDOFF))
    return MAX_SIGMA * (math.sqrt(2.0) + 1.0) * UNIT_ROUNDOFF[precision] * v_rms


def precision_for(tolerance: float | None = None, *, floor: str | None = None) -> tuple[str, dict[str, float]]:
    """The cheapest precision whose predicted worst error is below `tolerance` (default: KernelBench's
    fp32 atol), never cheaper than `floor`; and every precision's prediction."""
    tol = get_dtype("fp32").kernelbench_tol if tolerance is None else float(tolerance)
    if not tol > 0:
        raise InvalidInput("tolerance", tolerance, "a positive number")
    preds = {p: predicted_error(p) for p in ORDER}
    start = ORDER.index(floor) if floor is not None else 0
    for p in ORDER[start:]:
        if preds[p] <= tol:
            return p, preds
    return "ieee", preds


def smem_wall(br, bc, s, d: int, precision: str):
    """Shared memory of one program, bytes: the q tile (twice under 3xTF32: its hi and lo parts) and S
    stages of K and V, fp32 (fitted to Triton 3.6 sm_90 compiles, tests/test_attention_fp32_compile.py)."""
    return ((2 if precision == "tf32x3" else 1) * br + s * 2 * bc) * d * 4 + 1024


def _rate(chip, precision: str) -> float:
    if precision == "ieee":
        return chip.peak("fp32")
    return chip.peak("tf32") / (3.0 if precision == "tf32x3" else 1.0)


def choose_config(B: int, Hq: int, Hkv: int, Lq: int, Lk: int, D: int, causal: bool, precision: str, *,
                  chip: str = "h200", attempt: int = 0) -> dict[str, Any]:
    """The instance for one shape: {'config': {Br, Bc, W, S}, 'source': ..., 'predicted_us': ...}."""
    if Lq != Lk or Lq == 1:
        cfg = dict(SMALL_MENU[attempt % len(SMALL_MENU)])
        return {"config": cfg, "source": f"fixed menu entry {attempt % len(SMALL_MENU)} (decode/cross-length: "
                                          "outside the prefill template)", "predicted_us": None}
    c = get_chip(chip)
    t = attention_prefill("bf16")          # the structure; storage and rate are rebound below
    dp = max(16, 1 << (int(D) - 1).bit_length())
    values = t.bind({"B": B, "Hq": Hq, "Hkv": Hkv, "D": dp, "L": Lq, "e": 4, "causal": int(bool(causal))}, c)
    values["flops"] = _rate(c, precision)
    fold = {d.name: d for d in t.decisions}
    extra = [Constraint("fp32_pointer_path", fold["TM"].eq(0), "scope", "the fp32 kernel loads by pointers"),
             Constraint("C1_fp32", smem_wall(fold["Br"], fold["Bc"], fold["S"], dp, precision) <= values["Ms"],
                        "capacity", "q (twice for the 3xTF32 split) and S stages of fp32 K and V fit")]

    def solve(pin: tuple[int, int] | None):
        more = [] if pin is None else [Constraint("pinned_tile", fold["Br"].eq(pin[0]) & fold["Bc"].eq(pin[1]),
                                                  "scope", "the attempt's tile")]
        f = Formulation(template=t, params=values,
                        constraints=tuple(Constraint(x.name, substitute(x.expr, values), x.group, x.doc)
                                          for x in (*t.constraints, *t.preconditions, *extra, *more)),
                        cost=substitute(t.cost, values), terms={k: substitute(v, values) for k, v in t.terms.items()})
        sol = SOLVERS["milp"](f)
        if not sol.assignment:
            raise ValueError(f"the rebound prefill template has no feasible instance ({sol.status.value})")
        return {k: int(v) for k, v in sol.assignment.items()}, float(sol.objective)

    a, cost = solve(None)
    pinned = ""
    if attempt:   # attempt k: the k-th other tile of ALT_TILES pinned (the next feasible one), the MILP the rest
        others = [x for x in ALT_TILES if x != (a["Br"], a["Bc"])]
        pinned = f", no other tile feasible (attempt {attempt})"
        for k in range(len(others)):
            try:
                a, cost = solve(others[(attempt - 1 + k) % len(others)])
            except ValueError:   # the pinned tile breaks a wall for this shape (e.g. 128x128 fp32 at d 128)
                continue
            pinned = f", tile {a['Br']}x{a['Bc']} pinned (attempt {attempt})"
            break
    cfg = {"Br": a["Br"], "Bc": a["Bc"], "W": a["W"], "S": a["S"]}
    return {"config": cfg, "source": f"attention-prefill MILP rebound to fp32 storage, {precision} rate, TM=0{pinned}",
            "predicted_us": cost, "template_hash": t.content_hash}


def attention(q, k, v, *, causal: bool = False, scale: float | None = None, config: dict | None = None,
              precision: str = "tf32x3"):
    """The ModelNew's call: formloop.library.attention_fp32_kernel.fp32_attention, imported on first
    use (triton reads TRITON_INTERPRET when the kernel module is imported)."""
    from formloop.library.attention_fp32_kernel import fp32_attention  # noqa: PLC0415 (imports triton)

    return fp32_attention(q, k, v, causal=causal, scale=scale, config=config, precision=precision)
