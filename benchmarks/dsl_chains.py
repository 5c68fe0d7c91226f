"""Fused GEMM chains written as kernel specs (formloop.dsl) vs the same chains in torch: eager
(one kernel per operation) and torch.compile(mode="max-autotune-no-cudagraphs"), bf16, LLM sizes.

    PYTHONPATH=src python3 benchmarks/dsl_chains.py --out $OUT        # on the GPU machine, one call
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/dsl_chains.py --out /tmp/d   # CPU: tiny, no timing

Each chain is a spec whose tile fields are all open. Per chain it sweeps: the MILP pick with the
template's priors, the MILP pick with the round-2 H200 calibration (benchmarks/RESULTS.md), that
model's top designs, and common strong configurations; each is an instance the template admits.
Every instance and both baselines first pass the correctness check on fresh inputs (NaN-poisoned
output, float64 reference); then CUDA-graph replays (formloop.evaluate.gpu.time_runnable) and
eager launches are timed in this one process. Reports the calibrated pick and the best, SOL
fractions (datasheet peaks), speedups and their geomeans; writes dsl_chains.json under --out."""
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
STRONG = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 4, 4),
          (128, 128, 128, 3, 8), (64, 256, 64, 4, 8), (128, 256, 64, 4, 8), (64, 128, 64, 4, 4),
          (16, 128, 128, 4, 4), (32, 128, 128, 4, 4), (64, 128, 128, 4, 8), (64, 256, 128, 3, 8)]


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


def sweep(v, gpu: bool, top: int) -> list[tuple[str, dict]]:
    """(label, assignment): the calibration's and the priors' MILP picks (first: "pick"), the
    calibrated model's top designs, and the strong configurations the template admits here.
    Without a GPU (the dry run) the picks come from enumeration, the same optimum in milliseconds."""
    import numpy as np

    from formloop.dsl.bridge import design
    from formloop.dsl.validate import template_for, workload_of
    from formloop.hw.chips import get_chip
    from formloop.solve.enumerate import assignment_at, feasible_mask, term_grid

    solver = "milp" if gpu else "enumerate"
    out = [("pick", dict(design(v, calibration=ROUND2_BF16, calibration_id="round2", prove=False,
                                solver=solver).assignment)),
           ("pick-priors", dict(design(v, prove=False, solver="enumerate").assignment))]
    if not gpu:
        return _unique(out)
    t = template_for(v.spec, ROUND2_BF16, "round2")
    wl, chip = workload_of(v.spec), get_chip("h200")
    f = t.formulate(wl, chip)
    flat = np.flatnonzero(feasible_mask(f))
    cost = term_grid(f, f.cost).ravel()[flat]
    out += [(f"model-top{i + 1}", assignment_at(f, int(j))) for i, j in enumerate(flat[np.argsort(cost)[:top]])]
    for tm, tn, tk, s, w in STRONG:
        for ks in (1, 2, 4) if tm <= 32 else (1,):
            for load in (1, 0):
                a = {"Tm": tm, "Tn": tn, "Tk": tk, "S": s, "W": w, "KS": ks, "G": 8, "L": load}
                if not t.check(a, wl, chip):
                    out.append((f"strong-{tm}x{tn}x{tk}s{s}w{w}k{ks}{'tma' if load else 'ptr'}", a))
    return _unique(out)


def _unique(variants):
    """One entry per design; a design reached twice keeps both labels ("pick+pick-priors")."""
    by_key: dict[tuple, list] = {}
    for label, a in variants:
        key = tuple(int(a[k]) for k in ("Tm", "Tn", "Tk", "S", "W", "KS", "G", "L"))
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
        prog = SpecProgram(spec, plan_of(spec, assignment, small))
        prog.launch(prog.new_case("cuda", torch.Generator(device="cuda").manual_seed(0)))
        torch.cuda.synchronize()
        return ""
    except Exception as exc:  # noqa: BLE001 - recorded; the measurement will record the failure too
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def precompile(jobs, workers: int) -> dict:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    start = time.time()
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        errors = [e for e in pool.map(_compile_job, jobs) if e]
    return {"kernels": len(jobs), "seconds": time.time() - start, "errors": errors[:10]}


def measure(runnable, gpu: bool, gen, device: str) -> dict:
    from formloop.dsl.run import time_eager
    from formloop.evaluate.gpu import TimingPolicy, check, device_facts, time_runnable

    try:
        c = check(runnable, device, gen)
        row = {"correct": c.passed, "rel_error": c.rel_error, "max_error_rms": c.max_error_rms,
               "tolerance": c.tolerance}
        if c.passed and gpu:
            g = time_runnable(runnable, device, gen, TimingPolicy(), device_facts()["l2_bytes"])
            row.update(graph_us=g["median_us"], graph_p20_us=g["p20_us"], graph_p80_us=g["p80_us"],
                       eager_us=time_eager(runnable, device, gen)["median_us"])
        return row
    except Exception as exc:  # noqa: BLE001 - a compile or launch failure is a result, with its class
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        return {"correct": False, "failure": f"{type(exc).__name__}: {first}"}


def geomean(xs):
    xs = [x for x in xs if x and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--top", type=int, default=8, help="calibrated model's top designs measured per chain")
    p.add_argument("--budget-s", type=float, default=450.0, help="stop starting new chains after this many seconds")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (its autotuning takes minutes)")
    p.add_argument("--chains", default="", help="comma-separated chain names (default: all)")
    args = p.parse_args(argv)
    import torch

    from formloop.dsl.lower import read_spec
    from formloop.dsl.program import SpecProgram, plan_of
    from formloop.dsl.run import sol_floor
    from formloop.dsl.validate import validate

    gpu = torch.cuda.is_available()
    if not gpu and os.environ.get("TRITON_INTERPRET") != "1":
        print("no CUDA device: run with TRITON_INTERPRET=1 for the CPU correctness pass", file=sys.stderr)
        return 2
    device, start = ("cuda" if gpu else "cpu"), time.time()
    gen = torch.Generator(device=device).manual_seed(0)
    chains = [c for c in _chains() if not args.chains or c[0] in args.chains.split(",")]
    plans = []
    for name, op, lb, c, dims, epi, fn in chains:
        text = spec_text(name, op, lb, c, dims if gpu else tiny(dims, op, epi), epi)
        v = validate(read_spec(text, name))
        plans.append((name, text, v, sweep(v, gpu, args.top), fn))
    result = {"device": torch.cuda.get_device_name() if gpu else "cpu (interpreter)", "chains": [],
              "versions": {"torch": torch.__version__}, "command": " ".join(sys.argv)}
    if gpu:
        result["precompile"] = precompile([(t, a) for _, t, _, vs, _ in plans for _, a in vs], args.workers)
    for name, text, v, variants, fn in plans:
        if time.time() - start > args.budget_s:
            result["chains"].append({"name": name, "skipped": "time budget"})
            continue
        rows = []
        for label, a in variants:
            prog = SpecProgram(v.spec, plan_of(v.spec, a))
            rows.append({"label": label, "assignment": a, **measure(prog, gpu, gen, device)})
        base = SpecProgram(v.spec, plan_of(v.spec, variants[0][1]))
        eager = measure(TorchChain(base, fn, "torch eager"), gpu, gen, device)
        compiled = None
        if gpu and not args.no_compile:
            t0 = time.time()
            cfn = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)
            compiled = {**measure(TorchChain(base, cfn, "torch.compile"), gpu, gen, device),
                        "wall_s": time.time() - t0}  # compile and autotune, check, timing
        sol = sol_floor(v.spec, v.spec.kernel.shape, base.case_bytes)
        timed = [r for r in rows if r.get("graph_us")]
        best = min(timed, key=lambda r: r["graph_us"]) if timed else None
        shape = v.spec.kernel.shape
        result["chains"].append({"name": name, "spec": text, "shape": {"M": shape.M, "N": shape.N, "K": shape.K,
                                                                       "batch": shape.batch},
                                 "variants": rows, "eager": eager, "compiled": compiled, "sol": sol,
                                 "pick": rows[0], "best": best})
        print(f"[{time.time() - start:6.1f} s] {name}: {len(rows)} variants, "
              f"{sum(r['correct'] for r in rows)} correct", flush=True)
        _write(args.out, result)  # after every chain: a run cut short keeps what it measured
    _write(args.out, result)
    print_table(result, gpu)
    ok = all(r["correct"] for c in result["chains"] if "variants" in c for r in c["variants"] if "failure" not in r)
    return 0 if ok else 1


def _write(out: str, result: dict) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "dsl_chains.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)


def print_table(result: dict, gpu: bool) -> None:
    print(f"\ndevice {result['device']}; times us (median, gpu CUDA events): graph = CUDA-graph replay, eager = "
          f"launches from Python; SOL floor from datasheet peaks (sol); speedup = baseline / ours (graph)")
    head = (f"{'chain':22s} {'checked':>8s} {'SOL':>8s} {'pick':>8s} {'best':>8s} {'eager':>8s} {'compile':>8s} "
            f"{'pk/eag':>7s} {'bs/eag':>7s} {'pk/cmp':>7s} {'bs/cmp':>7s} {'SOLpk':>6s} {'SOLbs':>6s} "
            f"{'pk-eager':>9s} {'eag-eager':>9s} {'cmp-eager':>9s}")
    print(head)
    sp = {k: [] for k in ("pe", "be", "pc", "bc")}
    for c in result["chains"]:
        if "variants" not in c:
            print(f"{c['name']:22s} skipped: {c['skipped']}")
            continue
        n_ok = sum(r["correct"] for r in c["variants"])
        pick, best, e, cm = c["pick"], c["best"], c["eager"], c["compiled"] or {}
        if not gpu:
            print(f"{c['name']:22s} {n_ok:>3d}/{len(c['variants']):<4d} eager correct: {e['correct']} (interpreter, "
                  f"tiny shape, not timed)")
            continue
        g = lambda r: r.get("graph_us") if r else None  # noqa: E731
        ratios = {"pe": _ratio(g(e), g(pick)), "be": _ratio(g(e), g(best)), "pc": _ratio(g(cm), g(pick)),
                  "bc": _ratio(g(cm), g(best))}
        for k, x in ratios.items():
            sp[k].append(x)
        print(f"{c['name']:22s} {n_ok:>3d}/{len(c['variants']):<4d} {c['sol']['floor_us']:8.1f} {_f(g(pick))} "
              f"{_f(g(best))} {_f(g(e))} {_f(g(cm))} {_f(ratios['pe'], 7, 2)} {_f(ratios['be'], 7, 2)} "
              f"{_f(ratios['pc'], 7, 2)} {_f(ratios['bc'], 7, 2)} {_f(_ratio(c['sol']['floor_us'], g(pick)), 6, 3)} "
              f"{_f(_ratio(c['sol']['floor_us'], g(best)), 6, 3)} {_f(pick.get('eager_us'), 9)} "
              f"{_f(e.get('eager_us'), 9)} {_f(cm.get('eager_us'), 9)}")
    if gpu:
        print("geomean speedup: pick vs eager {:.2f}x, best vs eager {:.2f}x, pick vs compile {:.2f}x, best vs compile "
              "{:.2f}x".format(*(geomean(sp[k]) for k in ("pe", "be", "pc", "bc"))))
        for c in result["chains"]:
            if c.get("best"):
                print(f"  {c['name']}: pick {c['pick']['label']} {c['pick']['assignment']}; best {c['best']['label']} "
                      f"{c['best']['assignment']}")


def _ratio(a, b):
    return a / b if a and b else None


def _f(x, width=8, digits=1):
    return f"{x:{width}.{digits}f}" if isinstance(x, (int, float)) and x is not None else f"{'-':>{width}s}"


if __name__ == "__main__":
    sys.exit(main())
