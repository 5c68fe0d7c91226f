"""`formloop optimize` as user actions: run (or resume) a campaign over problem files, a problem's
SOL report with its current best, and an external agent's candidate submitted to the same harness
and integrity battery, scored and stored exactly like formloop's own (an agent is never trusted).

A submitted candidate is either a Triton `ModelNew` source (`source`, text) or a kernel spec
(`spec`, the DSL of formloop.dsl) that fixes the instance of the problem's GEMM regions; the
campaign's directory (`out`) holds the ModelNew files and the report; the record lives in the
population store (`store`, default the settings' store), under the campaign of the dtype and sizes."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from formloop.api.values import plain
from formloop.campaign.schedule import Policy
from formloop.errors import InvalidInput
from formloop.optimize import attempt as steps
from formloop.optimize.engine import Settings, optimize as run_campaign, resolve_tier
from formloop.optimize.precision import check_option
from formloop.optimize.store import OptimizeStore, campaign_key

TOLERANCES = ("kernelbench", "formloop")


def _dtype(dtype: str) -> str:
    if dtype not in steps.DTYPES:
        raise InvalidInput("dtype", dtype, steps.DTYPES)
    return dtype


def optimize(paths: list[str], *, out: str, budget: int = 2, small: bool = False, tier: str = "auto",
             chip: str = "h200", tolerance: str = "kernelbench", eps: float | None = 0.1, window: int | None = 2,
             workers: int = 2, fp32_operands: str = "auto", progress: bool = True,
             deadline_s: float | None = None, store: str | None = None, dtype: str = "fp32",
             ray: str | None = None, compile_baseline: bool | None = None,
             compile_only: bool = False) -> dict[str, Any]:
    """Bootstrap each problem, spend up to `budget` attempts per problem by SOL gap under the SOL-gap
    and no-progress stopping rules, verify every candidate (harness + integrity, sandboxed), write
    OUT/models/*.py and the report (JSON, markdown, plot). Resumes from the population store
    (`store`, default the settings'). `dtype` bf16 runs the bf16 variant; `ray` (auto | local |
    ADDRESS) fans the work out as Ray tasks instead of the process pool. torch.compile baselines
    (formloop.optimize.compile_phase) follow the attempts where `compile_baseline` (None: on the gpu
    tier); `compile_only` measures only them (resumable, under `deadline_s`)."""
    if tolerance not in TOLERANCES:
        raise InvalidInput("tolerance", tolerance, TOLERANCES)
    check_option(fp32_operands)   # auto | tf32 | tf32x3 | fp32
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
        raise InvalidInput("workers", workers, "an integer 1 ... 64")
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= 1000:
        raise InvalidInput("budget", budget, "an integer 1 ... 1000 (attempts per problem)")
    if deadline_s is not None and not (isinstance(deadline_s, (int, float)) and deadline_s > 0):
        raise InvalidInput("deadline-s", deadline_s, "a positive number of seconds")
    s = Settings(out=Path(out), budget=budget, small=small, tier=tier, chip=chip, tolerance=tolerance,
                 policy=Policy(eps=eps, window=window), workers=workers, fp32_operands=fp32_operands,
                 deadline_s=deadline_s, store=None if store is None else Path(store), dtype=_dtype(dtype), ray=ray,
                 compile_baseline=compile_baseline, compile_only=bool(compile_only))
    return plain(run_campaign(paths, s, progress=progress))


def _problem(problem: str) -> Path:
    p = Path(problem)
    if not p.is_file() or p.suffix != ".py":
        raise InvalidInput("problem", problem, "a problem file (.py with Model, get_inputs, get_init_inputs)")
    return p


def optimize_status(problem: str, *, out: str | None = None, chip: str = "h200", small: bool = False,
                    store: str | None = None, dtype: str = "fp32") -> dict[str, Any]:
    """A problem's SOL report (model) and its campaign record: status, best accepted candidate (its
    source file, time and source), every attempt's verdict. `out` is not needed (the record is in
    the store); it is accepted for the callers that name the campaign's directory."""
    from formloop.api.sol import sol_report
    from formloop.optimize.store import default_store

    p = _problem(problem)
    sol = sol_report(problem=str(p), chip=chip)
    store_path = Path(store) if store is not None else default_store()
    campaign = campaign_key(_dtype(dtype), small)
    if not store_path.is_file():
        return {"problem": p.stem, "sol": sol, "record": None, "best": None, "attempts": [],
                "note": f"no campaign in {store_path} yet"}
    store = OptimizeStore(store_path, campaign, mode="read")
    try:
        rec, best = store.problem(p.stem), store.best(p.stem)
        attempts = [{k: a[k] for k in ("attempt", "origin", "correct", "accepted", "verdict", "time_s", "ref_s",
                                       "time_source", "sol_fraction", "candidate")} for a in store.attempts(p.stem)]
    finally:
        store.close()
    if best:
        best = {k: best[k] for k in ("attempt", "origin", "candidate", "time_s", "ref_s", "time_source",
                                     "sol_fraction")}
    return plain({"problem": p.stem, "sol": sol, "record": rec, "best": best, "attempts": attempts})


def optimize_submit(problem: str, *, out: str, source: str | None = None, spec: str | None = None,
                    small: bool = False, tier: str = "auto", chip: str = "h200",
                    tolerance: str = "kernelbench", store: str | None = None, dtype: str = "fp32") -> dict[str, Any]:
    """Check, measure, score and store an agent's candidate exactly as formloop's own: the same
    sandboxed harness and integrity battery; it counts only if correct and integrity-accepted."""
    if (source is None) == (spec is None):
        raise InvalidInput("candidate", "both" if source else "neither", "exactly one of source (ModelNew) or spec")
    if tolerance not in TOLERANCES:
        raise InvalidInput("tolerance", tolerance, TOLERANCES)
    p = _problem(problem)
    tier = resolve_tier(tier)
    outp = Path(out)
    store = OptimizeStore(store, campaign_key(_dtype(dtype), small))
    try:
        if store.problem(p.stem) is None:
            b = steps.bootstrap(str(p), small=small, chip=chip, dtype=dtype)
            store.put_problem(p.stem, path=str(p), level=b["level"], tier=tier, status=b["status"], reason=b["reason"],
                              sol_floor_s=b["sol_floor_s"], sol_note=b["sol_note"],
                              bootstrap={"recognition": b["recognition"], "dtype": b["dtype"],
                                         "dtype_reason": b["dtype_reason"]})
        settled = (store.problem(p.stem)["bootstrap"] or {}).get("dtype", "fp32")
        number = store.next_attempt(p.stem)
        if spec is not None:
            built = steps.build(str(p), small=small, tier=tier, attempt=number, out_dir=str(outp), spec=spec,
                                prefix="s", dtype=settled)
        else:
            if not isinstance(source, str) or "ModelNew" not in source:
                raise InvalidInput("source", "text without ModelNew", "Python source defining class ModelNew")
            target = outp / "submitted" / f"{p.stem}_s{number}.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source)
            built = {"candidate": str(target)}
        if built["candidate"] is None:
            row = {"correct": False, "accepted": False, "verdict": built["reason"], "time_s": None, "ref_s": None,
                   "time_source": None, "sol_fraction": None}
        else:
            row = steps.measure(steps.problem_file(str(p), small, outp), built["candidate"], tier=tier,
                                tolerance=tolerance, chip=chip, dtype=settled)
        detail = {k: v for k, v in {**built, **row}.items() if k not in ("correct", "accepted", "verdict", "time_s",
                                                                       "ref_s", "time_source", "sol_fraction")}
        store.add_attempt(p.stem, attempt=number, candidate=built.get("candidate") or "", origin="agent",
                          correct=row["correct"], accepted=row["accepted"], verdict=row["verdict"],
                          time_s=row["time_s"], ref_s=row["ref_s"], time_source=row["time_source"],
                          sol_fraction=row["sol_fraction"],
                          detail={**detail, "submitted": "spec" if spec else "source"})
        best = store.best(p.stem)
    finally:
        store.close()
    speedup = row["ref_s"] / row["time_s"] if row["time_s"] and row["ref_s"] else None
    return plain({"problem": p.stem, "attempt": number, "tier": tier, "candidate": built.get("candidate"), **row,
                  "speedup": speedup, "speedup_source": row["time_source"],
                  "is_best": bool(best and best["attempt"] == number)})
