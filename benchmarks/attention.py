"""Attention on the H200: the decode and causal-prefill families' MILP picks (prior, calibrated, and
calibrated on other lengths only), the family's measured best over a small model-ranked candidate
set (--sweep: the broad sweep; the previous H200 run's bests, attention_sweep.ANCHORS, are always in it),
and torch SDPA on the cuDNN and flash backends, in one process of under 5 minutes (Triton compiles included).

    PYTHONPATH=src python3 benchmarks/attention.py --out $OUT          # on the GPU machine
    PYTHONPATH=src python3 benchmarks/attention.py --ranking PREV --out $OUT   # rank by PREV's calibration
    PYTHONPATH=src python3 benchmarks/attention.py --dry-run --out DIR # anywhere: interpreter + model
    PYTHONPATH=src python3 benchmarks/attention.py --calibrate DIR/attention.json --out DIR2   # refit offline

Batch 1, Hq 32, Hkv 8, d 128, bf16; decode L = 512…32768 (also one paged-cache point), causal
prefill L = 512…8192, and held-out lengths (decode 3000, 12000; prefill 3000) that are measured
and re-solved but never fitted. Every timed instance first passes the correctness check (fresh
random inputs, NaN-poisoned output, fp32 reference, each query row against its own RMS); the picks
and the best also pass all four input kinds, eager and from a CUDA graph. Times are medians of
CUDA-graph replays that rotate over operand sets exceeding the L2, and eager, for picks, best and
baselines side by side; the SM clock and board power are read while the pick replays.
attention.json holds every record; calibration_<family>.json feed `formloop solve|measure …
--calibration`, --ranking and --calibrate."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(__file__))
from attention_report import print_table, summarize  # noqa: E402
from attention_sweep import (  # noqa: E402
    ANCHORS, DECODE, PREFILL, candidates, key_of, precompile, sweep_set, top_designs,
)

SHAPE = (1, 32, 8, 128)
LENGTHS = {DECODE: (512, 2048, 8192, 16384, 32768), PREFILL: (512, 1024, 2048, 4096, 8192)}
HELD = {DECODE: (3000, 12000), PREFILL: (3000,)}  # measured, never fitted: the re-solve's transfer test
CAL_LENGTHS = {DECODE: (512, 8192, 32768), PREFILL: (512, 2048, 8192)}  # the held-out fit sees only these
PAGED = (8192, 16)  # (L, page) of the paged-cache point
NEAR_BEST = 1.5
DRY_SHAPE, DRY_LENGTHS = (1, 8, 2, 32), {DECODE: (40, 70, 130), PREFILL: (40, 64, 96)}
DRY_HELD = {DECODE: (100,), PREFILL: (80,)}


class Bench:
    """Measures designs (gpu tier, or a perturbed model in a dry run) and keeps every record."""

    def __init__(self, args, chip):
        self.args, self.chip = args, chip
        self.records: dict[tuple, dict] = {}
        self.gpu = None
        if not args.dry_run:
            from formloop.evaluate.gpu import GpuEvaluator, TimingPolicy, read_clocks
            from formloop.evaluate.measurement import Provenance

            class Evaluator(GpuEvaluator):
                """Reads the clocks once every few seconds, not per design (nvidia-smi costs ~0.1 s)."""

                clocks, read_at = {}, 0.0

                def provenance(self, timing: str = "") -> Provenance:
                    if time.time() - self.read_at > 5.0:
                        self.clocks, self.read_at = read_clocks(), time.time()
                    return Provenance(tier=self.tier.value, device=self.facts["device"],
                                      sm_count=self.facts["sm_count"], clocks_mhz=self.clocks,
                                      versions=self.facts["versions"], timing=timing)

            self.gpu = Evaluator(policy=TimingPolicy(graph_ms=1.0, budget_ms=20.0, min_reps=5, max_reps=15))

    def workload(self, family: str, L: int, page: int = 0) -> dict:
        from formloop.library.attention_service import attention_workload

        shape = (*(DRY_SHAPE if self.args.dry_run else SHAPE), L)
        return attention_workload(family, shape, page=page, causal=1)

    def measure(self, family: str, template, a, L: int, page: int = 0, truth=None) -> dict:
        rk = (family, L, page, key_of(family, a))
        if rk in self.records:
            return self.records[rk]
        wl = self.workload(family, L, page)
        if self.gpu is None:  # dry run: the prior model, perturbed by `truth` and a fixed noise, plays the GPU
            from formloop.evaluate.calibrate import Point, predict
            from formloop.library import get_template

            t = float(predict(get_template(family), self.chip, [Point(a, wl, 0.0)], truth)[0])
            noise = math.exp(0.05 * math.sin(zlib.crc32(repr(rk).encode()) % 1000))  # the same in every run
            m = {"latency_us": t * noise, "ok": True, "tier": "dry-run model"}
        else:
            m = self.gpu.evaluate(template, a, wl, self.chip).as_dict()
        m.update(config=dict(a), family=family, L=L, page=page, workload=wl)
        self.records[rk] = m
        return m

    def mine(self, family: str, L: int, page: int = 0) -> list[dict]:
        return [r for (f, l_, p, _), r in self.records.items() if (f, l_, p) == (family, L, page)]

    def best(self, family: str, L: int, page: int = 0) -> dict | None:
        good = [r for r in self.mine(family, L, page) if r.get("ok")]
        return min(good, key=lambda r: r["latency_us"]) if good else None


def points(bench: Bench, family: str, lengths=None) -> list:
    from formloop.evaluate.calibrate import Point

    return [Point(r["config"], bench.workload(family, r["L"]), r["latency_us"]) for (f, L, p, _), r in
            bench.records.items() if f == family and p == 0 and r.get("ok") and (lengths is None or L in lengths)]


def fit_family(bench: Bench, family: str, template, lengths=None, *, start=None, quick: bool = False):
    """Fit the family's efficiency terms to its measured points (at `lengths` only, if given),
    starting from the priors or from an earlier fit `start`."""
    from formloop.evaluate.calibrate import Calibration, fit

    pts = points(bench, family, lengths)
    if len(pts) <= len(template.descriptor["calibrated"]) + 1:
        return None
    origin = calibrated(family, start) if start is not None else template
    cal = fit(origin, bench.chip, pts, chip_label="h200", near_best=NEAR_BEST, iterations=25 if quick else 40,
              starts=2 if quick or start is not None else 4)
    if start is None:
        return cal
    # reported against the template's own priors (the refit started from the earlier fit)
    return Calibration(**{**cal.__dict__, "priors": start.priors, "template_hash": start.template_hash,
                          "rms_log_error_before": start.rms_log_error_before})


def calibrated(family: str, cal):
    from formloop.library import get_template

    if cal is None:
        return get_template(family)
    return get_template(family, calibration=cal.values, calibration_id=cal.key)


def pick(bench: Bench, family: str, template, L: int, page: int = 0, truth=None) -> dict:
    from formloop.solve import solve_milp

    sol = solve_milp(template.formulate(bench.workload(family, L, page), bench.chip))
    m = bench.measure(family, template, sol.assignment, L, page, truth)
    return {"config": dict(sol.assignment), "model_us": sol.objective, "measured_us": m["latency_us"],
            "ok": bool(m.get("ok")), "solve_s": sol.seconds}


def ranking_template(family: str, args):
    """The model that ranks the candidates: the priors, or an earlier run's calibration (--ranking)."""
    from formloop.evaluate.calibrate import Calibration

    path = args.ranking and os.path.join(args.ranking, f"calibration_{family.removeprefix('attention-')}.json")
    return calibrated(family, Calibration.load(path)) if path and os.path.isfile(path) else calibrated(family, None)


def lengths_of(family: str, args) -> tuple[tuple, tuple]:
    lengths = DRY_LENGTHS[family] if args.dry_run else LENGTHS[family]
    held_lengths = (DRY_HELD if args.dry_run else HELD)[family]
    if args.lengths:
        lengths, held_lengths = tuple(int(x) for x in args.lengths.split(",")), ()
    if args.held is not None:
        held_lengths = tuple(int(x) for x in args.held.split(",") if x)
    return lengths, held_lengths


def plan_family(bench: Bench, family: str) -> dict:
    """The designs to measure at each length (in measuring order) and the compile jobs they need."""
    args = bench.args
    ranker = ranking_template(family, args)
    lengths, held_lengths = lengths_of(family, args)
    plans = {}
    for L in (*lengths, *held_lengths):
        f = ranker.formulate(bench.workload(family, L), bench.chip)
        if args.sweep:  # the broad sweep of the first runs
            top, rnd = (args.top, args.random) if family == DECODE else (args.top // 2, args.random // 2)
            plans[L] = sweep_set(family, f, top=top, random=rnd, seed=L)
        else:
            plans[L] = candidates(family, f, top=args.top if family == DECODE else max(1, args.top * 2 // 3),
                                  anchors=() if args.dry_run else ANCHORS[family])
    jobs = [(family, a, bench.workload(family, L)) for L, al in plans.items() for a in al]
    if family == DECODE:
        jobs.append((family, plans[lengths[-1]][0], bench.workload(family, *PAGED)))
    return {"plans": plans, "jobs": jobs, "ranker": ranker}


def run_family(bench: Bench, family: str, result: dict, deadline: float, planned: dict, truth=None) -> None:
    from formloop.library import get_template

    args = bench.args
    prior = get_template(family)
    ranker, plans = planned["ranker"], planned["plans"]
    lengths, held_lengths = lengths_of(family, args)
    order = (*lengths, *held_lengths)
    for n, L in enumerate(order):
        stop = time.time() + (deadline - time.time()) * 0.7 / (len(order) - n)
        for a in plans[L]:
            if time.time() > stop:
                break
            bench.measure(family, prior, a, L, truth=truth)
        mine = bench.mine(family, L)
        why = sorted({str(r.get("failure"))[:160] for r in mine if not r.get("ok")})
        print(f"{family} L={L}{' (held out)' if L in held_lengths else ''}: {len(mine)} designs, "
              f"{sum(bool(r.get('ok')) for r in mine)} passed" + (f"; failures: {why[:3]}" if why else ""), flush=True)
    cal = fit_family(bench, family, prior, lengths)  # never the held-out lengths
    for _ in range(args.refine if cal else 0):  # measure what the fit now rates best, then refit
        t_cal = calibrated(family, cal)
        for L in lengths:
            for a in top_designs(t_cal.formulate(bench.workload(family, L), bench.chip), args.refine_top):
                if time.time() < deadline:
                    bench.measure(family, prior, a, L, truth=truth)
        cal = fit_family(bench, family, prior, lengths, start=cal)
    cal_lengths = CAL_LENGTHS[family] if not args.dry_run else lengths[::2]
    held = fit_family(bench, family, prior, cal_lengths, quick=True)  # from the priors: it never sees held-out L
    entry = {"lengths": list(lengths), "held_lengths": list(held_lengths), "cal_lengths": list(cal_lengths),
             "ranking": "calibration of " + args.ranking if ranker.options.get("calibration") != "priors" else "priors",
             "calibration": cal.__dict__ if cal else None,
             "held_out_calibration": held.__dict__ if held else None, "per_length": {}}
    if cal is not None:
        cal.save(os.path.join(args.out, f"calibration_{family.removeprefix('attention-')}.json"))
    for L in order:
        row = {"prior": pick(bench, family, prior, L, truth=truth), "held_length": L in held_lengths}
        if ranker is not prior and ranker.options.get("calibration") != "priors":
            row["ranking"] = pick(bench, family, ranker, L, truth=truth)
        if cal is not None:
            row["calibrated"] = pick(bench, family, calibrated(family, cal), L, truth=truth)
        if held is not None:
            row["held_out"] = pick(bench, family, calibrated(family, held), L, truth=truth)
            row["held_out"]["fitted_on"] = list(cal_lengths)
        row["best"] = bench.best(family, L)
        mine = bench.mine(family, L)
        row["measured"], row["passed"] = len(mine), sum(bool(r.get("ok")) for r in mine)
        entry["per_length"][L] = row
    if family == DECODE and not args.dry_run and cal is not None:
        L, page = PAGED
        entry["paged"] = {"L": L, "page": page, **pick(bench, family, calibrated(family, cal), L, page)}
    result["families"][family] = entry


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--top", type=int, default=10, help="model-ranked designs measured per length (prefill: 2/3)")
    p.add_argument("--sweep", action="store_true", help="the broad sweep instead: --top model picks, a grid over "
                                                         "tiles and splits, --random uniform samples")
    p.add_argument("--random", type=int, default=30, help="uniform menu sample per length with --sweep (prefill: half)")
    p.add_argument("--ranking", help="rank the candidates by the calibration_<family>.json of an earlier run's --out")
    p.add_argument("--held", help="comma-separated held-out lengths (measured, never fitted; default 3000,12000 "
                                  "for decode and 3000 for prefill, none with --lengths)")
    p.add_argument("--refine", type=int, default=1, help="rounds of: fit, measure the fit's top designs, refit")
    p.add_argument("--refine-top", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=200.0, help="stop measuring candidates after this many seconds "
                                                                   "(the whole run stays under 5 minutes)")
    p.add_argument("--compile-s", type=float, default=40.0, help="pre-compilation deadline per family")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--families", default=f"{DECODE},{PREFILL}")
    p.add_argument("--lengths", help="comma-separated lengths instead of the defaults (smoke runs)")
    p.add_argument("--dry-run", action="store_true", help="no GPU: interpreter checks at tiny sizes; a perturbed "
                                                           "model stands in for the timings")
    p.add_argument("--calibrate", help="refit from an earlier attention.json (no GPU) and report the picks")
    p.add_argument("--store", help="population store: every correct gpu record becomes a calibration point there and "
                                   "each family is refit on its stored points (what `formloop solve` then reads)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.calibrate:
        from attention_report import refit

        return refit(args.calibrate, args.out)
    import torch

    if not torch.cuda.is_available() and not args.dry_run:
        print("no CUDA device: run with --dry-run (interpreter and model) or on the GPU machine", file=sys.stderr)
        return 2
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    from formloop.hw.chips import get_chip

    t_start = time.time()
    result: dict = {"command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "shape": "B,Hq,Hkv,D = " + ",".join(map(str, DRY_SHAPE if args.dry_run else SHAPE)),
                    "families": {}}
    if args.dry_run:
        ceilings = {"mem_bandwidth": 4.28e12, "flops_bf16": 780e12}
        result["device"] = {"device": "dry run (no GPU)"}
    else:
        from ceilings import measure as measure_ceilings

        from formloop.evaluate.gpu import device_facts, read_clocks

        ceilings = measure_ceilings()
        result["device"] = {**device_facts(), "clocks_mhz": read_clocks()}
    result["ceilings"] = ceilings
    # Fit and solve on the datasheet chip, the one `formloop solve`, the layer plan and the optimizer read: terms fitted
    # against the measured ceilings rank designs differently there (RESULTS.md round 14). The ceilings give the rates.
    chip = get_chip("h200")
    bench = Bench(args, chip)
    families = [f for f in args.families.split(",") if f]
    truth = {DECODE: {"eta_bw": 0.8, "lat_m": 1.5e-6, "t_launch": 3e-6},
             PREFILL: {"eta_mma": 0.55, "t_soft": 9e-9}} if args.dry_run else {}
    planned = {family: plan_family(bench, family) for family in families}
    if bench.gpu is not None:  # every family's kernels in one pool, before any measurement
        jobs = [j for family in families for j in planned[family]["jobs"]]
        pc = result["precompile"] = precompile(jobs, args.workers, time.time() + args.compile_s)
        print(f"precompiled {pc['kernels']} kernels in {pc['seconds']:.0f} s, {pc['error_count']} errors "
              f"{pc['errors'][:2]}", flush=True)
    t_measure = time.time()
    left = max(0.0, t_start + args.budget_s - t_measure)
    share = {DECODE: 0.55, PREFILL: 0.45} if len(families) == 2 else {f: 1.0 / len(families) for f in families}
    deadline = t_measure
    for family in families:
        deadline += left * share.get(family, 1.0 / len(families))  # a family's unused time passes to the next
        run_family(bench, family, result, deadline, planned[family], truth.get(family))
        save(result, bench, t_start, os.path.join(args.out, "attention_partial.json"))  # survives a killed run
    summarize(bench, result, args.dry_run)
    if args.store and bench.gpu is not None:
        result["store"] = store_points(bench, families, args.store)
    save(result, bench, t_start, os.path.join(args.out, "attention.json"))
    print_table(result)
    return 0


def store_points(bench: Bench, families, path: str) -> dict:
    """Every correct gpu record (contiguous cache) as a calibration point of its family in the store at `path`, then
    each family refit on all its stored points of this toolchain (population.calibrations.learn, every term)."""
    from formloop.library import template_factory
    from formloop.population import Population
    from formloop.population import calibrations as stored

    out = {}
    with Population(path) as pop:
        for family in families:
            recs = [r for r in bench.records.values() if r["family"] == family and r.get("ok") and not r["page"]]
            toolchain = stored.toolchain_of(recs[0]["provenance"]["versions"]) if recs else ""  # one run, one toolchain
            for r in recs:
                stored.add_point(pop, template=family, dtype="bf16", chip="h200", toolchain=toolchain,
                                 device=r["provenance"]["device"], workload=r["workload"], assignment=r["config"],
                                 latency_us=r["latency_us"], source="benchmarks/attention.py")
            fit, note = stored.learn(pop, template_factory(family), bench.chip, template=family, dtype="bf16",
                                     chip="h200", toolchain=toolchain, source="benchmarks/attention.py",
                                     iterations=40, starts=2, max_terms=None)
            out[family] = {"points_added": len(recs), "note": note, "fit": fit.as_dict() if fit else None}
            print(f"store {path}: {family}: {note}", flush=True)
    return out


def save(result: dict, bench: Bench, t_start: float, path: str) -> None:
    result["records"] = list(bench.records.values())
    result["seconds"] = time.time() - t_start
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))


if __name__ == "__main__":
    sys.exit(main())
