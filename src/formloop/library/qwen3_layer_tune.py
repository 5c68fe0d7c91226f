"""Choose a Qwen3 layer's GEMM designs by measurement (`formloop layer --tune N`, benchmarks/qwen3_layer.py).

Each GEMM part's plan design (the MILP's pick) and the next N designs of its family's model are checked against
fp32 torch on NaN-poisoned output, then timed alone by formloop.measure.timer (CUDA graph over weight sets that
exceed the L2); a candidate replaces the plan's design only if it is correct and at least 3 % faster. Menus: a
CUDA-core GEMV part (gemv-epilogue-gpu, decode) its model's ranking over GEMV_MENU; a tensor-core part
(gemm-epilogue-gpu) its model's best two designs of each split count, then its best design per tile shape, split
and warps (`gemm_menu`), ranked by fitted terms where given while the plan keeps the priors' pick. Why: the
priors misprice split-K at 128 rows and misrank 256×128 against 128×256 tiles at 2048 and more (RESULTS.md round
12). A norm-fused GEMV keeps its plan design (the timing harness has no norm prologue). Attention (`tune_attention`):
the plan's design and its template's next designs (`attention_menu`), each checked against the plan design's output
and timed alone on the layer's own q and KV cache (qwen3_layer_measure.attention_in_context); the same 3 % rule.
Why: in the layer's prefill the priors pick 128 x 128 tiles that ran 20-25 % slower than 64 x 64 (RESULTS.md round
13). Imports torch lazily."""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping

from formloop.evaluate.calibrate import Point, predict
from formloop.hw.chips import get_chip
from formloop.library import attention_service, gemm_epilogue, gemv_epilogue as gv, get_template, qwen3_layer_measure
from formloop.library.qwen3_layer_plan import LayerPlan, PartPlan
from formloop.measure.timer import time_launches
from formloop.solve import solve_milp
from formloop.solve.enumerate import ranked_designs

FASTER = 0.97  # a candidate must take at most this fraction of the plan design's time
GEMV_MENU = {"Tn": (4, 8, 16, 32, 64), "Tk": (128, 256, 512, 1024, 2048), "S": (1, 3), "W": (4, 8), "KS": (1, 2, 3)}
DISTINCT = ("Tm", "Tn", "Tk", "KS", "W")


def operand_sets(N: int, K: int, device, l2_bytes: int, M: int = 1) -> list:
    """(x [M, K], w [N, K], residual [M, N]) sets, enough that the weights exceed the L2 three times."""
    import torch

    n_sets = max(2, math.ceil(3 * l2_bytes / (N * K * 2))) if str(device).startswith("cuda") else 2
    g = torch.Generator(device=device).manual_seed(7)
    sets = []
    for _ in range(n_sets):
        x = torch.randn(M, K, device=device, generator=g).to(torch.bfloat16)
        w = (torch.randn(N, K, device=device, generator=g) / math.sqrt(K)).to(torch.bfloat16)
        r = torch.randn(M, N, device=device, generator=g).to(torch.bfloat16)
        sets.append((x, w, r))
    return sets


def reference(x, w, r, chain: str):
    """The part in fp32 torch: x·wᵀ, then SiLU(gate)·up over interleaved columns, or + residual."""
    import torch

    acc = x.float() @ w.float().T
    if "glu" in chain:
        return torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2]
    return acc + r.float() if "residual" in chain else acc


def measure(launch: Callable, sets: list, chain: str, out_width: int, device) -> dict:
    """Check `launch(set, out)` against the fp32 reference on a NaN-poisoned output, then (if correct) time it over
    the sets, CUDA graph and eager (us, gpu on a CUDA device)."""
    import torch

    rows = sets[0][0].shape[0]
    outs = [torch.full((rows, out_width), float("nan"), device=device, dtype=torch.bfloat16) for _ in sets]

    def run(i):
        launch(sets[i], outs[i])

    run(0)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    ref = reference(*sets[0], chain)
    err = float((outs[0].float() - ref).norm() / ref.norm())
    row = {"rel_err": err, "ok": bool(err < 2e-2 and not torch.isnan(outs[0]).any())}
    if row["ok"]:
        for mode in ("graph", "eager"):
            t = time_launches(run, len(sets), device=device, mode=mode)
            row[f"{mode}_us"] = t.timing.seconds * 1e6
        row["device"] = t.timing.as_dict().get("device")
    return row


def family_launcher(N: int, K: int, chain: str, design: Mapping[str, int], device, M: int = 1) -> Callable:
    """launch((x, w, r), out): the gemm-epilogue kernel of `design` (a GEMV where Tm = 1), thin once bound."""
    from formloop.library.gemm_epilogue_launch import run as thin_run
    from formloop.library.qwen3_layer_kernels import _gemm

    plan = _gemm(design, M, N, K, chain)
    ws = plan.new_workspace(device)

    def launch(s, out):
        x, w, r = s
        ops = {"a": x, "b": w.T}
        if "residual" in chain:
            ops["residual"] = r
        thin_run(plan, ops, out, ws)
    return launch


def gemv_menu(chain: str, N: int, K: int, per_part: int, calibration: Mapping[str, float] | None = None):
    """gemv-epilogue-gpu's MILP pick, then the accepted GEMV_MENU designs by model rank (up to per_part): the
    model's best half, then every other design spread over the rest (a fit sees the slow side too);
    (designs, model us, workload)."""

    chip = get_chip("h200")
    t = get_template(gv.NAME, epilogue=chain, calibration=calibration)
    wl = gv.workload(1, N, K)
    pick = {k: int(v) for k, v in solve_milp(t.formulate(wl, chip)).assignment.items()}
    designs = [dict(zip(GEMV_MENU, v)) for v in itertools.product(*GEMV_MENU.values())]
    designs = [d for d in designs if not t.check(d, wl, chip) and d != pick]
    model = predict(t, chip, [Point(d, wl, 1.0) for d in designs])
    ranked = [d for _, d in sorted(zip(model, designs), key=lambda x: x[0])]
    head = ranked[: per_part // 2]
    tail = ranked[per_part // 2:]
    step = max(1, len(tail) // max(1, per_part - len(head) - 1))
    chosen = [pick] + head + tail[::step][: per_part - len(head) - 1]
    return chosen, list(predict(t, chip, [Point(d, wl, 1.0) for d in chosen])), wl


def gemm_menu(chain: str, M: int, N: int, K: int, per_part: int,
              calibration: Mapping[str, float] | None = None) -> tuple[list[dict], list[float]]:
    """gemm-epilogue-gpu's MILP pick, the model's best design of each tile shape Tm x Tn (up to half the menu:
    the priors rank 256 x 128 below 128 x 256 where it measured 12-14 % faster, round 12), its best two designs of
    each split count KS (splits the model ranks apart still measured), then its best designs, one per
    (Tm, Tn, Tk, KS, W), up to `per_part` in all; with their model times (us). `calibration`: fitted chip-side
    terms the model reads instead of the priors."""

    t = get_template(gemm_epilogue.NAME, dtype="bf16", epilogue=chain, calibration=calibration,
                     calibration_id="given" if calibration else "priors")
    f = t.formulate(gemm_epilogue.workload(M, N, K, "bf16", pb_=K), get_chip("h200"))
    s = solve_milp(f)
    designs, model = [{k: int(v) for k, v in s.assignment.items()}], [float(s.objective)]
    tiles = ranked_designs(f, per_part, distinct=("Tm", "Tn"))[:per_part // 2]
    for a, cost in tiles + ranked_designs(f, 2, group="KS") + ranked_designs(f, per_part, distinct=DISTINCT):
        a = {k: int(v) for k, v in a.items()}
        if len(designs) >= per_part:
            break
        if all(any(a[k] != b[k] for k in a if k != "G") for b in designs):  # G alone: a launch order
            designs.append(a)
            model.append(cost)
    return designs, model


def tune_gemms(p, device, n: int, gemv_calibration: Mapping[str, float] | None = None,
               gemm_calibration: Mapping[str, float] | None = None, max_rows: int = 1 << 30,
               log: Callable[[str], None] | None = None, cache: dict | None = None):
    """(the plan with each GEMM part's fastest correct design where it is >= 3 % faster than the plan's, the record
    per part). Parts with more than `max_rows` rows keep their design; `cache`: (part, M, design) -> measurement,
    shared across scenarios (decode's GEMM shapes do not depend on the history)."""

    cache = {} if cache is None else cache
    rec, parts = {}, dict(p.parts)
    for name in p.launched:
        part = p.parts[name]
        if part.kind != "gemm" or part.detail.get("M", 0) > max_rows:
            continue
        if part.detail.get("norm"):
            rec[name] = {"chosen": "plan", "note": "norm-fused GEMV: not timed alone"}
            continue
        M, N, K, chain = part.detail["M"], part.detail["N"], part.detail["K"], part.detail["chain"]
        if part.design.get("Tm") == 1:
            menu = gemv_menu(chain, N, K, 2 * n, gemv_calibration)[0]
            plan_d, config = {k: part.design[k] for k in GEMV_MENU}, gv.design_config
        else:
            menu = gemm_menu(chain, M, N, K, n + 1, gemm_calibration)[0]
            plan_d, config = dict(part.design), dict
        designs = [plan_d] + [d for d in menu if d != plan_d][:n]
        rows, sets = [], None
        for d in designs:
            key = (name, M, tuple(sorted(d.items())))
            if key not in cache:
                sets = sets or operand_sets(N, K, device, get_chip("h200").l2_bytes, M=M)
                try:
                    cache[key] = measure(family_launcher(N, K, chain, config(d), device, M=M), sets, chain,
                                         N // 2 if "glu" in chain else N, device)
                except Exception as exc:  # noqa: BLE001 (a design that fails here is recorded, not chosen)
                    cache[key] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            rows.append({"design": d, **cache[key]})
        del sets
        entry = measured_choice(rows, "graph_us", unit="us (gpu, graph)")
        if entry["chosen"] == "measured best":
            parts[name] = PartPlan(name, part.kind, part.time_us, config(entry["best_design"]),
                                   {**part.detail, "chosen_by": "measurement alone", "plan_design": part.design})
        if log and "best_us" in entry:
            log(f"{p.scenario.text}: {name} alone (gpu, graph): plan {entry['plan_us']:.1f} us {plan_d}, best of "
                f"{entry['timed']} {entry['best_us']:.1f} us {entry['best_design']} -> {entry['chosen']}")
        rec[name] = entry
    return LayerPlan(p.cfg, p.scenario, p.fusion, parts, p.layer), rec


ATTENTION_TILE = {"attention-decode": ("Bn",), "attention-prefill": ("Br", "Bc")}


def attention_menu(template: str, shape: str, n: int) -> list[dict]:
    """Up to `n` designs of the attention template at `shape` (priors): the model's best ceil(n/3), then its best
    design of each tile (decode: Bn; prefill: Br x Bc) and, decode, of each split count KS, not yet in, then its
    next best. Why the split counts: at a decode step's length (history + 1) the fastest launches measured keep one
    or two tiles per split with some trailing splits empty, which the priors rank low (RESULTS.md round 13)."""
    f = attention_service.template(template).formulate(attention_service.attention_workload(template, shape),
                                                       get_chip("h200"))
    as_int = lambda pairs: [{k: int(v) for k, v in a.items()} for a, _ in pairs]  # noqa: E731
    ranked = as_int(ranked_designs(f, max(n, 1) * 4))
    groups = as_int(ranked_designs(f, max(n, 1), distinct=ATTENTION_TILE[template]))
    if template == "attention-decode":
        groups += as_int(ranked_designs(f, max(n, 1), distinct=("KS",)))
    menu: list[dict] = []
    for a in ranked[:-(-n // 3)] + groups + ranked:
        if len(menu) >= n:
            break
        if a not in menu:
            menu.append(a)
    return menu


def tune_attention(p, device, n: int, weights=None, log: Callable[[str], None] | None = None):
    """(the plan with its attention part's fastest correct design where it is >= 3 % faster than the plan's, the
    record): the plan's design and `n` of `attention_menu`, each checked and timed alone in the layer's context."""
    old = p.parts["attn"]
    designs = [d for d in attention_menu(old.detail["template"], old.detail["shape"], n + 1)
               if d != {k: int(v) for k, v in old.design.items()}][:n]
    rows = qwen3_layer_measure.attention_in_context(p, designs, device, weights)
    rec = {**measured_choice(rows, "gpu_us"), "plan_design": rows[0]["design"],
           "source": "gpu (each design alone, graph, in the layer's context: its q and KV cache)"}
    if rec["chosen"] == "measured best":
        parts = {**p.parts, "attn": PartPlan("attn", old.kind, old.time_us, dict(rec["best_design"]),
                                             {**old.detail, "chosen_by": "in-context measurement",
                                              "plan_design": old.design})}
        if "attn_rope" in parts and parts["attn_rope"].design:  # the rope-inside part runs the same design
            r = parts["attn_rope"]
            parts["attn_rope"] = PartPlan(r.name, r.kind, r.time_us, dict(rec["best_design"]),
                                          {**r.detail, "chosen_by": "in-context measurement (attn)"})
        p = LayerPlan(p.cfg, p.scenario, p.fusion, parts, p.layer)
    if log and "best_us" in rec:
        log(f"{p.scenario.text}: attention in the layer's context (gpu, alone): plan {rec['plan_us']:.1f} us "
            f"{rec['plan_design']}, best of {rec['timed']} {rec['best_us']:.1f} us {rec['best_design']} -> "
            f"{rec['chosen']}")
    return p, rec


def measured_choice(rows: list[dict], key: str, **extra) -> dict:
    """The record of one part's choice by measurement: `rows` (the plan's design first, each timed under `key`
    or failed), the plan's time, the fastest timed design, and `chosen` = "measured best" when that design takes
    at most FASTER of the plan's time, else "plan" (also when the plan's design was not timed)."""
    timed = [r for r in rows if r.get(key)]
    rec = {"rows": rows, "plan_us": rows[0].get(key), "chosen": "plan", **extra}
    if timed and rec["plan_us"]:
        best = min(timed, key=lambda r: r[key])
        rec.update(best_design=best["design"], best_us=best[key], timed=len(timed))
        if best[key] < FASTER * rec["plan_us"]:
            rec["chosen"] = "measured best"
    return rec
