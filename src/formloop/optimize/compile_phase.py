"""The torch.compile baselines of a campaign, in two steps that fit a 10-minute device call:

1. warm: every problem's reference is compiled once, in parallel across the process pool (each in a
   sandboxed child: Inductor's lowering and Triton's compiles are CPU work), on the device the
   harness uses and under its protocol (the `COMPILED` ModelNew, built as the harness builds a
   candidate, called under no_grad on the dtype variant's inputs). Inductor's FX graph cache,
   AOTAutograd cache and Triton's kernel cache live under OUT/compile_cache (`compile_env`).
2. time: one problem at a time, the sandboxed harness child compiles the same ModelNew from the warm
   cache (seconds instead of the 30-60 s of a cold compile), checks it (fresh inputs, float64 truth,
   the campaign's tolerance) and times it beside eager, as before. Nothing else uses the device
   while it times (the warm step has ended).

Every problem gets a baseline, those that keep the reference included: the store keeps torch.compile's
time (`compile_s`, 0.0 when torch.compile failed or was incorrect) and eager's time of the same run
(`compile.ref_s`), so the report can compare formloop with torch.compile on every problem (a problem
that keeps the reference compares eager with torch.compile). Resumable: a problem with a stored
baseline is not done again, no step starts after the deadline, and a call with a deadline warms only
as many references as it can expect to warm and time before it (`expected_s` each: the cache lives as long as OUT
does)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

CACHE = "compile_cache"
WARM_LIMIT_S = 180.0   # one cold compile (a level-3 model takes 1-2 minutes)
# A call warms only what it can expect to warm and then time before its deadline (RESULTS.md, round 10: a timing
# child from a warm cache 2.1-7.0 s, mean 4.2; a cold compile in the warm step 28-47 s, 12 of them at once).
TIME_EST_S = 5.0       # one timing child from a warm cache
WARM_EST_S = 45.0      # one reference's cold compile in the warm step (the pool runs `workers` at once)


def expected_s(workers: int) -> float:
    """Seconds one baseline is expected to add to a call: its timing child, and its share of a warm wave."""
    return TIME_EST_S + WARM_EST_S / max(1, workers)


def compile_env(cache_dir: str | Path) -> dict[str, str]:
    """The environment that makes Inductor (and the Triton kernels it compiles) cache under
    `cache_dir`: FX graph and AOTAutograd caches on (their defaults, stated). Always `cache_dir`:
    Inductor writes its default into TORCHINDUCTOR_CACHE_DIR once it has looked, so a value found
    in the environment may be torch's own, not the user's. One compile thread: the warm step's
    process pool is its parallelism, and a timing child loads from the warm cache, so Inductor's own
    pool of compile workers (one per core, each importing torch) would only cost start-up time
    (RESULTS.md, torch.compile baselines: 30-41 s per timing child before, 21-26 s after)."""
    cache = str(Path(cache_dir).resolve())
    return {"TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": str(Path(cache) / "triton"),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
            "TORCHINDUCTOR_COMPILE_THREADS": "1"}


def baseline_file(path: str, small: bool, out_dir: str) -> str:
    """OUT/baselines/NAME_compiled.py: the ModelNew that is torch.compile of the reference."""
    from formloop.optimize.attempt import COMPILED

    target = Path(out_dir) / "baselines" / f"{Path(path).stem}_compiled.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    text = COMPILED.format(name=Path(path).stem, path=str(Path(path).resolve()), small=small)
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return str(target)


def warm_job(problem: str, candidate: str, device: str, precision: str | None) -> dict[str, Any]:
    """In the sandboxed child: build the compiled ModelNew as the harness builds a candidate and call
    it once under no_grad on get_inputs() (cast as the harness casts them): the compile lands in the cache."""
    import torch

    from formloop.measure.session import PRECISIONS, _cast, load_candidate
    from formloop.sol.problem import call_inputs, load_problem

    prob = load_problem(problem)
    dtype = PRECISIONS[precision] if precision else None
    torch.manual_seed(0)
    init = call_inputs(prob, "get_init_inputs")
    with torch.device(device):
        model = load_candidate(candidate).build(init)
    model = model.to(device)
    if dtype is not None:
        model = model.to(dtype)
    inputs = _cast(call_inputs(prob, "get_inputs"), dtype, device)
    t0 = time.monotonic()
    with torch.no_grad():
        model(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    return {"first_call_s": round(time.monotonic() - t0, 3)}


def warm_compile(path: str, problem: str, *, small: bool, out_dir: str, tier: str, dtype: str = "fp32",
                 cache_dir: str) -> dict[str, Any]:
    """Step 1 for one problem (a pool task): compile its reference into the cache in a sandboxed
    child. Never raises: {'warm_s', 'ok', 'note'}."""
    from formloop.measure.sandbox import Limits, RunStatus, run_in_child

    t0 = time.monotonic()
    os.environ.update(compile_env(cache_dir))
    try:
        target = baseline_file(path, small, out_dir)
        outcome = run_in_child(warm_job, problem, target, "cuda" if tier == "gpu" else "cpu",
                               dtype if dtype != "fp32" else None, limits=Limits(wall_s=WARM_LIMIT_S))
    except Exception as exc:  # noqa: BLE001 - a cold compile in the timing child instead
        return {"warm_s": round(time.monotonic() - t0, 2), "ok": False, "note": f"{type(exc).__name__}: {exc}"[:200]}
    ok = outcome.status is RunStatus.COMPLETED
    note = "" if ok else f"warm compile {outcome.status.name.lower()}: {(outcome.message or str(outcome.error))[:160]}"
    return {"warm_s": round(time.monotonic() - t0, 2), "ok": ok, "note": note}


def time_baseline(path: str, problem: str, *, small: bool, out_dir: str, tolerance: str,
                  limit_s: float | None = None, dtype: str = "fp32") -> dict[str, Any]:
    """Step 2 for one problem: the harness (sandboxed child) on the compiled ModelNew: correctness,
    then torch.compile's and eager's times. {'compile_s' (None: failed or incorrect), 'ref_s', 'note'}."""
    from formloop.measure.jobs import run_harness
    from formloop.measure.sandbox import Limits

    t0 = time.monotonic()
    try:
        h = run_harness(problem, baseline_file(path, small, out_dir), tolerance=tolerance, sets=1,
                        limits=None if limit_s is None else Limits(wall_s=min(600.0, float(limit_s))),
                        tf32_baseline=dtype == "fp32", **({"precision": dtype} if dtype != "fp32" else {}))
    except Exception as exc:  # noqa: BLE001
        return {"compile_s": None, "cut_by_deadline": False, "ref_s": None,
                "note": f"{type(exc).__name__}: {exc}"[:300], "wall_s": round(time.monotonic() - t0, 2)}
    t = (h.get("candidate_time") or {}).get("seconds") if h.get("correct") else None
    from formloop.optimize.attempt import CUT_S, folded
    cut = limit_s is not None and limit_s < CUT_S and h.get("verdict") == "timed-out"
    note = "" if t else str(h.get("summary") or "torch.compile output incorrect")[:300]
    if t and (h.get("protocol") or {}).get("reference_math") == "defaults":
        note = "correct only against the TF32 reference (PyTorch's defaults), not fp32 math: timed as users run it"
    return {"compile_s": t, "cut_by_deadline": cut, "ref_s": (h.get("reference_time") or {}).get("seconds"),
            "source": (h.get("candidate_time") or {}).get("source"), "wall_s": round(time.monotonic() - t0, 2),
            "note": note, "stage_seconds": folded(h.get("stage_seconds") or {}),
            "step_seconds": folded(h.get("step_seconds") or {})}


def _order(store, names: list[str]) -> list[str]:
    """Problems with an accepted candidate first (the headline's), then the rest; by name within each."""
    return sorted(names, key=lambda n: (store.best(n) is None, n))


def run_phase(by_name: dict[str, Path], *, settings, tier: str, store, pool, pfile: dict[str, str], bar,
              deadline: float | None, dtype_of, limit_of) -> dict[str, Any]:
    """Both steps for every problem of `by_name` without a stored baseline; stops at `deadline`
    (what is left is done by the next call). Returns the phase's own account (counts, seconds)."""
    names = _order(store, [n for n in by_name if (store.problem(n) or {}).get("compile_s") is None])
    done = {"pending": len(names), "warmed": 0, "timed": 0, "warm_wall_s": 0.0, "time_wall_s": 0.0}
    if not names:
        return done
    if deadline is not None:   # a warm cache does not outlive the call: warm only what can be timed in it
        names = names[:max(settings.workers, int((deadline - time.monotonic()) / expected_s(settings.workers)))]
    env = compile_env(Path(settings.out) / CACHE)   # already the driver's (engine.optimize, before any child)
    t0 = time.monotonic()
    futures = {n: pool.submit_warm(warm_compile, str(by_name[n]), pfile[n], small=settings.small,
                                   out_dir=str(settings.out), tier=tier, dtype=dtype_of(n),
                                   cache_dir=env["TORCHINDUCTOR_CACHE_DIR"]) for n in names}
    warm: dict[str, dict] = {}
    for n in names:
        if deadline is not None and time.monotonic() > deadline:
            for f in futures.values():
                getattr(f, "cancel", lambda: None)()   # not started: dropped (the next call warms them)
            break
        warm[n] = pool.result(futures[n])
    done.update(warmed=sum(1 for w in warm.values() if w["ok"]), warm_wall_s=round(time.monotonic() - t0, 2))
    entries = fx_entries(env["TORCHINDUCTOR_CACHE_DIR"])
    bar.step(f"torch.compile baselines: warmed {done['warmed']} of {len(names)} references in "
             f"{done['warm_wall_s']} s wall ({settings.workers} workers; cache {env['TORCHINDUCTOR_CACHE_DIR']}, "
             f"{entries} FX graph entries)", advance=0)
    t1 = time.monotonic()
    for n in [n for n in names if n in warm]:
        if deadline is not None and time.monotonic() > deadline:
            bar.step("deadline reached before every torch.compile baseline (call again to resume)", advance=0)
            break
        c = time_baseline(str(by_name[n]), pfile[n], small=settings.small, out_dir=str(settings.out),
                          tolerance=settings.tolerance, limit_s=limit_of(deadline), dtype=dtype_of(n))
        if c["cut_by_deadline"]:
            bar.step(f"{n}: torch.compile baseline cut short by the deadline (not recorded)", advance=0)
            break   # redone next call
        store.set_compile(n, c["compile_s"] or 0.0, {**c, "warm": warm[n]})
        done["timed"] += 1
        now = fx_entries(env["TORCHINDUCTOR_CACHE_DIR"])   # more entries: the timing child compiled a new key
        bar.step(f"{n}: torch.compile {_s(c['compile_s'])}, eager {_s(c['ref_s'])} ({c.get('source') or '-'}; "
                 f"warm {warm[n]['warm_s']} s, timed in {c['wall_s']} s, FX graph entries {entries} -> {now}) "
                 f"{c['note']}"[:240], advance=0)
        entries = now
    done["time_wall_s"] = round(time.monotonic() - t1, 2)
    return done


def fx_entries(cache_dir: str | Path) -> int:
    """How many compiled graphs Inductor's FX graph cache holds under `cache_dir` (one directory per key)."""
    return sum(1 for p in (Path(cache_dir) / "fxgraph").glob("*/*") if p.is_dir())


def _s(v: float | None) -> str:
    return "-" if not v else f"{v:.3g} s"
