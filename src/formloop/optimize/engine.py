"""`formloop optimize`: bootstrap every problem, then spend attempts where the SOL gap is largest,
with the campaign's stopping rules applied live (formloop.campaign.schedule states them):

* a problem that does not yet beat the reference stays eligible until its budget is spent;
* once it does, it stops on the SOL-gap rule (t_best <= (1 + eps) * t_SOL; gpu tier only, a CPU time
  is never compared with a GPU floor) or the no-progress rule (`window` attempts without a better
  t_best).

CPU work (capture, recognition, MILP, assembly) runs in a process pool, or as Ray tasks with
`ray` (formloop.optimize.distribute); measurements run one at a time (each in its own sandboxed
child) or as Ray tasks of one GPU each, so timings never share a device. Everything lands in the
population store (formloop.optimize.store; `store`, default the settings' store) under the
campaign of the dtype and sizes: a second call resumes (bootstraps and attempts already recorded
are reused, the budget counts them). An attempt whose ModelNew source equals an earlier attempt's is
recorded as a repeat without a measurement (`repeat_of`; changed library kernels are not a repeat).
One failing problem never stops the campaign."""
from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from formloop.campaign.schedule import Policy
from formloop.errors import InvalidInput
from formloop.optimize import attempt as steps
from formloop.optimize import compile_phase
from formloop.optimize.distribute import make_engine
from formloop.optimize.store import OptimizeStore, campaign_key


@dataclass(frozen=True)
class Settings:
    out: Path
    budget: int = 2                 # attempts per problem
    small: bool = False
    tier: str = "auto"              # auto | gpu | interpreter
    chip: str = "h200"
    tolerance: str = "kernelbench"
    policy: Policy = Policy(eps=0.1, window=2)
    workers: int = 2
    integrity: bool = True
    compile_baseline: bool | None = None    # None: on the gpu tier only
    compile_only: bool = False              # only the torch.compile baselines (no attempt rounds)
    fp32_operands: str = "auto"             # auto | tf32 | tf32x3 | fp32 (formloop.optimize.precision)
    deadline_s: float | None = None         # wall seconds after which no new attempt starts (resume later)
    store: Path | None = None               # the population store (None: the settings' store)
    dtype: str = "fp32"                     # fp32 | bf16 (the problem set's variant)
    ray: str | None = None                  # None: the process pool; auto | local | ADDRESS: Ray

    @property
    def campaign(self) -> str:
        return campaign_key(self.dtype, self.small)


def problem_files(paths: Sequence[str | Path]) -> list[Path]:
    """Problem files under each DIR (recursively, '_' files skipped) and each FILE, in order."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*.py") if not f.name.startswith("_"))
        elif p.is_file() and p.suffix == ".py":
            out.append(p)
        else:
            raise InvalidInput("problem path", str(p), "a directory of problem files or a .py problem file")
    names = [f.stem for f in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InvalidInput("problem names", dup, "unique file names (a name identifies a problem)")
    return out


def resolve_tier(tier: str) -> str:
    if tier not in ("auto", "gpu", "interpreter"):
        raise InvalidInput("tier", tier, "auto, gpu, interpreter")
    if tier == "auto":
        import torch
        tier = "gpu" if torch.cuda.is_available() else "interpreter"
    if tier == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
    return tier


class Progress:
    """One line per step on stderr: a bar of attempts spent out of the most the budget allows."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.done, self.enabled = max(total, 1), 0, enabled

    def step(self, text: str, advance: int = 1) -> None:
        self.done += advance
        if self.enabled:
            filled = int(20 * min(self.done, self.total) / self.total)
            print(f"[{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total} {text}", file=sys.stderr, flush=True)


def _state(store: OptimizeStore, name: str, policy: Policy) -> dict[str, Any]:
    """Attempts spent, the best accepted time, attempts since it improved, and the reference time."""
    best, since, ref = None, 0, None
    attempts = [a for a in store.attempts(name) if a["origin"] == "formloop"]
    for a in attempts:
        ref = a["ref_s"] or ref
        if a["accepted"] and a["time_s"] is not None and (best is None or a["time_s"] < best):
            best, since = a["time_s"], 0
        else:
            since += 1
    return {"n": len(attempts), "best": best, "since": since, "ref": ref}


def _stop(st: dict, sol_s: float | None, tier: str, policy: Policy) -> str | None:
    if st["best"] is None or st["ref"] is None or st["best"] >= st["ref"]:
        return None
    if tier == "gpu" and sol_s and policy.eps is not None and st["best"] <= (1 + policy.eps) * sol_s:
        return "sol-gap"
    if policy.window is not None and st["since"] >= policy.window:
        return "no-progress"
    return None


def _gap(st: dict, sol_s: float | None, tier: str) -> float:
    if st["best"] is None or not sol_s or tier != "gpu":
        return math.inf
    return st["best"] / sol_s


def optimize(paths: Sequence[str | Path], settings: Settings, *, progress: bool = True,
             on_event: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Run (or resume) the campaign; returns the report (formloop.optimize.report)."""
    from formloop.optimize.report import build_report

    if not isinstance(settings.budget, int) or settings.budget < 1:
        raise InvalidInput("budget", settings.budget, "an integer >= 1 (attempts per problem)")
    started = time.monotonic()
    files = problem_files(paths)
    tier = resolve_tier(settings.tier)
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    if settings.dtype not in steps.DTYPES:
        raise InvalidInput("dtype", settings.dtype, steps.DTYPES)
    if _wants_compile(settings, tier):   # before the first child: the sandbox's forkserver imports Inductor, which
        # reads its compile threads and caches from the environment once, at import (formloop.measure.sandbox)
        os.environ.update(compile_phase.compile_env(out / compile_phase.CACHE))
    store = OptimizeStore(settings.store, settings.campaign)
    try:
        pool = make_engine(settings.ray, tier=tier, workers=settings.workers)
    except BaseException:
        store.close()
        raise
    bar = Progress(len(files) * (settings.budget + 1), progress)
    try:
        engine = pool.describe()
        bar.step(f"engine: {engine['engine']}; store {store.path} (campaign {store.campaign})", advance=0)
        todo = [f for f in files if (store.problem(f.stem) or {}).get("tier") != tier]
        boots = pool.map(steps.bootstrap, [((str(f),), {"small": settings.small, "chip": settings.chip,
                                                        "dtype": settings.dtype}) for f in todo])
        for b in boots:
            store.put_problem(b["name"], path=b["path"], level=b["level"], tier=tier, status=b["status"],
                              reason=b["reason"], sol_floor_s=b["sol_floor_s"], sol_note=b["sol_note"],
                              bootstrap={"recognition": b["recognition"], "dtype": b["dtype"],
                                         "dtype_reason": b["dtype_reason"], "phase_seconds": b["phase_seconds"]})
        bar.step(f"bootstrapped {len(files)} problems ({len(todo)} new)", advance=len(files))
        pfile = {f.stem: steps.problem_file(str(f), settings.small, out) for f in files}
        deadline = None if settings.deadline_s is None else started + settings.deadline_s
        phase = _campaign(files, settings, tier, store, pool, pfile, bar, on_event, deadline)
        _write_models(files, store, out, tier)
        return build_report(store, [f.stem for f in files], tier=tier, settings=settings, out=out,
                            engine={**engine, "wall_s": round(time.monotonic() - started, 2),
                                    **({"compile_phase": phase} if phase else {})})
    finally:
        pool.shutdown()
        store.close()


def _campaign(files, settings: Settings, tier: str, store: OptimizeStore, pool, pfile, bar, on_event,
              deadline: float | None = None) -> dict | None:
    """Attempt rounds until nothing is eligible (or the deadline), then the torch.compile baselines
    (formloop.optimize.compile_phase) where wanted; `compile_only` runs the baselines alone."""
    by_name = {f.stem: f for f in files}
    while not settings.compile_only:
        if deadline is not None and time.monotonic() > deadline:
            bar.step("deadline reached: stopping here (call again to resume)", advance=0)
            return None
        if not _round(by_name, settings, tier, store, pool, pfile, bar, on_event, deadline):
            break
    if not _wants_compile(settings, tier):
        return None
    return compile_phase.run_phase(by_name, settings=settings, tier=tier, store=store, pool=pool, pfile=pfile,
                                   bar=bar, deadline=deadline, dtype_of=lambda n: _dtype(store, n),
                                   limit_of=_limit)


def _wants_compile(settings: Settings, tier: str) -> bool:
    """Whether this call runs the torch.compile baselines (by default on the GPU tier; --compile-only always)."""
    want = settings.compile_baseline if settings.compile_baseline is not None else tier == "gpu"
    return bool(want or settings.compile_only)


def _limit(deadline: float | None) -> float | None:
    """Seconds one sandboxed child may run: what is left before the deadline (at least a minute)."""
    return None if deadline is None else max(45.0, deadline + 60.0 - time.monotonic())


def _dtype(store: OptimizeStore, name: str) -> str:
    """The problem's settled dtype (bootstrap's: bf16 problems that cannot be cast stay fp32)."""
    return ((store.problem(name) or {}).get("bootstrap") or {}).get("dtype", "fp32")


def _tf32_reference(a: dict) -> bool:
    protocol = ((a.get("detail") or {}).get("harness") or {}).get("protocol")
    return protocol is not None and "reference_math" not in protocol


def _operands(store: OptimizeStore, name: str, settings: Settings) -> str:
    """fp32 GEMM operands once an attempt with the default (auto) was incorrect: tolerance first. A verdict
    from before the fp32 reference (its protocol has no reference_math: checked against a TF32 conv) does not count."""
    wrong = any(a["verdict"].startswith("incorrect") and not _tf32_reference(a)
                for a in store.attempts(name) if a["origin"] == "formloop")
    return "fp32" if wrong else settings.fp32_operands


def _round(by_name, settings: Settings, tier: str, store: OptimizeStore, pool, pfile, bar, on_event,
           deadline: float | None) -> bool:
    """One scheduling round: rank, stop, build a batch, measure it. False when nothing is eligible."""
    ranked = []
    for name in by_name:
        rec = store.problem(name)
        st = _state(store, name, settings.policy)
        if rec["status"] == "stopped:exhausted" and st["n"] < settings.budget:
            store.set_status(name, "ready")   # a later call with a larger budget re-opens it
            rec = {**rec, "status": "ready"}
        if rec["status"] != "ready":
            continue
        why = _stop(st, rec["sol_floor_s"], tier, settings.policy)
        if why:
            store.set_status(name, f"stopped:{why}")
            bar.step(f"{name}: stopped ({why})", advance=settings.budget - st["n"])
            continue
        if st["n"] >= settings.budget:
            store.set_status(name, "stopped:exhausted")
            continue
        ranked.append((-_gap(st, rec["sol_floor_s"], tier), st["n"], name))
    if not ranked:
        return False
    ranked.sort()
    # Every eligible problem in one round, largest SOL gap first: the pool builds them all in
    # parallel while the driver measures each as soon as its build is back (no pool idling behind a
    # round's measurements, no driver idling behind a round's builds). Stopping rules apply between rounds.
    batch = [name for _, _, name in ranked]
    numbers = {n: store.next_attempt(n) for n in batch}
    builds = [pool.submit(steps.build, str(by_name[n]), small=settings.small, tier=tier, attempt=numbers[n],
                          out_dir=str(settings.out), fp32_operands=_operands(store, n, settings),
                          dtype=_dtype(store, n), tolerance=settings.tolerance) for n in batch]
    measures: dict[str, Any] = {}
    built: dict[str, dict] = {}
    for name, future in zip(batch, builds):   # a measurement is submitted as soon as its build is back
        built[name] = b = pool.result(future)
        same = repeat_of(store, name, b)
        if same is not None:
            built[name] = b = {**b, "repeat_of": same}
        if b["candidate"] is not None and same is None and (deadline is None or time.monotonic() <= deadline):
            measures[name] = pool.submit_measure(steps.measure, pfile[name], b["candidate"], tier=tier,
                                                 tolerance=settings.tolerance, chip=settings.chip,
                                                 integrity=settings.integrity, limit_s=_limit(deadline),
                                                 dtype=_dtype(store, name))
        if pool.lazy and not _record(name, numbers[name], b, measures.get(name), pool,
                                                              store, bar, on_event, deadline):
            return True
    if not pool.lazy:
        for name in batch:
            if not _record(name, numbers[name], built[name], measures.get(name), pool, store, bar, on_event,
                           deadline):
                return True
    return True


def repeat_of(store: OptimizeStore, name: str, b: dict) -> int | None:
    """The earlier attempt (not retired) whose ModelNew source, over the same formloop.library sources, equals
    this build's (attempt.build's source_sha256), or None. Such a build is
    recorded without a measurement: a second timing of one kernel only re-draws its noise, and keeping the
    faster draw would bias the problem's best time."""
    sha = b.get("source_sha256")
    if sha is None or b.get("candidate") is None:
        return None
    for a in store.attempts(name):
        if a["origin"] == "formloop" and (a.get("detail") or {}).get("source_sha256") == sha:
            return int(a["attempt"])
    return None


def _record(name: str, number: int, b: dict, measure, pool, store: OptimizeStore, bar, on_event,
            deadline: float | None) -> bool:
    """Measure (if not done) and store one attempt; False when the deadline stops the round here."""
    if b["candidate"] is None or b.get("repeat_of") is not None:
        verdict = b["reason"] if b["candidate"] is None else (
            f"repeat of a{b['repeat_of']}: the same kernel source, not measured again")
        row = {"correct": False, "accepted": False, "verdict": verdict, "time_s": None, "ref_s": None,
               "time_source": None, "sol_fraction": None, "phase_seconds": {}}
    elif measure is None or (deadline is not None and time.monotonic() > deadline and pool.unstarted(measure)):
        return False   # built but not measured: rebuilt on the next call
    else:
        if pool.unstarted(measure):   # the driver runs it now: the limit is what is left now
            measure.kwargs["limit_s"] = _limit(deadline)
        row = pool.result(measure)
        if row.get("cut_by_deadline"):   # the deadline cut it short: not an attempt, redone next call
            bar.step(f"{name} attempt {number}: cut short by the deadline (not recorded)", advance=0)
            return False
    row["phase_seconds"] = {**(b.get("phase_seconds") or {}), **(row.get("phase_seconds") or {})}
    detail = {k: v for k, v in {**b, **row}.items() if k not in ("correct", "accepted", "verdict", "time_s",
                                                               "ref_s", "time_source", "sol_fraction")}
    store.add_attempt(name, attempt=number, candidate=b.get("candidate") or "", origin="formloop",
                      correct=row["correct"], accepted=row["accepted"], verdict=row["verdict"],
                      time_s=row["time_s"], ref_s=row["ref_s"], time_source=row["time_source"],
                      sol_fraction=row["sol_fraction"], detail=detail)
    sp = (f", {row['ref_s'] / row['time_s']:.3g}x vs eager ({row['time_source']})"
          if row["time_s"] and row["ref_s"] else "")
    took = ", ".join(f"{k} {v:.2g}s" for k, v in row["phase_seconds"].items())
    bar.step(f"{name} attempt {number}: {'accepted' if row['accepted'] else 'not accepted'} "
             f"[{row['verdict'][:80]}]{sp} ({took})")
    if on_event:
        on_event({"problem": name, "attempt": number, **row})
    return True


def _write_models(files, store: OptimizeStore, out: Path, tier: str = "gpu") -> None:
    """OUT/models/NAME.py: each problem's best accepted ModelNew; none where it keeps the reference, and on
    the gpu tier none where that best measured slower than the reference (the reference is what a user
    should run there; the report keeps both views)."""
    models = out / "models"
    models.mkdir(exist_ok=True)
    for f in files:
        best = store.best(f.stem)
        target = models / f"{f.stem}.py"
        if best and Path(best["candidate"]).is_file() and not (tier == "gpu" and slower(best)):
            shutil.copyfile(best["candidate"], target)
        elif target.exists():
            target.unlink()


def slower(best: dict) -> bool:
    """A best attempt measured slower than the reference in the same run."""
    return bool(best.get("time_s") and best.get("ref_s") and best["time_s"] >= best["ref_s"])
