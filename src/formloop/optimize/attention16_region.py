"""The attention region at 16-bit storage (bf16 or fp16 q, K, V of one type; the `--dtype bf16`
variant of the problem set): matched exactly as the fp32 region (formloop.optimize.attention_region),
computed by formloop.library.attention_16bit.

Where the proved attention-prefill family applies (Lq = Lk, head dim and head counts its shape check
accepts, scale 1/√D, causal or no mask) the design is that family's MILP instance for the region's
shape (gpu tier; attempt k > 0 pins another tile, attention_16bit.choose_prefill) or small
interpreter tiles with pointer loads (other tiers), and the call runs PrefillPlan.run on contiguous
q, K, V (a view is copied first, counted in the call's time). Decode (one query token, no mask, the
same head and scale conditions) runs the proved attention-decode program on the plain cache
(DecodePlan.run, the family's MILP instance at page 0). Elsewhere (cross lengths, a causal single
query, another scale, another head dim) the flash kernel of attention_fp32_kernel runs on the 16-bit
tiles; the notes say it is not the proved program, and why."""
from __future__ import annotations

from typing import Any

from torch import fx

from formloop.optimize.attention_region import NAME_16BIT, match_for, replace_with_call
from formloop.optimize.recognize import Implementer, Region, register


def choose(region: Region, *, tier: str, attempt: int = 0, **_: Any) -> dict[str, Any]:
    from formloop.library.attention_16bit import (
        INTERPRETER, choose_decode, choose_prefill, decode_scope, interpreter_decode, prefill_scope,
    )
    from formloop.library.attention_fp32 import choose_config

    p = region.params
    b, hq, hkv, lq, lk, d = p["dims"]
    dtype, causal = p["dtype"], bool(p["causal"])
    why = prefill_scope(b, hq, hkv, lq, lk, d, p["scale"])
    not_decode = decode_scope(b, hq, hkv, lq, lk, d, causal, p["scale"])
    if lq == 1 and not not_decode:
        if tier == "gpu":
            inst = choose_decode(b, hq, hkv, lk, d, dtype, attempt=attempt)
        else:
            inst = {"config": interpreter_decode(hq, hkv), "source": "interpreter tiles (two splits, pointer loads)"}
        region.notes.append(f"the proved attention-decode program (library/attention_decode_kernel.py "
                            f"DecodePlan.run, {dtype}, plain [B, Hkv, L, D] cache, page 0; other shapes at run "
                            f"time: the flash kernel); instance: {inst['source']}")
        design = {"program": "decode", "config": inst["config"], "causal": 0, "source": inst["source"]}
    elif not why:
        if tier == "gpu":
            inst = choose_prefill(b, hq, hkv, lq, d, causal, dtype, attempt=attempt)
        else:
            inst = {"config": dict(INTERPRETER), "source": "interpreter tiles (small, pointer loads)"}
        region.notes.append(f"the proved attention-prefill program (library/attention_prefill_kernel.py "
                            f"PrefillPlan.run, {dtype}, {'causal' if causal else 'full'}) on contiguous q/K/V "
                            f"(views copied; other shapes at run time: the flash kernel); instance: {inst['source']}")
        design = {"program": "prefill", "config": inst["config"], "causal": int(causal), "source": inst["source"]}
    else:
        if tier == "gpu":
            inst = choose_config(b, hq, hkv, lq, lk, d, causal, "tf32", attempt=attempt)
            inst["source"] += " (tiles sized for 4-byte elements: half the shared memory at 16 bits)"
        else:
            inst = {"config": {"Br": 32, "Bc": 16, "W": 4, "S": 1}, "source": "interpreter tiles (small)"}
        why = not_decode if lq == 1 else why
        region.notes.append(f"flash-attention kernel at {dtype} storage (library/attention_fp32_kernel.py: 16-bit "
                            f"dots, fp32 accumulation), not the proved prefill/decode program: {why}; "
                            f"instance: {inst['source']}")
        design = {"program": "flash", "config": inst["config"], "causal": int(causal), "source": inst["source"]}
        if p["scale"] is not None:
            design["scale"] = float(p["scale"])
    design["tensors"] = []   # plain numbers and strings: the ModelNew writes the designs as a literal
    if inst.get("predicted_us") is not None:
        design["predicted_us"] = float(inst["predicted_us"])
    return design


def emit(region: Region, design: dict[str, Any], graph: fx.Graph) -> fx.Node:
    from formloop.library.attention_16bit import attention16

    kwargs = {"program": design["program"], "causal": bool(design["causal"]), "config": design["config"]}
    if design["program"] == "flash":
        kwargs["scale"] = design.get("scale")
    return replace_with_call(region, graph, attention16, kwargs)


ATTENTION_16BIT = register(Implementer(NAME_16BIT, "attention", match_for(NAME_16BIT), choose, emit,
                                       ("from formloop.library.attention_16bit import attention16",)))
