"""Measure a planned Qwen3 layer on a CUDA device: correctness first (fresh random inputs, poisoned
output, output and KV cache vs the fp32 reference on the device), then the layer's time by the one
timer (formloop.measure.timer; CUDA graph and eager), then each part alone (graph) with its
speed-of-light fraction. Every time is us, source gpu. Imports torch lazily."""
from __future__ import annotations

from typing import Any

from formloop.hw.chips import get_chip
from formloop.library.qwen3_layer import new_state, new_weights, reference
from formloop.library.qwen3_layer_check import KV_TOLERANCE, OUT_TOLERANCE, rel_err
from formloop.library.qwen3_layer_pdl import check_compiled
from formloop.library.qwen3_layer_plan import LayerPlan, part_floor_us
from formloop.library.qwen3_layer_template import Fusion
from formloop.measure.timer import TimingPolicy, operand_sets_for, time_launches

PART_POLICY = TimingPolicy(budget_ms=15.0, max_reps=15)


def correctness(plan: LayerPlan, layer, weights, device, seed: int = 11) -> dict[str, Any]:
    """One run of `layer` on fresh inputs (output NaN-poisoned) against the fp32 reference."""
    import torch

    cfg, sc = plan.cfg, plan.scenario
    x, kc, vc = new_state(cfg, sc, device=device, seed=seed)
    want, kw, vw = reference(cfg, sc, weights, x, kc, vc)
    out = torch.full((sc.tokens, cfg.hidden), float("nan"), dtype=torch.bfloat16, device=device)
    layer(x, kc, vc, out)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    new = slice(sc.history, sc.kv_len)
    r = {"out_rel_err": rel_err(out, want), "k_rel_err": rel_err(kc[:, :, new], kw[:, :, new]),
         "v_rel_err": rel_err(vc[:, :, new], vw[:, :, new]), "nan": bool(torch.isnan(out).any()),
         "tolerance": {"out": OUT_TOLERANCE, "kv": KV_TOLERANCE}, "reference": "fp32 torch on the device"}
    r["ok"] = (not r["nan"]) and r["out_rel_err"] <= OUT_TOLERANCE and max(r["k_rel_err"], r["v_rel_err"]) <= \
        KV_TOLERANCE
    return r


def operand_sets(plan: LayerPlan, device, chip) -> list:
    """Inputs and caches for the timer, enough sets that they do not stay in the L2 between calls
    (the weights, shared, are larger than the L2 in every scenario)."""
    import torch

    cfg, sc = plan.cfg, plan.scenario
    per_set = 2 * (2 * sc.tokens * cfg.hidden + 2 * cfg.kv_heads * sc.kv_len * cfg.head_dim)
    n = min(8, operand_sets_for(per_set, chip.l2_bytes))
    sets = []
    for i in range(n):
        x, kc, vc = new_state(cfg, sc, device=device, seed=100 + i)
        sets.append((x, kc, vc, torch.empty(sc.tokens, cfg.hidden, dtype=torch.bfloat16, device=device)))
    return sets


def measure(plan: LayerPlan, device: str = "cuda", chip: str = "h200", parts: bool = True, seed: int = 0,
            weights=None) -> dict[str, Any]:
    """Correctness, then the layer (graph and eager), then each part alone (graph)."""
    from formloop.library.qwen3_layer_kernels import LayerKernels  # noqa: PLC0415 (triton)

    cfg, sc = plan.cfg, plan.scenario
    chip_spec = get_chip(chip)
    w = weights if weights is not None else new_weights(cfg, device=device, seed=seed)
    designs = {n: p.design for n, p in plan.parts.items()}
    layer = LayerKernels(cfg, sc, plan.fusion, designs, w, device)
    check = correctness(plan, layer, w, device)
    out: dict[str, Any] = {"check": check, "fusion": plan.fusion.as_dict(), "source": "gpu", "unit": "us"}
    if check["ok"] and layer.pdl:  # the PDL rules on the PTX Triton compiled for this run's kernels
        ptx = check_compiled(layer)
        out["pdl_ptx"] = ptx
        # None: no compiled PDL kernel found in Triton's cache to read (the source check still holds)
        check["pdl_rules_ok"] = all(r["ok"] for r in ptx) if ptx else None
        check["ok"] = check["pdl_rules_ok"] is not False
    if not check["ok"]:
        out["note"] = "not timed: the output or the KV cache is wrong, or a PDL kernel breaks the rules (pdl_ptx)"
        return out
    sets = operand_sets(plan, device, chip_spec)
    launch = lambda i: layer(*sets[i])  # noqa: E731
    graph = time_launches(launch, len(sets), device=device, mode="graph")
    eager = time_launches(launch, len(sets), device=device, mode="eager")
    out.update({"graph_us": graph.timing.seconds * 1e6, "eager_us": eager.timing.seconds * 1e6,
                "graph_timing": graph.timing.as_dict(), "eager_timing": eager.timing.as_dict()})
    if parts:
        rows = []
        steps = layer.steps(*sets[0])
        for _, step in steps:
            step()
        for name, step in steps:
            t = time_launches(lambda i, f=step: f(), 1, device=device, mode="graph", policy=PART_POLICY)
            us = t.timing.seconds * 1e6
            floor = part_floor_us(plan, name, chip_spec)
            rows.append({"part": name, "gpu_us": us, "model_us": plan.parts[name].time_us, "sol_floor_us": floor,
                         "sol_fraction": floor / us if us > 0 else None})
        out["parts"] = rows
        out["parts_sum_us"] = sum(r["gpu_us"] for r in rows)
    return out


def attention_in_context(plan: LayerPlan, designs: list, device: str = "cuda", weights=None) -> list[dict]:
    """Attention designs (decode or prefill, the plan's family) timed alone in the layer's context
    (graph, us gpu): the layer (PD off) runs once, then each design reads its q and KV cache and writes
    a fresh output, checked against the plan's design's output (same math: rel. error <= 1e-2) before
    it is timed, over copies of the KV cache that together exceed the L2 (in a decode step a layer's
    cache is cold). The plan's own design comes first. How the benchmark and `--tune` tell a plan
    choice from the layer's context."""
    import torch

    from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan  # noqa: PLC0415 (triton)
    from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan  # noqa: PLC0415 (triton)
    from formloop.library.qwen3_layer_kernels import LayerKernels  # noqa: PLC0415 (triton)

    cfg, sc = plan.cfg, plan.scenario
    w = weights if weights is not None else new_weights(cfg, device=device, seed=0)
    f = plan.fusion  # PD off, and the rope kernel apart (RA 0): it writes the rotated q each design reads
    layer = LayerKernels(cfg, sc, Fusion(f.R1, f.GL, f.R2, 0, f.NF, 0), {n: p.design for n, p in plan.parts.items()},
                         w, device)
    x, kc, vc, out = operand_sets(plan, device, get_chip("h200"))[0]
    layer(x, kc, vc, out)
    ref = layer.o_heads.clone()
    n = min(8, operand_sets_for(kc.numel() * kc.element_size() * 2, get_chip("h200").l2_bytes))
    caches = [(kc, vc)] + [(kc.clone(), vc.clone()) for _ in range(n - 1)]
    wl = {"B": 1, "Hq": cfg.heads, "Hkv": cfg.kv_heads, "D": cfg.head_dim, "L": sc.kv_len}
    prefill = sc.kind == "prefill"
    rows = []
    for d in [plan.parts["attn"].design, *designs]:
        d = {k: int(v) for k, v in d.items()}
        if any(r["design"] == d for r in rows):
            continue
        try:
            if prefill:  # prefill has no workspace: its launch takes q, K, V and the output only
                p = PrefillPlan.of(PrefillConfig.from_assignment(d), wl, "bf16")
                extra = [()] * len(caches)
            else:
                p = DecodePlan.of(DecodeConfig.from_assignment(d), wl, "bf16")
                extra = [(p.new_workspace(device),) for _ in caches]
            o = torch.full_like(ref, float("nan"))
            p.launch(layer.q, *caches[0], o, *extra[0])
            torch.cuda.synchronize()
            err = rel_err(o, ref)
            row = {"design": d, "rel_err_vs_plan": err}
            if err <= 1e-2:
                t = time_launches(lambda i, p=p, o=o, extra=extra: p.launch(layer.q, *caches[i], o, *extra[i]),
                                  len(caches), device=device, mode="graph", policy=PART_POLICY)
                row["gpu_us"] = t.timing.seconds * 1e6
                row["cache_copies"] = len(caches)
        except Exception as exc:  # noqa: BLE001 (a design that fails here is recorded, not chosen)
            row = {"design": d, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        rows.append(row)
    return rows
