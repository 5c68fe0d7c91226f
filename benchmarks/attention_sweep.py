"""Helpers of benchmarks/attention.py: which designs to measure, parallel pre-compilation, the
acceptance checks (four input kinds, eager and CUDA graph) and eager timing.

Nothing here prints; the benchmark owns the output."""
from __future__ import annotations

import math
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

DECODE = "attention-decode"
PREFILL = "attention-prefill"


NAMES = {DECODE: ("Bn", "KS", "QP", "S", "W", "MG", "TM"), PREFILL: ("Br", "Bc", "S", "W", "GQ", "TM")}


def key_of(family: str, a) -> tuple:
    return tuple(int(a[k]) for k in NAMES[family])


def as_assignment(family: str, key) -> dict:
    return dict(zip(NAMES[family], key))


def _feasible(f):
    from formloop.solve.enumerate import assignment_at, feasible_mask, term_grid

    flat = np.flatnonzero(feasible_mask(f))
    cost = term_grid(f, f.cost).ravel()[flat]
    order = flat[np.argsort(cost, kind="stable")]
    return [assignment_at(f, int(i)) for i in order]


def top_designs(f, n: int) -> list[dict]:
    return _feasible(f)[:n]


def sweep_set(family: str, f, *, top: int, random: int, seed: int, extra=()) -> list[dict]:
    """The model's `top` designs (also of each extra formulation), a structured grid over the
    decisions that move the most bytes (decode: every feasible Bn × KS at the model's best S, W,
    QP; prefill: every feasible tile), and a uniform random sample of the feasible menu."""
    ranked = _feasible(f)
    chosen: dict[tuple, dict] = {}
    for g in (f, *extra):
        for a in _feasible(g)[:top]:
            chosen.setdefault(key_of(family, a), a)
    feasible = {key_of(family, a): a for a in ranked}
    if family == DECODE:
        seen_grid = set()
        for a in ranked:  # the model's best (S, W, QP, MG) for every (Bn, KS, TM)
            g = (a["Bn"], a["KS"], a["TM"])
            if g not in seen_grid:
                seen_grid.add(g)
                chosen.setdefault(key_of(family, a), a)
        for a in ranked[:5]:  # the merge alternative and the neighbours of the model's best
            for change in ({"MG": 0}, {"MG": 2}, {"S": a["S"] + 1}, {"S": a["S"] - 1}, {"W": 12 - a["W"]}, {"QP": 2},
                           {"TM": 1 - a["TM"]}, {"S": 6}):
                k = key_of(family, {**a, **change})
                if k in feasible:
                    chosen.setdefault(k, feasible[k])
    else:
        for a in ranked:  # every tile shape and stage count, on the copy engine, longest block first
            if a["TM"] == 1 and a["GQ"] == 0:
                chosen.setdefault(key_of(family, a), a)
        for a in ranked[:8]:
            for change in ({"TM": 0}, {"GQ": 1}):
                k = key_of(family, {**a, **change})
                if k in feasible:
                    chosen.setdefault(k, feasible[k])
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(ranked), size=min(random, len(ranked)), replace=False):
        chosen.setdefault(key_of(family, ranked[int(i)]), ranked[int(i)])
    return list(chosen.values())


# The measured bests of the H200 run of 2026-12-01 11:00 (and their untried merge/warp/split neighbours):
# measured again at every length where they are feasible, so a model change cannot lose them.
ANCHORS = {DECODE: ((64, 8, 2, 3, 4, 1, 0), (256, 8, 2, 2, 4, 1, 1), (256, 16, 4, 2, 8, 0, 1),
                    (128, 16, 4, 3, 4, 1, 1), (128, 8, 2, 3, 8, 1, 1), (128, 16, 4, 3, 4, 0, 1),
                    (128, 16, 4, 3, 8, 0, 1), (64, 32, 4, 4, 4, 1, 1), (64, 32, 4, 4, 4, 0, 1),
                    (128, 32, 4, 3, 4, 1, 1)),
           PREFILL: ((64, 64, 3, 4, 0, 1), (128, 128, 3, 8, 0, 1), (128, 128, 4, 8, 0, 1), (128, 64, 3, 4, 0, 1))}


def candidates(family: str, f, *, top: int, anchors=()) -> list[dict]:
    """A small model-ranked set, in the order it is measured (a run cut short by its budget keeps the
    first): the model's four best; the one-decision neighbours of its best that the model is least sure
    of (decode: the three merges, the load path, the warps and the stages, and six stages at the same
    and at half the tile, which the model ties with three stages where the copy bandwidth binds;
    prefill: the load path and the launch order); the `anchors` (keys: an earlier run's bests) that are
    feasible here; (decode) the same neighbours of its second and third best; the rest of its `top`
    designs; its best design for each value of the decisions that shape the work (decode: each Bn,
    each KS, each QP; prefill: each Br × Bc, each S)."""
    ranked = _feasible(f)
    feasible = {key_of(family, a): a for a in ranked}
    chosen: dict[tuple, dict] = {}
    for a in ranked[:min(top, 4)]:
        chosen.setdefault(key_of(family, a), a)

    def neighbours(designs):
        for a in designs:
            changes = ({"MG": 0}, {"MG": 1}, {"MG": 2}, {"TM": 1 - a["TM"]}, {"W": 12 - a["W"]}, {"S": a["S"] + 1},
                       {"S": a["S"] - 1}, {"S": 6}, {"S": 6, "Bn": a["Bn"] // 2}) if family == DECODE else \
                ({"TM": 0}, {"TM": 1}, {"GQ": 1}, {"GQ": 0})
            for change in changes:
                k = key_of(family, {**a, **change})
                if k in feasible:
                    chosen.setdefault(k, feasible[k])

    neighbours(ranked[:1])
    for k in anchors:
        if tuple(k) in feasible:
            chosen.setdefault(tuple(k), feasible[tuple(k)])
    if family == DECODE:
        neighbours(ranked[1:3])
    for a in ranked[:top]:
        chosen.setdefault(key_of(family, a), a)
    groups = ((lambda a: ("Bn", a["Bn"])), (lambda a: ("KS", a["KS"])), (lambda a: ("QP", a["QP"]))) \
        if family == DECODE else ((lambda a: ("tile", a["Br"], a["Bc"])), (lambda a: ("S", a["S"])))
    seen = set()
    for a in ranked:
        for group in groups:
            if group(a) not in seen:
                seen.add(group(a))
                chosen.setdefault(key_of(family, a), a)
    return list(chosen.values())


def _plan(job):
    family, a, wl = job
    if family == DECODE:
        from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan

        return DecodePlan.of(DecodeConfig.from_assignment(a), wl, "bf16")
    from formloop.library.attention_prefill_kernel import PrefillConfig, PrefillPlan

    return PrefillPlan.of(PrefillConfig.from_assignment(a), wl, "bf16")


def _compile_one(job) -> str:
    try:
        _plan(job).warmup()
        return ""
    except Exception as exc:  # noqa: BLE001 - reported; the measurement records the failure class
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def compile_key(job) -> tuple:
    family, a, wl = job
    if family == DECODE:
        ksp = 1 << (a["KS"] - 1).bit_length()  # the merge's KSP constexpr
        return (family, a["Bn"], a["QP"], a["S"], a["W"], a["MG"], a["TM"], ksp, wl.get("page", 0), wl["D"],
                wl["Hq"] // wl["Hkv"])
    return (family, *key_of(family, a), wl["D"], wl["Hq"] // wl["Hkv"], wl.get("causal", 1))


def precompile(jobs: list, workers: int, deadline: float) -> dict:
    """Fill Triton's on-disk cache in parallel processes, one compile per distinct kernel."""
    import multiprocessing as mp

    seen, unique = set(), []
    for job in jobs:
        k = compile_key(job)
        if k not in seen:
            seen.add(k)
            unique.append(job)
    start = time.time()
    errors = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_compile_one, j) for j in unique]
        for fut in futures:
            try:
                e = fut.result(timeout=max(1.0, deadline - time.time()))
            except Exception as exc:  # noqa: BLE001 - a compile past the deadline compiles at launch instead
                e = f"{type(exc).__name__}: not compiled before the deadline"
            if e:
                errors.append(e)
    return {"kernels": len(unique), "seconds": time.time() - start, "error_count": len(errors), "errors": errors[:8]}


def graph_check(runnable, device: str, generator):
    """The correctness check, with the launch replayed from a CUDA graph (the timed mode)."""
    import torch

    from formloop.evaluate.gpu import check

    case = runnable.new_case(device, generator)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        runnable.launch(case)  # compiled and warmed outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        runnable.launch(case)
    runnable.poison(case)
    graph.replay()
    torch.cuda.synchronize()

    class Replayed:  # check() draws a case, poisons, launches: here the launch is the replay
        name, tolerance = runnable.name, runnable.tolerance

        def new_case(self, *_):
            return case

        def poison(self, _):
            pass

        def launch(self, _):
            pass

        output, reference = staticmethod(runnable.output), staticmethod(runnable.reference)
    return check(Replayed(), device, generator)


def acceptance(make, device: str, generator) -> dict:
    """`make(kind)` -> runnable; every input kind checked eager and from a graph."""
    from formloop.evaluate.gpu import check
    from formloop.library.attention_cases import INPUT_KINDS

    out = {}
    for kind in INPUT_KINDS:
        r = make(kind)
        for mode, fn in (("eager", check), ("graph", graph_check)):
            c = fn(r, device, generator)
            out[f"{kind}/{mode}"] = {"passed": c.passed, "rel_error": c.rel_error, "max_error_rms": c.max_error_rms}
    out["all_passed"] = all(v["passed"] for v in out.values() if isinstance(v, dict))
    return out


def time_eager(runnable, device: str, generator, l2_bytes: int, reps: int = 7, max_sets: int = 32) -> dict:
    """Median µs per launch of eager launches (host launch cost included) over rotating cases."""
    import torch

    n_sets = max(1, min(max_sets, math.ceil(3 * l2_bytes / max(1, runnable.case_bytes))))
    cases = [runnable.new_case(device, generator) for _ in range(n_sets)]
    for c in cases:
        runnable.launch(c)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per = []
    for _ in range(reps):
        start.record()
        for c in cases:
            runnable.launch(c)
        end.record()
        end.synchronize()
        per.append(start.elapsed_time(end) / n_sets * 1e3)
    per.sort()
    plan = getattr(runnable, "plan", None)
    thin = plan.thin_launcher(device) if hasattr(plan, "thin_launcher") else None  # ours: the bound launch
    path = {"launch_path": thin.path, "fallback": thin.fallback, "jit_calls": thin.jit_calls} if thin else {}
    return {"median_us": per[len(per) // 2], "launches": n_sets * reps, "operand_sets": n_sets, **path,
            "timing": f"eager launches over {n_sets} operand sets, {reps} event-timed rounds, median"}
