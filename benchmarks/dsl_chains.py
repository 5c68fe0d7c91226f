"""Fused GEMM chains written as kernel specs (formloop.dsl) vs the same chains in torch: eager
(one kernel per operation) and torch.compile(mode="max-autotune-no-cudagraphs"), bf16, LLM sizes.

    PYTHONPATH=src python3 benchmarks/dsl_chains.py --out $OUT     # on the GPU machine, one call (< 3 min)
    PYTHONPATH=src python3 benchmarks/dsl_chains.py --dry-run --out /tmp/d   # CPU: interpreter, tiny, no timing

Each chain is a spec whose tile fields are all open. Per chain it measures the MILP pick of the
template's model (calibrated with the round-2 H200 fit, benchmarks/RESULTS.md) and the model's next
best designs (top-k by predicted time, k = --top): a handful of kernels, compiled in parallel up
front. Every instance and both baselines first pass the correctness check on fresh inputs
(NaN-poisoned output, float64 reference rounded as the output is stored); then CUDA-graph replays
(formloop.evaluate.gpu.time_runnable, which records SM clock and power) and eager launches are
timed in this one process. Phase 1 measures our kernels and torch eager for every chain; phase 2
compiles and measures torch.compile per chain while the time budget lasts. Reports the model's pick
and the best, SOL fractions (datasheet peaks), speedups and their geomeans; writes dsl_chains.json
under --out after every chain."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

ROUND2_BF16 = {"eta_mma": 1.09, "eta_sync": 0.455, "n0": 5.73, "f_n16": 0.556, "f_n32": 0.716, "f_n64": 1.0,
               "bw_sm": 1.17e11, "lat": 5e-08, "t_iter": 1.14e-08, "t_sync": 5e-12, "t_issue": 6.4e-09,
               "t_tile": 4.47e-09, "t_epi": 2.95e-08, "eta_bw": 1.02, "alpha": 0.337, "t_launch": 6.07e-06,
               "d32": 0.914, "d64": 0.984, "lat_m": 1.37e-07, "t_fix": 1.52e-07, "lat_d": 1.72e-07}


def _linear(x, b, bias=None):
    """nn.Linear as eager runs it: b is the logical K x N view of the weight stored [N, K]."""
    import torch.nn.functional as F

    return F.linear(x, b.transpose(-1, -2), bias)


def _chains():
    import torch
    import torch.nn.functional as F

    def glu(x, b):
        y = _linear(x, b)
        return F.silu(y[..., 0::2]) * y[..., 1::2]

    return [  # name, op, b layout, c dtype, shape, epilogue, eager(inputs)
        ("linear_bias_gelu", "gemm", "col", "bf16", (4096, 16384, 4096), "bias(row) >> gelu(tanh)",
         lambda t: F.gelu(_linear(t["a"], t["b"], t["bias"]), approximate="tanh")),
        ("gate_up_swiglu", "gemm", "col", "bf16", (4096, 22016, 4096), "glu(silu)", lambda t: glu(t["a"], t["b"])),
        ("linear_residual", "gemm", "col", "bf16", (4096, 4096, 4096), "add(residual)",
         lambda t: t["residual"] + _linear(t["a"], t["b"])),
        ("gemm_scale_clamp", "gemm", "row", "bf16", (4096, 8192, 2048), "scale(0.125) >> clamp(-5, 5)",
         lambda t: torch.clamp(t["a"] @ t["b"] * 0.125, -5, 5)),
        # eager rounds the logits to bf16 before its fp32 softmax; the spec says so with cast(bf16)
        ("router_softmax", "gemm", "col", "fp32", (16384, 128, 2048), "cast(bf16) >> softmax",
         lambda t: torch.softmax(_linear(t["a"], t["b"]), dim=-1, dtype=torch.float32)),
        ("decode_swiglu", "gemm", "col", "bf16", (32, 28672, 4096), "glu(silu)", lambda t: glu(t["a"], t["b"])),
        ("attn_scores_softmax", "batched_gemm", "col", "bf16", (256, 256, 256, 128),
         "scale(0.08838834764831845) >> softmax",
         lambda t: torch.softmax(torch.bmm(t["a"], t["b"]) * 0.08838834764831845, dim=-1)),
        ("dequant_silu", "gemm", "col", "bf16", (2048, 11008, 4096),
         "scale(row, fp32, w_scale) >> scale(col, fp32, x_scale) >> silu",
         lambda t: F.silu(_linear(t["a"], t["b"]).float() * t["w_scale"] * t["x_scale"][:, None]).to(torch.bfloat16)),
    ]


# Designs measured beside the model's top-k where the template admits them (Tm,Tn,Tk,S,W,KS,G,L): two blocks
# per SM (<= ~113 KiB of stages each) so one block's epilogue overlaps the other's main loop (the model credits
# half of it, a prior: gemm_epilogue.EPI_OVERLAP), the 128x256 tile the epilogue halves admit beside a residual,
# and the previous run's best where the model's pick moved away from it (attn 128x256x64).
EXTRA = {
    "linear_bias_gelu": ((128, 128, 64, 3, 4, 1, 8, 1), (128, 128, 64, 3, 8, 1, 8, 1)),
    "linear_residual": ((128, 256, 64, 4, 8, 1, 8, 1), (128, 128, 64, 3, 4, 1, 8, 1), (128, 128, 64, 3, 8, 1, 8, 1)),
    "router_softmax": ((64, 128, 64, 4, 4, 1, 8, 1), (64, 128, 128, 3, 4, 1, 8, 1), (128, 128, 64, 3, 8, 1, 8, 1)),
    "attn_scores_softmax": ((128, 256, 64, 4, 8, 1, 8, 1), (64, 256, 128, 1, 8, 1, 8, 1), (64, 256, 64, 2, 8, 1, 8, 1),
                            (128, 256, 128, 1, 8, 1, 8, 1),
                            (64, 256, 64, 2, 4, 1, 8, 1)),
    "dequant_silu": ((128, 128, 64, 3, 4, 1, 8, 1), (128, 128, 64, 3, 8, 1, 8, 1), (128, 256, 64, 3, 8, 1, 8, 1)),
}
DESIGN_KEYS = ("Tm", "Tn", "Tk", "S", "W", "KS", "G", "L")


def spec_text(name, op, lb, c, dims, epilogue) -> str:
    return (f"kernel {name} = {op} {{\n  a = bf16 row\n  b = bf16 {lb}\n  c = {c} row\n  arch = sm90\n"
            f"  shape = {' x '.join(map(str, dims))}\n}}\n>> {epilogue}\n")


def tiny(dims, op, epilogue):
    """CPU dry run: the same chain at a size the interpreter runs in seconds (rows whole for softmax)."""
    keep_n = "softmax" in epilogue
    if op == "batched_gemm":
        return (2, 32, dims[2] if keep_n else 48, 64)
    return (40, dims[1] if keep_n else 48, 64)


class TorchChain:
    """A torch implementation of a chain on the spec program's inputs (Runnable)."""

    tier_source = "torch"

    def __init__(self, program, fn, name):
        self.program, self.fn, self.name = program, fn, name
        self.tolerance = program.tolerance

    def new_case(self, device, generator):
        case = self.program.new_case(device, generator)
        case.result = None
        return case

    def launch(self, case):
        case.result = self.fn(case.caller)

    def output(self, case):
        return case.result

    def reference(self, case):
        return self.program.reference(case)

    def poison(self, case):
        case.result = None

    @property
    def case_bytes(self):
        return self.program.case_bytes


def sweep(v, gpu: bool, top: int, extra: tuple = ()) -> list[tuple[str, dict]]:
    """(label, assignment): the calibrated model's MILP pick (first: "pick") and its top `top`
    designs by predicted time over the feasible joint menu, one per tile shape (the same template
    and tie-break; the pick is normally model-top1 and then carries both labels). The dry run picks
    by enumeration."""
    import numpy as np

    from formloop.dsl.bridge import design
    from formloop.dsl.validate import template_for, workload_of
    from formloop.hw.chips import get_chip
    from formloop.solve.enumerate import assignment_at, feasible_mask, term_grid

    out = [("pick", dict(design(v, calibration=ROUND2_BF16, calibration_id="round2", prove=False,
                                solver="milp" if gpu else "enumerate").assignment))]
    t = template_for(v.spec, ROUND2_BF16, "round2")
    f = t.formulate(workload_of(v.spec), get_chip("h200"))
    flat = np.flatnonzero(feasible_mask(f))
    cost = term_grid(f, f.cost).ravel()[flat]
    shapes = set()  # one design per tile shape (Tm, Tn, Tk, KS, L): the best S, W, G of each in the model
    for j in flat[np.argsort(cost, kind="stable")]:
        a = assignment_at(f, int(j))
        key = tuple(int(a[k]) for k in ("Tm", "Tn", "Tk", "KS", "L"))
        if key not in shapes:
            shapes.add(key)
            out.append((f"model-top{len(shapes)}", a))
        if len(shapes) == top:
            break
    for values in extra:  # --extra and EXTRA designs, where the template admits them at this chain's shape
        a = dict(zip(DESIGN_KEYS, values))
        if not t.check(a, workload_of(v.spec), get_chip("h200")):
            out.append(("extra-" + ",".join(map(str, values)), a))
    from formloop.library.gemm_epilogue_ops import chain_facts, splits_epilogue

    if splits_epilogue(chain_facts(v.spec.kernel.chain), int(out[0][1]["Tn"])):  # the pick's epilogue on the
        out.append(("pick-whole", {**out[0][1], "EPI": 0}))                     # whole tile: what the halves gain
    return _unique(out)


def _sweep_job(job):
    """sweep() in a worker process (the MILP takes seconds per chain: the chains solve in parallel)."""
    text, name, gpu, top, extra = job
    from formloop.dsl.lower import read_spec
    from formloop.dsl.validate import validate

    return sweep(validate(read_spec(text, name)), gpu, top, extra + (EXTRA.get(name, ()) if gpu else ()))


def _unique(variants):
    """One entry per design; a design reached twice keeps both labels ("pick+pick-priors")."""
    by_key: dict[tuple, list] = {}
    for label, a in variants:
        key = tuple(int(a[k]) for k in DESIGN_KEYS) + (a.get("EPI"),)
        if key in by_key:
            by_key[key][0] += f"+{label}"
        else:
            by_key[key] = [label, {k: int(x) for k, x in a.items()}]
    return [tuple(x) for x in by_key.values()]


def _compile_job(job):
    text, assignment = job
    try:
        import torch

        from formloop.dsl.lower import read_spec
        from formloop.dsl.program import SpecProgram, plan_of
        from formloop.library.gemm_epilogue_emit import Shape

        spec = read_spec(text)
        s = spec.kernel.shape
        small = Shape(min(s.M, 2 * assignment["Tm"]), s.N, s.K, batch=min(s.batch, 2), conv=s.conv)
        prog = SpecProgram(spec, plan_of(spec, assignment, small, _epi(assignment)))
        prog.launch(prog.new_case("cuda", torch.Generator(device="cuda").manual_seed(0)))
        torch.cuda.synchronize()
        return ""
    except Exception as exc:  # noqa: BLE001 - recorded; the measurement will record the failure too
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def _epi(assignment) -> bool | None:
    """The epilogue halves of a design: None (the family's rule) unless the design says (EPI 0/1)."""
    return None if assignment.get("EPI") is None else bool(assignment["EPI"])


def precompile(jobs, workers: int) -> dict:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    start = time.time()
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        errors = [e for e in pool.map(_compile_job, jobs) if e]
    return {"kernels": len(jobs), "seconds": time.time() - start, "errors": errors[:10]}


def measure(runnable, gpu: bool, gen, device: str, *, time_failed: bool = False) -> dict:
    """Correctness, then (GPU, passed or `time_failed`) CUDA-graph and eager timings with the SM
    clock before/after and the mean board power during the graph replays (NVML)."""
    from formloop.dsl.run import time_eager
    from formloop.evaluate.gpu import TimingPolicy, check, device_facts, time_runnable

    try:
        c = check(runnable, device, gen)
        row = {"correct": c.passed, "rel_error": c.rel_error, "max_error_rms": c.max_error_rms,
               "tolerance": c.tolerance}
        if gpu and (c.passed or time_failed):
            g = time_runnable(runnable, device, gen, TimingPolicy(), device_facts()["l2_bytes"])
            dev = g.get("device") or {}
            row.update(graph_us=g["median_us"], graph_p20_us=g["p20_us"], graph_p80_us=g["p80_us"],
                       sm_mhz=[dev.get(k, {}).get("sm_mhz") for k in ("before", "after")],
                       power_w=dev.get("mean_power_w"), eager_us=time_eager(runnable, device, gen)["median_us"])
        return row
    except Exception as exc:  # noqa: BLE001 - a compile or launch failure is a result, with its class
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        return {"correct": False, "failure": f"{type(exc).__name__}: {first}"}


def timed_only(runnable, gen, device: str) -> dict:
    """CUDA-graph and eager times of a runnable that is not the chain (no correctness check)."""
    from formloop.dsl.run import time_eager
    from formloop.evaluate.gpu import TimingPolicy, device_facts, time_runnable

    try:
        g = time_runnable(runnable, device, gen, TimingPolicy(), device_facts()["l2_bytes"])
        return {"graph_us": g["median_us"], "eager_us": time_eager(runnable, device, gen)["median_us"]}
    except Exception as exc:  # noqa: BLE001
        return {"failure": f"{type(exc).__name__}: {str(exc)[:200]}"}


def geomean(xs):
    xs = [x for x in xs if x and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--top", type=int, default=6, help="the model's top designs measured per chain (besides its pick)")
    p.add_argument("--budget-s", type=float, default=150.0,
                   help="wall seconds after which no torch.compile baseline is started (phase 2)")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (its autotuning is most of the run)")
    p.add_argument("--compile-from", default="", metavar="PREV_JSON",
                   help="take the torch.compile baseline of each chain from an earlier run's dsl_chains.json (same "
                   "device name, same shape and spec; labelled 'reused'); chains not found there are compiled")
    p.add_argument("--chains", default="", help="comma-separated chain names (default: all)")
    p.add_argument("--extra", default="", help="more designs for every chain that admits them: "
                   "'Tm,Tn,Tk,S,W,KS,G,L;...' (labelled extra-...)")
    p.add_argument("--dry-run", action="store_true", help="CPU: Triton's interpreter at tiny shapes, no timing")
    args = p.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is first imported
    import torch

    from formloop.dsl.lower import read_spec
    from formloop.dsl.program import SpecProgram, plan_of
    from formloop.dsl.run import sol_floor
    from formloop.dsl.validate import validate

    gpu = torch.cuda.is_available() and not args.dry_run
    if not gpu and os.environ.get("TRITON_INTERPRET") != "1":
        print("no CUDA device: run with --dry-run for the CPU correctness pass", file=sys.stderr)
        return 2
    device, start = ("cuda" if gpu else "cpu"), time.time()
    gen = torch.Generator(device=device).manual_seed(0)
    names = [c[0] for c in _chains()]
    unknown = [n for n in args.chains.split(",") if n and n not in names]
    if unknown:
        print(f"--chains: unknown {unknown}; allowed {names}", file=sys.stderr)
        return 2
    chains = [c for c in _chains() if not args.chains or c[0] in args.chains.split(",")]
    try:
        previous = _previous(args.compile_from)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"--compile-from: {args.compile_from!r} unreadable ({type(exc).__name__}: {exc}); allowed: a "
              f"dsl_chains.json written by this benchmark", file=sys.stderr)
        return 2
    texts = [spec_text(name, op, lb, c, dims if gpu else tiny(dims, op, epi), epi)
             for name, op, lb, c, dims, epi, fn in chains]
    try:
        extra = tuple(tuple(int(x) for x in d.split(",")) for d in args.extra.split(";") if d.strip())
        assert all(len(d) == 8 for d in extra)
    except (ValueError, AssertionError):
        print(f"--extra: {args.extra!r}; allowed: designs Tm,Tn,Tk,S,W,KS,G,L separated by ';'", file=sys.stderr)
        return 2
    jobs = [(text, c[0], gpu, args.top if gpu else 2, extra) for text, c in zip(texts, chains)]
    if gpu:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(len(jobs), args.workers), mp_context=mp.get_context("spawn")) as pool:
            sweeps = list(pool.map(_sweep_job, jobs))
    else:
        sweeps = [_sweep_job(j) for j in jobs]
    plans = [(c[0], text, validate(read_spec(text, c[0])), vs, c[6]) for c, text, vs in zip(chains, texts, sweeps)]
    print(f"[{time.time() - start:6.1f} s] {sum(len(vs) for vs in sweeps)} designs from the model", flush=True)
    result = {"device": torch.cuda.get_device_name() if gpu else "cpu (interpreter)", "chains": [],
              "versions": {"torch": torch.__version__}, "command": " ".join(sys.argv),
              "compile_from": args.compile_from or None}
    if gpu:
        from formloop.measure.device import read_device_state

        result["device_state_start"] = read_device_state()
        result["precompile"] = precompile([(t, a) for _, t, _, vs, _ in plans for _, a in vs], args.workers)
        print(f"[{time.time() - start:6.1f} s] compiled {result['precompile']['kernels']} kernels "
              f"({len(result['precompile']['errors'])} errors)", flush=True)
    bases = {}
    for name, text, v, variants, fn in plans:  # phase 1: our kernels and torch eager, every chain
        rows = []
        for label, a in variants:
            prog = SpecProgram(v.spec, plan_of(v.spec, a, None, _epi(a)))
            rows.append({"label": label, "assignment": a, **measure(prog, gpu, gen, device)})
        base = SpecProgram(v.spec, plan_of(v.spec, variants[0][1]))
        bases[name] = (base, fn)
        eager = measure(TorchChain(base, fn, "torch eager"), gpu, gen, device, time_failed=True)
        # the product alone through cuBLAS (not the chain: timed, not checked): what the epilogue costs us
        mm = timed_only(TorchChain(base, lambda t: t["a"] @ t["b"], "torch matmul"), gen, device) if gpu else {}
        sol = sol_floor(v.spec, v.spec.kernel.shape, base.case_bytes)
        timed = [r for r in rows if r.get("graph_us")]
        best = min(timed, key=lambda r: r["graph_us"]) if timed else None
        shape = v.spec.kernel.shape
        result["chains"].append({"name": name, "spec": text, "shape": {"M": shape.M, "N": shape.N, "K": shape.K,
                                                                       "batch": shape.batch},
                                 "variants": rows, "eager": eager, "matmul_only": mm, "compiled": None, "sol": sol,
                                 "pick": rows[0], "best": best})
        print(f"[{time.time() - start:6.1f} s] {name}: {len(rows)} designs, {sum(r['correct'] for r in rows)} correct",
              flush=True)
        _write(args.out, result)  # after every chain: a run cut short keeps what it measured
    for c in result["chains"] if gpu and not args.no_compile else []:  # phase 2: torch.compile
        if time.time() - start > args.budget_s and not _reuse(previous, c, result["device"]):
            c["compiled"] = {"skipped": f"time budget ({args.budget_s:.0f} s) spent"}
            continue
        reused = _reuse(previous, c, result["device"])
        if reused:
            c["compiled"] = reused
            continue
        base, fn = bases[c["name"]]
        t0 = time.time()
        cfn = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)
        c["compiled"] = {**measure(TorchChain(base, cfn, "torch.compile"), gpu, gen, device, time_failed=True),
                         "wall_s": time.time() - t0}  # compile and autotune, check, timing
        print(f"[{time.time() - start:6.1f} s] {c['name']}: torch.compile {c['compiled']['wall_s']:.0f} s", flush=True)
        _write(args.out, result)
    result["wall_s"] = time.time() - start
    _write(args.out, result)
    print_table(result, gpu)
    print(f"wall time {result['wall_s']:.0f} s (compiles included); results in {args.out}/dsl_chains.json")
    ok = all(r["correct"] for c in result["chains"] for r in c["variants"])
    return 0 if ok else 1


def _previous(path: str) -> dict:
    """An earlier run's torch.compile rows by chain name (with its device, shape and spec), or {}."""
    if not path:
        return {}
    with open(path) as fh:
        prev = json.load(fh)
    out = {}
    for c in prev["chains"]:
        cm = c.get("compiled") or {}
        if cm.get("graph_us") or cm.get("eager_us"):
            out[c["name"]] = {"device": prev["device"], "shape": c["shape"], "spec": c["spec"], "compiled": cm,
                              "path": path, "started": (prev.get("device_state_start") or {}).get("time")}
    return out


def _reuse(previous: dict, chain: dict, device: str) -> dict | None:
    """The earlier torch.compile row of `chain` if it was measured on the same device, shape and spec."""
    p = previous.get(chain["name"])
    if not p or p["device"] != device or p["shape"] != chain["shape"] or p["spec"] != chain["spec"]:
        return None
    return {**p["compiled"], "reused_from": p["path"], "skipped_compile": True}


def _write(out: str, result: dict) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "dsl_chains.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


def print_table(result: dict, gpu: bool) -> None:
    if not gpu:
        for c in result["chains"]:
            print(f"{c['name']:22s} {sum(r['correct'] for r in c['variants'])}/{len(c['variants'])} designs correct, "
                  f"eager correct: {c['eager']['correct']} (interpreter, tiny shape, not timed)")
        return
    print(f"\ndevice {result['device']}; times in us (median, gpu CUDA events); g = CUDA-graph replay, e = eager "
          f"launches from Python; SOL = floor from datasheet peaks (sol) / graph time; x = baseline graph time / ours; "
          f"mm = the product alone in torch (cuBLAS), bs/mm = what the fused epilogue costs over it")
    print(f"{'chain':20s} {'ok':>5s} {'floor':>7s} | {'pick g':>7s} {'e':>7s} {'SOL':>5s} | {'best g':>7s} {'e':>7s} "
          f"{'SOL':>5s} | {'eager g':>7s} {'e':>7s} {'SOL':>5s} | {'cmp g':>7s} {'e':>7s} {'SOL':>5s} | "
          f"{'pk/eag':>6s} {'bs/eag':>6s} {'pk/cmp':>6s} {'bs/cmp':>6s} | {'mm g':>7s} {'bs/mm':>5s} | "
          f"{'SM MHz':>9s} {'W':>4s}")
    sp = {k: [] for k in ("pe", "be", "pc", "bc", "bm", "pm")}
    for c in result["chains"]:
        n_ok = f"{sum(r['correct'] for r in c['variants'])}/{len(c['variants'])}"
        pick, best, e, cm = c["pick"], c["best"] or {}, c["eager"], c["compiled"] or {}
        mm = c.get("matmul_only") or {}
        floor = c["sol"]["floor_us"]
        g = lambda r: r.get("graph_us")  # noqa: E731
        ratios = {"pe": _ratio(g(e), g(pick)), "be": _ratio(g(e), g(best)), "pc": _ratio(g(cm), g(pick)),
                  "bc": _ratio(g(cm), g(best))}
        for k, x in ratios.items():
            sp[k].append(x)
        sp["bm"].append(_ratio(g(best), g(mm)))
        sp["pm"].append(_ratio(g(pick), g(mm)))
        cols = []
        for r in (pick, best, e, cm):
            cols.append(f"{_f(g(r), 7)} {_f(r.get('eager_us'), 7)} {_f(_ratio(floor, g(r)), 5, 2)}")
        mhz = best.get("sm_mhz") or [None, None]
        print(f"{c['name']:20s} {n_ok:>5s} {floor:7.1f} | " + " | ".join(cols) + " | "
              + " ".join(_f(ratios[k], 6, 2) for k in ("pe", "be", "pc", "bc"))
              + f" | {_f(g(mm), 7)} {_f(_ratio(g(best), g(mm)), 5, 2)}"
              + f" | {_f(mhz[0], 4, 0)}/{_f(mhz[1], 4, 0)} {_f(best.get('power_w'), 4, 0)}")
    reused = [c["name"] for c in result["chains"] if (c["compiled"] or {}).get("reused_from")]
    print("geomean speedup (graph): pick vs eager {:.2f}x, best vs eager {:.2f}x, pick vs compile {:.2f}x, "
          "best vs compile {:.2f}x; time over the bare cuBLAS product (graph): best/mm {:.2f}, pick/mm {:.2f}".format(
              *(geomean(sp[k]) for k in ("pe", "be", "pc", "bc", "bm", "pm"))))
    if reused:
        print(f"cmp = torch.compile times REUSED from an earlier run on the same device, shape and spec "
              f"(--compile-from {result.get('compile_from')}), not re-measured: {', '.join(reused)}")
    for c in result["chains"]:
        fails = [f"{r['label']}: {r.get('failure') or _errors(r)}" for r in c["variants"] if not r["correct"]]
        base_fail = [f"{k} {c[k].get('failure') or _errors(c[k])}" for k in ("eager", "compiled")
                     if c[k] and "correct" in c[k] and not c[k]["correct"]]
        cm = c["compiled"] or {}
        ctext = cm.get("skipped") or ("reused from " + cm["reused_from"] if cm.get("reused_from") else
                                      f"{cm['wall_s']:.0f} s" if "wall_s" in cm else "not run")
        print(f"  {c['name']}: pick {c['pick']['label']} {_cfg(c['pick'])}; best {(c['best'] or {}).get('label')} "
              f"{_cfg(c['best'])}; torch.compile {ctext}"
              + (f"; FAILED {fails}" if fails else "") + (f"; baselines off tol {base_fail}" if base_fail else ""))


def _errors(r) -> str:
    return f"rel {r['rel_error']:.2g}, max/rms {r['max_error_rms']:.2g} (tol {r['tolerance']:.2g})"


def _cfg(r) -> str:
    if not r:
        return "-"
    a = r["assignment"]
    whole = ", whole-tile epilogue" if a.get("EPI") == 0 else ""
    return f"({a['Tm']},{a['Tn']},{a['Tk']},{a['S']},{a['W']},{a['KS']},{a['G']},{a['L']}{whole})"


def _ratio(a, b):
    return a / b if a and b else None


def _f(x, width=8, digits=1):
    return f"{x:{width}.{digits}f}" if isinstance(x, (int, float)) and x is not None else f"{'-':>{width}s}"


if __name__ == "__main__":
    sys.exit(main())
