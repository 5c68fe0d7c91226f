"""GEMM eager vs CUDA graph: the tiling family's picks through the plan/run launch path (LaunchPlan)
and through Triton's JIT entry, beside torch.matmul (cuBLAS), the 7 bf16 shapes of issue 18.

    PYTHONPATH=src python3 benchmarks/gemm_eager.py --out $OUT        # on the GPU (about 40-60 s)
    PYTHONPATH=src python3 benchmarks/gemm_eager.py --dry-run         # anywhere: interpreter, tiny shapes

Schedules (decision SC): 0 data-parallel, 1 persistent, 2 stream-K. On the skinny/ragged shapes (SKINNY) the
model's --per-schedule best designs of each schedule are measured too (one a schedule on the other shapes, so the
fit sees every schedule everywhere), and the measured best of each schedule is timed in all three modes beside
the pick on SKINNY ("best_sc0/1/2" rows).

Per shape: the MILP pick and the model's next --top designs of distinct tilings are compiled (in parallel), each checked
(fresh random operands, NaN-poisoned output, float64 reference) and timed in graph mode; the pick and
the measured best are then timed in three ways, as is torch.matmul on the same operand sets:
    graph   CUDA-graph replay (launch path out of the number)
    eager   one call at a time, CUDA events around it, synchronized (latency a caller sees)
    stream  back-to-back eager calls, no sync between them (throughput of an eager loop)
Every timing carries the SM clock (MHz) before/after and NVML's mean power (W) during it.
Then the model learns (learn_and_resolve): every graph timing is a calibration point in the population store
(--store, default OUT/population.db), the schedule family is refit with the schedules' own terms first (eta_sk,
h_sk, t_sk: stream-K's mainloop rate, its scattered-wave operand re-reads, its fix-up), the fit is stored as
the store's latest calibration (what `formloop solve/measure --chip h200` read), every shape is re-solved under
it and the re-pick is timed in every mode; the last table shows pick before the fit (priors), pick after it,
the best measured design and cuBLAS per shape, with geomeans.
Ratios are cuBLAS time / ours (> 1: faster than cuBLAS). Writes gemm_eager.json; prints the table."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

SHAPES = [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000), (128, 4096, 12288), (1, 4096, 12288),
          (4096, 12288, 4096), (8192, 8192, 8192)]
DRY_SHAPES = [(17, 40, 48), (1, 48, 200)]
SKINNY = {(64, 4096, 4096), (1000, 1000, 1000), (128, 4096, 12288), (1, 4096, 12288), *DRY_SHAPES}
SCHEDULES = {0: "data-parallel", 1: "persistent", 2: "stream-K"}
SOLVER = ["enumerate"]  # --solver: enumeration (the MILP's optimum, tests/test_gemm_schedules_model.py) or the MILP


def _milp(f):
    from formloop.solve import solve_milp
    return solve_milp(f)


def _enumerate(f):
    from formloop.solve import enumerate_designs
    return enumerate_designs(f)


SOLVERS = {"milp": _milp, "enumerate": _enumerate}


def _state(t) -> dict:
    d = dict(t.device) if t.device else {}
    b, a = d.get("before", {}), d.get("after", {})
    return {"sm_mhz_before": b.get("sm_mhz"), "sm_mhz_after": a.get("sm_mhz"), "power_w": d.get("mean_power_w"),
            "temperature_c": a.get("temperature_c")}


def time_all(runnable, device, gen, policy, l2_bytes, modes=("graph", "eager", "stream")) -> dict:
    from formloop.measure.timer import operand_sets_for, time_launches

    n_sets = operand_sets_for(runnable.case_bytes, l2_bytes, policy)
    cases = [runnable.new_case(device, gen) for _ in range(n_sets)]
    out = {}
    for mode in modes:
        if mode == "stream" and not str(device).startswith("cuda"):
            continue
        t = time_launches(lambda i: runnable.launch(cases[i]), n_sets, device=device, mode=mode, policy=policy).timing
        out[mode] = {"us": t.seconds * 1e6, "p20_us": t.p20_s * 1e6, "p80_us": t.p80_s * 1e6, "source": t.source,
                     "method": t.describe(), **_state(t)}
    return out


def run_context(gpu: bool, l2: int) -> dict:
    """What run_shape measures with: device, seeded generator, timing policy, L2 bytes, and the programs of the
    persistent and stream-K schedules (the device's SMs; the interpreter: a few, so runs share tiles)."""
    import torch

    from formloop.measure.timer import TimingPolicy

    device = "cuda" if gpu else "cpu"
    policy = TimingPolicy(graph_ms=1.5, budget_ms=25.0, min_reps=5, max_reps=20, max_calls=150) if gpu else \
        TimingPolicy(budget_ms=1.0, min_reps=2, max_calls=2, max_sets=1)
    return {"device": device, "gen": torch.Generator(device=device).manual_seed(0), "policy": policy, "l2": l2,
            "sms": torch.cuda.get_device_properties(0).multi_processor_count if gpu else 3}


def launch_path(inst, device) -> dict:
    """How the instance's launches went: 'thin' or 'jit' with the reason (never empty for 'jit'), and
    the runs that took Triton's JIT entry anyway (operands that specialize differently)."""
    lp = inst.launch_plan(device)  # 'cuda' and 'cuda:0' name the one plan the launches used
    return {"path": lp.path, "fallback": lp.fallback, "jit_calls": lp.jit_calls}


def candidates(template, shape, chip, top: int, per_schedule: int = 0) -> list[dict]:
    from formloop.library.gemm_tiling import workload

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemm import top_designs

    f = template.formulate(workload(shape, "bf16"), chip)
    pick = dict(SOLVERS[SOLVER[0]](f).assignment)
    out, seen = [pick], {tiling_of(pick)}
    for a in top_designs(f, 400):  # model order, one design per tiling: G and L variants measured no better
        if len(out) > top:
            break
        if tiling_of(a) not in seen:
            seen.add(tiling_of(a))
            out.append(dict(a))
    if per_schedule:  # the model's best designs of each schedule (SC): best-of-schedules, and points that let the
        # fit see every schedule on every shape (one a schedule on the large shapes, where stream-K lost 1.3x)
        ranked = top_designs(f, 10 ** 6)  # every feasible design, model order
        for sc in SCHEDULES:
            n = 0
            for a in ranked:
                if n >= (per_schedule if shape in SKINNY else 1):
                    break
                if int(a["SC"]) == sc and tiling_of(a) not in seen:
                    seen.add(tiling_of(a))
                    out.append(dict(a))
                    n += 1
    return out


def tiling_of(a) -> tuple:
    """The decisions that change the work split (tile, depth, stages, warps, split-K), not G or L: the
    H200 run's top-5 per shape were mostly G/L variants of the pick (within 1% of it, L=0 slower)."""
    return tuple(int(a[k]) for k in ("Tm", "Tn", "Tk", "S", "W", "KS")) + (int(a.get("SC", 0)),)


def run_shape(shape, designs, ctx, with_torch: bool = True) -> dict:
    import torch

    from formloop.evaluate.gpu import check
    from formloop.library.gemm_tiling_instance import TorchGemm, TritonGemm
    from formloop.library.gemm_tiling_kernel import GemmPlan, TileConfig

    device, gen, policy, l2 = ctx["device"], ctx["gen"], ctx["policy"], ctx["l2"]
    M, N, K = shape
    row: dict = {"shape": list(shape), "designs": []}
    if with_torch:
        torch_inst = TorchGemm(M, N, K, "bf16")
        torch_inst.launch = lambda case: torch.matmul(case.a, case.b, out=case.c)  # bf16: no math-mode write per call
        row["torch"] = {"check": check(torch_inst, device, gen).__dict__,
                        **time_all(torch_inst, device, gen, policy, l2)}
    best = None
    for i, a in enumerate(designs):
        inst = TritonGemm(GemmPlan(TileConfig.from_assignment(a), M, N, K, "bf16", sms=ctx["sms"]))
        rec = {"design": a, "model_pick": i == 0, "schedule": SCHEDULES[int(a.get("SC", 0))]}
        try:
            c = check(inst, device, gen)
            rec["check"] = c.__dict__
            if c.passed:
                rec.update(time_all(inst, device, gen, policy, l2, modes=("graph",)))
                rec.update(launch_path(inst, device))
        except Exception as exc:  # noqa: BLE001 - a compile/launch failure is a result
            rec["failure"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        row["designs"].append(rec)
        if "graph" in rec and (best is None or rec["graph"]["us"] < row["designs"][best]["graph"]["us"]):
            best = i
    labels = [("pick", 0), ("best", best)]
    if tuple(shape) in SKINNY:  # the measured best of each schedule, timed in every mode
        for sc in SCHEDULES:
            timed = [j for j, d in enumerate(row["designs"]) if "graph" in d and int(d["design"].get("SC", 0)) == sc]
            if timed:
                labels.append((f"best_sc{sc}", min(timed, key=lambda j: row["designs"][j]["graph"]["us"])))
    for label, i in labels:
        if i is None or "graph" not in row["designs"][i]:
            continue
        a = row["designs"][i]["design"]
        thin = TritonGemm(GemmPlan(TileConfig.from_assignment(a), M, N, K, "bf16", sms=ctx["sms"]))
        jit = TritonGemm(GemmPlan(TileConfig.from_assignment(a), M, N, K, "bf16", sms=ctx["sms"]), thin=False)
        row[label] = {"design": a, "index": i, "plan": time_all(thin, device, gen, policy, l2),
                      "jit_eager": time_all(jit, device, gen, policy, l2, modes=("eager",))["eager"],
                      **launch_path(thin, device)}
    return row


FIT_FIRST = ("eta_sk", "h_sk", "t_sk")  # the schedules' own terms (gemm_tiling_gpu.SCHED_CALIBRATED), fitted first


def learn_and_resolve(rows, shapes, result, out_dir, ctx, chip, store: str | None = None) -> dict:
    """Every graph timing becomes a calibration point in the population store (--store, default under
    --out), as the learning loop stores them; the schedule family is refit with the schedules' own terms
    first (population.calibrations.learn(first=...): stream-K's mainloop rate, its scattered-wave
    re-reads, its fix-up), stored as the store's latest calibration, and every shape is re-solved under
    it. The re-pick is timed in every mode (graph, eager, stream) in this run, beside the prior pick."""
    from formloop.library import get_template, template_factory
    from formloop.library.gemm_tiling import workload
    from formloop.population import Population
    from formloop.population import calibrations as cal

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gemm import key_of

    versions = (result.get("device") or {}).get("versions") or {"source": "interpreter"}
    toolchain = cal.toolchain_of(versions) or "interpreter"
    out: dict = {"store": store or os.path.join(out_dir, "population.db"), "toolchain": toolchain, "shapes": []}
    t_fit = time.time()
    with Population(out["store"]) as pop:
        for r in rows:
            w = workload(tuple(r["shape"]), "bf16")
            for d in r["designs"]:
                if "graph" in d:
                    cal.add_point(pop, template="gemm-tiling-gpu", dtype="bf16", chip="h200", toolchain=toolchain,
                                  device=str(versions), workload=w, assignment=d["design"],
                                  latency_us=d["graph"]["us"], p20_us=d["graph"].get("p20_us"),
                                  p80_us=d["graph"].get("p80_us"), source="benchmarks/gemm_eager.py")
        factory = template_factory("gemm-tiling-gpu")
        new, note = cal.learn(pop, lambda **kw: factory(schedules=True, **kw), chip, template="gemm-tiling-gpu",
                              dtype="bf16", chip="h200", toolchain=toolchain, source="benchmarks/gemm_eager.py",
                              iterations=30, max_terms=8, first=FIT_FIRST)
    out["note"], out["fit_s"] = note, time.time() - t_fit
    if new is None:
        return out
    out["calibration"] = new.as_dict()
    t = get_template("gemm-tiling-gpu", dtype="bf16", calibration=dict(new.terms), calibration_id=new.key,
                     schedules=True)
    for r, s in zip(rows, shapes):
        pick = dict(SOLVERS[SOLVER[0]](t.formulate(workload(s, "bf16"), chip)).assignment)
        known = {key_of(d["design"]): d for d in r["designs"]}
        entry = {"shape": list(s), "design": pick, "label": new.label, "schedule": SCHEDULES[int(pick["SC"])],
                 "same_as_prior": key_of(pick) == key_of(r["designs"][0]["design"])}
        if key_of(pick) in known and "graph" in known[key_of(pick)]:
            entry["graph_us"] = known[key_of(pick)]["graph"]["us"]
        if entry["same_as_prior"] and "pick" in r:
            entry["plan"] = r["pick"]["plan"]
        elif ctx is None and entry.get("graph_us"):  # --replay: the menu's graph timing of the re-pick
            entry["plan"] = {"graph": {"us": entry["graph_us"]}}
        elif ctx is not None:  # a new pick (or one timed in graph mode only): time it in every mode now
            rr = run_shape(s, [pick], ctx, with_torch=False)
            entry["plan"] = rr.get("pick", {}).get("plan")
            entry["graph_us"] = entry.get("graph_us") or rr["designs"][0].get("graph", {}).get("us")
            entry["failure"] = rr["designs"][0].get("failure")
        for mode in ("graph", "eager", "stream"):
            ours = (entry.get("plan") or {}).get(mode, {}).get("us")
            entry[f"ratio_{mode}"] = ratio(r["torch"].get(mode, {}).get("us"), ours)
        out["shapes"].append(entry)
    for mode in ("graph", "eager", "stream"):
        rs = [e[f"ratio_{mode}"] for e in out["shapes"] if math.isfinite(e[f"ratio_{mode}"])]
        out[f"fit_{mode}_geomean"] = math.exp(sum(map(math.log, rs)) / len(rs)) if rs else math.nan
    return out


def ratio(ref: float | None, ours: float | None) -> float:
    return ref / ours if ref and ours and math.isfinite(ours) else math.nan


def summarize(rows) -> dict:
    out = {}
    for label in ("pick", "best"):
        for mode in ("graph", "eager", "stream"):
            rs = [ratio(r["torch"].get(mode, {}).get("us"), r[label]["plan"].get(mode, {}).get("us"))
                  for r in rows if label in r]
            rs = [x for x in rs if math.isfinite(x)]
            out[f"{label}_{mode}_geomean"] = math.exp(sum(map(math.log, rs)) / len(rs)) if rs else math.nan
    return out


def print_table(rows, summary, source: str) -> None:
    print(f"\nbf16 GEMM, times in us ({source}); ratio = torch.matmul / ours; SM MHz and W during the eager run")
    print(f"{'shape':>17} {'which':>8} {'schedule':>13} {'graph':>8} {'eager':>8} {'stream':>8} {'jit-eager':>9} "
          f"{'cuBLAS g/e/s':>22} {'ratio g/e/s':>17} {'MHz':>5} {'W':>5} launch path")
    for r in rows:
        t = r["torch"]
        for label in ("pick", "best", *(f"best_sc{sc}" for sc in SCHEDULES)):
            if label not in r:
                continue
            p = r[label]["plan"]

            def us(d, m):
                return d.get(m, {}).get("us", math.nan)
            rat = "/".join(f"{ratio(us(t, m), us(p, m)):.2f}" for m in ("graph", "eager", "stream"))
            cub = "/".join(f"{us(t, m):.1f}" for m in ("graph", "eager", "stream"))
            e = p.get("eager", {})
            sc = SCHEDULES[int(r[label]["design"].get("SC", 0))]
            print(f"{'x'.join(map(str, r['shape'])):>17} {label:>8} {sc:>13} {us(p, 'graph'):8.1f} "
                  f"{us(p, 'eager'):8.1f} "
                  f"{us(p, 'stream'):8.1f} {r[label]['jit_eager'].get('us', math.nan):9.1f} {cub:>22} {rat:>17} "
                  f"{e.get('sm_mhz_after') or math.nan:5.0f} {e.get('power_w') or math.nan:5.0f} "
                  f"{r[label]['path']}{' (' + r[label]['fallback'] + ')' if r[label]['fallback'] else ''}")
    print("geomean ratio vs cuBLAS: " + ", ".join(f"{k} {v:.3f}" for k, v in summary.items()))


def print_fit_table(rows, lr, source: str, before: str = "priors") -> None:
    """Pick before the fit (priors), pick after it (this run's fit), best measured and cuBLAS, per shape."""
    print(f"\ncalibration learned from this run's graph timings ({lr['toolchain']}, fit {lr.get('fit_s', 0):.1f} s "
          f"wall): {lr['note']}")
    if not lr.get("shapes"):
        return
    fitted = lr.get("calibration", {}).get("terms", {})
    print("fitted: " + ", ".join(f"{k} {fitted[k]:.4g}" for k in lr["calibration"]["fitted"]))
    print(f"\nus ({source}), graph/eager; ratio = cuBLAS / ours; before = {before}, after = {lr['shapes'][0]['label']}")
    print(f"{'shape':>17} {'before (sched) g/e':>30} {'after (sched) g/e':>30} {'best measured g/e':>30} "
          f"{'cuBLAS g/e':>15} {'ratio before':>12} {'after':>10} {'best':>10}")

    def ge(plan):
        return tuple((plan or {}).get(m, {}).get("us", math.nan) for m in ("graph", "eager"))
    geo: dict = {k: [] for k in ("before", "after", "best")}
    for r, e in zip(rows, lr["shapes"]):
        cub = ge(r["torch"])
        cols = {"before": (ge(r.get("pick", {}).get("plan")), SCHEDULES[int(r["designs"][0]["design"].get("SC", 0))]),
                "after": (ge(e.get("plan")), e["schedule"]),
                "best": (ge(r.get("best", {}).get("plan")),
                         SCHEDULES[int(r.get("best", {}).get("design", {}).get("SC", 0))])}
        cells, rats = [], []
        for k, ((g, ea), sc) in cols.items():
            cells.append(f"{g:8.1f} / {ea:8.1f} ({sc})")
            rg, re_ = ratio(cub[0], g), ratio(cub[1], ea)
            geo[k].append((rg, re_))
            rats.append(f"{rg:.2f}/{re_:.2f}")
        print(f"{'x'.join(map(str, r['shape'])):>17} {cells[0]:>30} {cells[1]:>30} {cells[2]:>30} "
              f"{cub[0]:6.1f} / {cub[1]:6.1f} {rats[0]:>12} {rats[1]:>10} {rats[2]:>10}")

    def gm(xs):
        xs = [x for x in xs if math.isfinite(x)]
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan
    print("geomean cuBLAS/ours graph/eager: " + ", ".join(
        f"{k} {gm([a for a, _ in v]):.3f}/{gm([b for _, b in v]):.3f}" for k, v in geo.items()))


def replay(args) -> int:
    from formloop.hw.chips import get_chip

    with open(args.replay) as fh:
        old = json.load(fh)
    os.makedirs(args.out, exist_ok=True)
    rows = old["rows"]
    lr = learn_and_resolve(rows, [tuple(r["shape"]) for r in rows], old, args.out, None, get_chip("h200"), args.store)
    with open(os.path.join(args.out, "gemm_eager_replay.json"), "w") as fh:
        json.dump(lr, fh, indent=1, default=str)
    print_fit_table(rows, lr, f"{old.get('source')}, replayed from {args.replay} ({old.get('started')})",
                    before="that run's picks")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--top", type=int, default=5, help="model-ranked designs (distinct tilings) measured per shape "
                   "besides the pick")
    p.add_argument("--per-schedule", type=int, default=2, help="on the skinny/ragged shapes, the model's best "
                   "designs of each schedule (data-parallel, persistent, stream-K) measured besides")
    p.add_argument("--solver", choices=sorted(SOLVERS), default="enumerate", help="how the pick is solved "
                   "(enumerate: the MILP's optimum by exhaustive search, seconds instead of tens of seconds a shape)")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--store", default=None, help="population store the points and the fit are written to "
                   "(default: OUT/population.db; `formloop solve/measure --chip h200` read its latest fit)")
    p.add_argument("--dry-run", action="store_true", help="no GPU: Triton interpreter on tiny shapes")
    p.add_argument("--replay", default=None, help="no GPU: refit and re-solve from an earlier run's gemm_eager.json "
                   "(after-fit column: graph times of re-picks that run measured)")
    args = p.parse_args(argv)
    SOLVER[0] = args.solver
    if args.replay:
        return replay(args)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    os.makedirs(args.out, exist_ok=True)
    import torch

    from formloop.hw.chips import get_chip
    from formloop.library import get_template

    t0 = time.time()
    gpu = not args.dry_run and torch.cuda.is_available()
    shapes = SHAPES if gpu else DRY_SHAPES
    template, chip = get_template("gemm-tiling-gpu", dtype="bf16", schedules=True), get_chip("h200")
    t_solve = time.time()
    plans = {s: candidates(template, s, chip, args.top if gpu else 1, args.per_schedule if gpu else 1) for s in shapes}
    result: dict = {"command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "source": "gpu" if gpu else "interpreter (cpu wall time: not a GPU figure)",
                    "calibration": "priors", "solver": args.solver, "solve_s": time.time() - t_solve}
    print(f"[{time.time() - t0:6.1f} s] picks and candidates solved ({args.solver}, {result['solve_s']:.1f} s wall)",
          flush=True)
    if gpu:
        from gemm import precompile

        from formloop.measure.device import device_facts
        jobs = [(a, s, "bf16") for s, ds in plans.items() for a in ds]
        result["precompile"] = precompile(jobs, args.workers)
        result["device"] = device_facts()
        l2 = result["device"]["l2_bytes"]
    else:
        l2 = 1 << 20
    ctx = run_context(gpu, l2)
    result["sms"] = ctx["sms"]
    rows = []
    for s in shapes:
        rows.append(run_shape(s, plans[s], ctx))
        print(f"[{time.time() - t0:6.1f} s] {s} done", flush=True)
    result["rows"], result["summary"] = rows, summarize(rows)
    result["learned"] = learn_and_resolve(rows, shapes, result, args.out, ctx, chip, args.store)
    result["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "gemm_eager.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    print_table(rows, result["summary"], result["source"])
    print_fit_table(rows, result["learned"], result["source"])
    print(f"total {result['seconds']:.0f} s (wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
