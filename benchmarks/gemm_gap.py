"""Why the GPU GEMM tiling family stays below cuBLAS under CUDA-graph replay, by measurement: a wide sample of the
family's designs is checked and timed beside torch.matmul (cuBLAS), and cuBLAS's own kernels are read off the
profiler, on a few bf16 shapes (default 64x4096x4096 and 1000x1000x1000, as M,N,K).

    PYTHONPATH=src python3 benchmarks/gemm_gap.py --out $OUT          # on the GPU (H200)
    PYTHONPATH=src python3 benchmarks/gemm_gap.py --dry-run           # anywhere: Triton interpreter, tiny shapes

Options: --shape M,N,K (repeatable; replaces the default shapes), --top N (60), --random N (60), --seed S (0),
--deep-stages 8,12,16 (off the menu: the 3 fastest tilings re-measured with those stages, Tk 64/128, where the
operand slots fit 227 KiB: does the menu's S <= 5 cost what cuBLAS's 8-16-stage kernels win?),
--workers N (cpu count - 2, for the parallel precompile), --out DIR (env OUT or 'out'). --dry-run: no GPU, the
shapes of gemm_eager.DRY_SHAPES (unless --shape), --top and --random at most 2, no precompile, no profiler.

Per shape (template gemm-tiling-gpu, schedules=True, h200 priors):
  1. Design set. 'pick': the enumerate solver's choice (gemm_eager.SOLVERS["enumerate"]); 'model-top': the model's
     next --top designs of distinct tilings (gemm_eager.tiling_of: Tm, Tn, Tk, S, W, KS, SC), in model order over
     every feasible design (gemm.top_designs); 'random': --random designs of further distinct tilings drawn
     uniformly over the remaining feasible designs (random.Random(--seed), fresh for each shape).
     model_rank: the design's position in that model order (0 = the model's cheapest design);
     model_us: the model's predicted time (template.evaluate_terms(...)["cost"], us), with its terms.
  2. Measurement (gemm_eager.run_shape): each design is compiled (in parallel first, gemm.precompile), checked
     against a float64 reference (fresh operands, NaN-poisoned output) and, if it passes, timed in graph mode
     (median us per launch, CUDA-graph replay cycling over operand sets larger than the L2); torch.matmul is
     timed in graph, eager and stream modes, as are the pick and the measured best.
  3. cuBLAS's kernels: torch.profiler (CUDA activity only) over 20 calls of torch.matmul(a, b, out=c) after a
     warm-up, once eagerly and once as a replayed CUDA graph of the call: every distinct device kernel with its
     calls per matmul and mean device time (us), its raw name, and what the name tells: tile (tilesize MxNxK, or
     nvjet's MxN_KxStages), cluster, warp-group size, split-K ('splitK') and segment-K ('segment_k_on/off')
     markers, and whether a separate reduce kernel ran.
  4. Summary: cublas_graph_us (torch.matmul, graph replay, us); best_us and its design, source and model rank
     (the family's fastest measured design, graph replay); ratio = cublas_graph_us / best_us (< 1: the family is
     slower than cuBLAS); measured / passed / failed counts (failures with their reasons); near_best_fraction
     (timed designs within 5% of best_us); the best 'model-top' and best 'random' designs (does a random sample
     beat the model's ranking?); and the family's measured best among designs of cuBLAS's tile (Tm, Tn), in both
     orientations: 'as_named' (Tm = first, Tn = second tile number) and 'transposed' (torch's row-major product is
     the column-major product C^T = B^T A^T to cuBLAS, so its tile's first number is usually on the N side),
     with the orientations that matched no measured design and the model rank of the family's best design of
     that tile (None: the family's feasible menu has no such tile).
Writes OUT/gemm_gap.json (nan and inf written as null) and prints a table; every time is in us, from 'gpu' or, in
a dry run, 'interpreter (cpu wall time: not a GPU figure)'."""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemm  # noqa: E402  benchmarks/gemm.py: top_designs, key_of, precompile
import gemm_eager  # noqa: E402  benchmarks/gemm_eager.py: SOLVERS, tiling_of, run_shape, DRY_SHAPES

SHAPES = [(64, 4096, 4096), (1000, 1000, 1000)]
SOURCES = ("pick", "model-top", "random")
NEAR_BEST = 1.05  # near_best_fraction: timed designs within 5% of the best
PROFILE_CALLS = 20
GPU_SOURCE, CPU_SOURCE = "gpu", "interpreter (cpu wall time: not a GPU figure)"
NO_GPU = "skipped: no GPU"


# -- 1. the design set --------------------------------------------------------------------------------------------
def model_cost(f, a) -> dict:
    """The model's time (us) of design `a` and its terms, as the enumerate solver reports them."""
    terms = f.template.evaluate_terms(a, f.params)
    return {"model_us": terms.pop("cost"), "model_terms": terms}


def design_set(f, ranked: list[dict], top: int, n_random: int, seed: int) -> list[dict]:
    """The pick, the model's next `top` designs of distinct tilings (model order) and `n_random` designs of further
    distinct tilings drawn uniformly from the remaining feasible designs. `ranked` is gemm.top_designs(f, 10**6):
    every feasible design in model order. Each entry: design, source, model_rank, model_us, model_terms."""
    rank = {gemm.key_of(a): i for i, a in enumerate(ranked)}
    pick = dict(gemm_eager.SOLVERS["enumerate"](f).assignment)
    chosen, seen = [(pick, "pick")], {gemm_eager.tiling_of(pick)}
    for a in ranked:  # as gemm_eager.candidates: one design a tiling, model order
        if len(chosen) > top:
            break
        if gemm_eager.tiling_of(a) not in seen:
            seen.add(gemm_eager.tiling_of(a))
            chosen.append((dict(a), "model-top"))
    order = list(range(len(ranked)))
    random.Random(seed).shuffle(order)
    n = 0
    for i in order:  # uniform over the remaining feasible designs; a tiling already taken is passed over
        if n >= n_random:
            break
        a = ranked[i]
        if gemm_eager.tiling_of(a) not in seen:
            seen.add(gemm_eager.tiling_of(a))
            chosen.append((dict(a), "random"))
            n += 1
    return [{"design": a, "source": src, "model_rank": rank.get(gemm.key_of(a)), **model_cost(f, a)}
            for a, src in chosen]


def first_rank_by_tile(ranked: list[dict]) -> dict[tuple, int]:
    """(Tm, Tn) -> model rank of the family's cheapest feasible design of that tile."""
    out: dict[tuple, int] = {}
    for i, a in enumerate(ranked):
        out.setdefault((int(a["Tm"]), int(a["Tn"])), i)
    return out


def deep_stage_designs(timed: list[dict], stages: tuple[int, ...], n_tilings: int = 3,
                       smem_limit: int = 227 * 1024) -> list[dict]:
    """Designs outside the family's menu (S > 5): the `n_tilings` fastest measured designs' tile, warps, split,
    schedule, group and load path, at Tk 64 and 128 with each of `stages` pipeline stages whose bf16 operand slots
    S·(Tm + Tn)·Tk·2 bytes fit `smem_limit` (the h200's shared memory a block may use)."""
    base, seen = [], set()
    for rec in sorted(timed, key=lambda d: d["graph"]["us"]):
        a = rec["design"]
        key = tuple(int(a.get(k, 0)) for k in ("Tm", "Tn", "W", "KS", "SC", "G", "L"))
        if key not in seen:
            seen.add(key)
            base.append(a)
        if len(base) == n_tilings:
            break
    out = []
    for a in base:
        for tk in (64, 128):
            for st in stages:
                if st * (int(a["Tm"]) + int(a["Tn"])) * tk * 2 <= smem_limit:
                    out.append({**{k: int(v) for k, v in a.items()}, "Tk": tk, "S": st})
    return out


# -- 3. cuBLAS's kernels ------------------------------------------------------------------------------------------
def _triple(pattern: str, name: str) -> list[int] | None:
    m = re.search(pattern + r"(\d+)x(\d+)x(\d+)", name)
    return [int(x) for x in m.groups()] if m else None


def parse_kernel(name: str) -> dict:
    """What a cuBLAS (or CUTLASS) kernel name tells: family, tile [M, N, K] and stages, cluster, warp-group size,
    split-K and segment-K markers, whether it is a reduce kernel, operand layout. None where the name is silent.
    sm90_xmma names: tilesize{M}x{N}x{K}, cluster{..}, warpgroupsize{..}, execute_segment_k_{on|off}, _{tn|nn..}_;
    nvjet names: nvjet_[smXX_]{types}_{M}x{N}_{K}x{stages}_{cm}x{cn}_{v|h}_..._{layout} (read as such: inferred
    from public names, not a documented format); CUTLASS names: _{M}x{N}_{K}x{stages}_{layout}_align."""
    low = name.lower()
    tile, cluster, stages = _triple("tilesize", name), _triple("cluster", name), None
    nv = re.search(r"nvjet_(?:sm\d+_)?[a-z0-9]+_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_", name)
    cut = re.search(r"_(\d+)x(\d+)_(\d+)x(\d+)_[tn]{2}_align", name)
    if tile is None and nv:
        tm, tn, tk, stages, cm, cn = (int(x) for x in nv.groups())
        tile, cluster = [tm, tn, tk], cluster or [cm, cn, 1]
    elif tile is None and cut:
        tm, tn, tk, stages = (int(x) for x in cut.groups())
        tile = [tm, tn, tk]
    seg = re.search(r"segment_k_(on|off)", name)
    lay = re.search(r"_([tn]{2})_(?:[tn]_)?(?:tilesize|align)", name) or re.search(r"_([TN]{2,3})$", name)
    if "reduce" in low:
        family = "reduce"
    elif re.search(r"\bsm\d+_xmma", name):
        family = "xmma"
    else:
        family = next((f for f in ("nvjet", "cutlass", "gemv", "gemm") if f in low), "other")
    return {"name": name, "family": family, "tile": tile, "stages": stages, "cluster": cluster,
            "warpgroup": _triple("warpgroupsize", name), "split_k": "splitk" in low,
            "segment_k": seg.group(1) if seg else None, "reduce": "reduce" in low,
            "layout": lay.group(1).lower() if lay else None}


def kernels_of(events, calls: int) -> list[dict]:
    """Distinct device kernels of profiler events (copies and fills left out): calls, calls per matmul, mean and
    total device us, parsed name; the costliest first."""
    from torch.autograd import DeviceType

    agg: dict[str, list] = {}
    for e in events:
        if e.device_type != DeviceType.CUDA or e.name.startswith(("Memcpy", "Memset")):
            continue
        n_t = agg.setdefault(e.name, [0, 0.0])
        n_t[0] += 1
        n_t[1] += e.time_range.elapsed_us()
    out = [{"calls": n, "per_matmul": n / calls, "mean_us": t / n, "total_us": t, **parse_kernel(name)}
           for name, (n, t) in agg.items()]
    return sorted(out, key=lambda k: -k["total_us"])


def profile_cublas(shape, device, gen, calls: int = PROFILE_CALLS) -> dict:
    """torch.matmul(a, b, out=c) on the shape's bf16 operands under torch.profiler (CUDA activity): once as eager
    calls and once as replays of a CUDA graph of the call (what the graph timing runs), after a warm-up."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from formloop.library.gemm_tiling_instance import TorchGemm

    case = TorchGemm(*shape, "bf16").new_case(device, gen)

    def mm():
        torch.matmul(case.a, case.b, out=case.c)

    out: dict = {"calls": calls}
    for mode in ("eager", "graph"):
        try:
            run = mm
            for _ in range(5):
                mm()
            torch.cuda.synchronize()
            if mode == "graph":
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    mm()
                g.replay()
                run = g.replay
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    run()
                torch.cuda.synchronize()
            out[mode] = kernels_of(prof.events(), calls)
        except Exception as exc:  # noqa: BLE001 - a failed profile is recorded, the run goes on
            out[mode] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    return out


def cublas_view(prof) -> dict:
    """The profile read for the summary: its main kernel (the costliest non-reduce one; graph profile first) and
    its tile, cluster, split-K/segment-K, and whether a separate reduce kernel ran."""
    if not isinstance(prof, dict):
        return {"profile": prof}
    mode = next((m for m in ("graph", "eager") if isinstance(prof.get(m), list) and prof[m]), None)
    if mode is None:
        return {"profile": "no kernels recorded"}
    ks = prof[mode]
    main = next((k for k in ks if not k["reduce"]), ks[0])
    other = prof.get("eager" if mode == "graph" else "graph")
    return {"profile": mode, "main_kernel": main["name"], "main_us": main["mean_us"], "tile": main["tile"],
            "stages": main["stages"], "cluster": main["cluster"], "warpgroup": main["warpgroup"],
            "split_k": any(k["split_k"] or k["segment_k"] == "on" for k in ks),
            "segment_k": main["segment_k"], "reduce_kernel": any(k["reduce"] for k in ks),
            "kernels_per_matmul": sum(k["per_matmul"] for k in ks),
            "same_kernels_eager_and_graph": (sorted(k["name"] for k in other) == sorted(k["name"] for k in ks)
                                             if isinstance(other, list) else None)}


# -- 4. the summary -----------------------------------------------------------------------------------------------
def _passed(rec) -> bool:
    from formloop.evaluate.measurement import Correctness

    return "check" in rec and Correctness(**rec["check"]).passed


def _failure(rec) -> str | None:
    if "failure" in rec:
        return rec["failure"]
    if not _passed(rec):
        c = rec.get("check", {})
        return (f"check failed: rel_error {c.get('rel_error')} (tolerance {c.get('tolerance')}), max_error_rms "
                f"{c.get('max_error_rms')}, all_written {c.get('all_written')}")
    return None


def _brief(rec) -> dict | None:
    if rec is None:
        return None
    return {"graph_us": rec["graph"]["us"], "tiling": list(gemm_eager.tiling_of(rec["design"])),
            "design": rec["design"], "source": rec["source"], "model_rank": rec["model_rank"],
            "model_us": rec["model_us"]}


def _ratio(ref, ours):
    return ref / ours if ref and ours and math.isfinite(ref) and math.isfinite(ours) else None


def tile_match(timed: list[dict], tile, cublas_us, family_tiles: dict, why: str = "") -> dict:
    """The family's measured best among designs of cuBLAS's (Tm, Tn), in both orientations of its tile."""
    if not tile:
        return {"note": f"no cuBLAS tile ({why})"}
    out: dict = {"cublas_tile": tile}
    for orient, tmn in (("as_named", (tile[0], tile[1])), ("transposed", (tile[1], tile[0]))):
        hits = [d for d in timed if (int(d["design"]["Tm"]), int(d["design"]["Tn"])) == tmn]
        best = min(hits, key=lambda d: d["graph"]["us"]) if hits else None
        out[orient] = {"Tm": tmn[0], "Tn": tmn[1], "measured": len(hits), "best": _brief(best),
                       "ratio": _ratio(cublas_us, best["graph"]["us"]) if best else None,
                       "family_best_model_rank": family_tiles.get(tmn)}
    out["matched_nothing"] = [o for o in ("as_named", "transposed") if not out[o]["measured"]]
    return out


def summarize_shape(row: dict, view: dict, family_tiles: dict) -> dict:
    recs = row["designs"]
    timed = [d for d in recs if "graph" in d]
    cub = (row.get("torch") or {}).get("graph", {}).get("us")
    best = min(timed, key=lambda d: d["graph"]["us"]) if timed else None
    fails = [(i, _failure(d)) for i, d in enumerate(recs) if _failure(d)]
    by_source = {}
    for src in SOURCES:
        mine = [d for d in timed if d["source"] == src]
        b = min(mine, key=lambda d: d["graph"]["us"]) if mine else None
        by_source[src] = {"designs": sum(d["source"] == src for d in recs), "timed": len(mine), "best": _brief(b),
                          "ratio": _ratio(cub, b["graph"]["us"]) if b else None}
    return {"shape": row["shape"], "cublas_graph_us": cub, "best": _brief(best),
            "ratio_cublas_over_best": _ratio(cub, best["graph"]["us"]) if best else None,
            "measured": len(recs), "passed": sum(_passed(d) for d in recs), "timed": len(timed),
            "failed": len(fails), "failures": [{"index": i, "source": recs[i]["source"],
                                                "tiling": list(gemm_eager.tiling_of(recs[i]["design"])),
                                                "reason": r} for i, r in fails],
            "failure_reasons": dict(Counter(r.split(":")[0] for _, r in fails)),
            "near_best_fraction": (sum(d["graph"]["us"] <= NEAR_BEST * best["graph"]["us"] for d in timed)
                                   / len(timed)) if timed else None,
            "by_source": by_source, "random_beats_model_top": (
                by_source["random"]["best"]["graph_us"] < by_source["model-top"]["best"]["graph_us"]
                if by_source["random"]["best"] and by_source["model-top"]["best"] else None),
            "cublas": view, "at_cublas_tile": tile_match(
                timed, view.get("tile"), cub, family_tiles,
                why=view["profile"] if "main_kernel" not in view else "the kernel name carries none")}


# -- 5. output ----------------------------------------------------------------------------------------------------
def finite(obj):
    """JSON-safe copy: nan/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def _f(x, fmt: str = "8.1f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and x is not None and math.isfinite(x) else \
        format("-", ">" + fmt.split(".")[0])


def print_table(result: dict) -> None:
    src = result["source"]
    print(f"\nbf16 GEMM gap to cuBLAS under CUDA-graph replay: median us per launch ({src}); ratio = cuBLAS us / "
          f"family us (< 1: the family is slower); rank = position in the model's order (0 = cheapest)")
    print(f"{'shape':>16} {'cuBLAS':>8} {'best':>8} {'ratio':>6} {'best source':>11} {'rank':>5} "
          f"{'best tiling (Tm,Tn,Tk,S,W,KS,SC)':>34} {'pick':>8} {'top best':>8} {'rnd best':>8} "
          f"{'meas/pass/fail':>14} {'<=5%':>5}")
    for sh in result["shapes"]:
        s, b = sh["summary"], sh["summary"]["best"] or {}
        us = {src: (v["best"] or {}).get("graph_us") for src, v in s["by_source"].items()}
        print(f"{'x'.join(map(str, s['shape'])):>16} {_f(s['cublas_graph_us'])} {_f(b.get('graph_us'))} "
              f"{_f(s['ratio_cublas_over_best'], '6.3f')} {b.get('source', '-'):>11} {_f(b.get('model_rank'), '5d')} "
              f"{str(tuple(b.get('tiling', ()))):>34} {_f(us['pick'])} {_f(us['model-top'])} {_f(us['random'])} "
              f"{str(s['measured']) + '/' + str(s['passed']) + '/' + str(s['failed']):>14} "
              f"{_f(s['near_best_fraction'], '5.2f')}")
    for sh in result["shapes"]:
        s = sh["summary"]
        print(f"\n{'x'.join(map(str, s['shape']))} (M,N,K):")
        prof = sh["cublas_profile"]
        if not isinstance(prof, dict):
            print(f"  cuBLAS kernels: {prof}")
        else:
            for mode in ("graph", "eager"):
                ks = prof.get(mode)
                if not isinstance(ks, list):
                    print(f"  cuBLAS kernels ({mode}): {ks}")
                    continue
                for k in ks:
                    print(f"  cuBLAS kernel ({mode}, gpu): {k['per_matmul']:.2f}/matmul, mean {k['mean_us']:.2f} us, "
                          f"tile {k['tile']} stages {k['stages']} cluster {k['cluster']} warpgroup {k['warpgroup']} "
                          f"splitK {k['split_k']} segment_k {k['segment_k']} reduce {k['reduce']}: {k['name'][:150]}")
        at = s["at_cublas_tile"]
        if "note" in at:
            print(f"  at cuBLAS's tile: {at['note']}")
        else:
            for o in ("as_named", "transposed"):
                e = at[o]
                best = e["best"]
                txt = "matched no measured design" if not best else (
                    f"best {best['graph_us']:.1f} us (ratio {_f(e['ratio'], '.3f')}, {best['source']}, rank "
                    f"{best['model_rank']}, tiling {tuple(best['tiling'])})")
                print(f"  at cuBLAS's tile {o} (Tm={e['Tm']}, Tn={e['Tn']}): {e['measured']} measured, {txt}; "
                      f"family's best design of this tile: model rank {e['family_best_model_rank']}")
        om = s.get("off_menu")
        if om:
            b = om["best"]
            print(f"  off the menu (S in {om['stages']}): {om['timed']} of {om['designs']} timed; best "
                  + ("none" if not b else f"{b['graph_us']:.1f} us (ratio {_f(om['ratio'], '.3f')}, tiling "
                     f"{tuple(b['tiling'])})"))
        for reason, n in s["failure_reasons"].items():
            print(f"  failed: {n} x {reason}")


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.replace("x", ",").split(",")]
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"--shape wants M,N,K (three positive integers), got {text!r}")
    return tuple(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--top", type=int, default=60, help="the model's top designs of distinct tilings besides the pick")
    p.add_argument("--random", type=int, default=60, help="uniformly drawn designs of further distinct tilings")
    p.add_argument("--seed", type=int, default=0, help="seed of the random draw (random.Random, fresh a shape)")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2), help="precompile processes")
    p.add_argument("--shape", type=parse_shape, action="append", help="M,N,K (repeatable): replaces the defaults")
    p.add_argument("--dry-run", action="store_true", help="no GPU: Triton interpreter, tiny shapes, 2+2 designs")
    p.add_argument("--deep-stages", type=lambda t: [int(x) for x in t.split(",")], default=None,
                   help="comma list of stage counts beyond the menu (e.g. 8,12,16): the 3 fastest measured tilings "
                        "re-measured at Tk 64/128 with those stages where the operand slots fit 227 KiB ('off_menu')")
    args = p.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (as gemm_eager.main)
    import torch

    from formloop.hw.chips import get_chip
    from formloop.library import get_template
    from formloop.library.gemm_tiling import workload

    gpu = not args.dry_run
    if gpu and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run off the GPU", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    shapes = args.shape or (SHAPES if gpu else gemm_eager.DRY_SHAPES)
    top, n_random = (args.top, args.random) if gpu else (min(args.top, 2), min(args.random, 2))
    template, chip = get_template("gemm-tiling-gpu", dtype="bf16", schedules=True), get_chip("h200")
    result: dict = {"command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "source": GPU_SOURCE if gpu else CPU_SOURCE, "template": "gemm-tiling-gpu (schedules=True)",
                    "calibration": "priors", "units": "us", "top": top, "random": n_random, "seed": args.seed}
    sets, tiles = {}, {}
    for s in shapes:
        f = template.formulate(workload(s, "bf16"), chip)
        ranked = gemm.top_designs(f, 10 ** 6)
        sets[s], tiles[s] = design_set(f, ranked, top, n_random, args.seed), first_rank_by_tile(ranked)
        result.setdefault("feasible_designs", {})["x".join(map(str, s))] = len(ranked)
    print(f"[{time.time() - t0:6.1f} s] design sets: " + ", ".join(f"{s}: {len(d)}" for s, d in sets.items()),
          flush=True)
    if gpu:  # as gemm_eager.main: fill Triton's cache in parallel, then the device's facts and the timing policy
        from formloop.measure.device import device_facts

        jobs = [(e["design"], s, "bf16") for s, ds in sets.items() for e in ds]
        result["precompile"] = gemm.precompile(jobs, args.workers)
        result["device"] = device_facts()
        l2 = result["device"]["l2_bytes"]
        print(f"[{time.time() - t0:6.1f} s] precompiled {result['precompile']['kernels']} kernels", flush=True)
    else:
        result["precompile"], result["device"], l2 = NO_GPU, {"device": "dry run (no GPU)"}, 1 << 20
    ctx = gemm_eager.run_context(gpu, l2)
    device, gen = ctx["device"], ctx["gen"]
    result["sms"] = ctx["sms"]
    result["shapes"] = []
    for s in shapes:
        row = gemm_eager.run_shape(s, [e["design"] for e in sets[s]], ctx, with_torch=True)
        for rec, meta in zip(row["designs"], sets[s]):
            rec.update({k: v for k, v in meta.items() if k != "design"})
        prof = profile_cublas(s, device, gen) if gpu else NO_GPU
        row["cublas_profile"] = prof
        row["summary"] = summarize_shape(row, cublas_view(prof), tiles[s])
        if args.deep_stages:  # the family's kernel beyond its menu's 5 stages (cuBLAS's nvjet kernels run 8-16)
            deep = deep_stage_designs([d for d in row["designs"] if "graph" in d], tuple(args.deep_stages))
            if gpu:
                gemm.precompile([(a, s, "bf16") for a in deep], args.workers)
            off = gemm_eager.run_shape(s, deep, ctx, with_torch=False)["designs"] if deep else []
            timed = [d for d in off if "graph" in d]
            best = min(timed, key=lambda d: d["graph"]["us"]) if timed else None
            row["off_menu"] = off
            row["summary"]["off_menu"] = {
                "designs": len(off), "timed": len(timed), "stages": args.deep_stages,
                "best": None if best is None else {"graph_us": best["graph"]["us"], "design": best["design"],
                                                   "tiling": list(gemm_eager.tiling_of(best["design"]))},
                "ratio": _ratio(row["summary"]["cublas_graph_us"], best["graph"]["us"]) if best else None}
        result["shapes"].append(row)
        print(f"[{time.time() - t0:6.1f} s] {s} done: {row['summary']['timed']} designs timed", flush=True)
    result["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "gemm_gap.json"), "w") as fh:
        json.dump(finite(result), fh, indent=1, allow_nan=False)
    print_table(result)
    print(f"total {result['seconds']:.0f} s (wall); wrote {os.path.join(args.out, 'gemm_gap.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
