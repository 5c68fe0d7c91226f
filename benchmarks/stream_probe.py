"""Streaming elementwise kernels at the problem set's sizes: which walk moves the most bytes per second.

    PYTHONPATH=src python3 benchmarks/stream_probe.py --out DIR [--budget-s 240] [--dtypes fp32,bf16]

The single elementwise problems (relu, gelu, silu, ... on a 4096 × 393216 tensor: 6.4 GB in fp32) are
pure streams: read x once, write y once. PyTorch's eager kernel, torch's device copy and formloop's
flat walk are timed side by side in one process on the same buffers, with variants the flat walk does
not have yet: cache modifiers on the loads and stores, persistent programs (grid-stride or one
contiguous chunk each). (A bigger block is already more loads in flight per thread: Triton issues every
load of a block before its store.)

Correctness first, per variant: the output is poisoned with NaN, the kernel runs, and the result must
equal torch.relu bit for bit (relu is exact in every dtype). Timing: CUDA events around one launch,
median of REPS after two warm-ups (a launch streams ≥ 6 GB, far beyond the 60 MB L2; launch overhead
is < 0.1 % of it). Bandwidth counts bytes read plus bytes written. SM clock and power are recorded.
Writes DIR/stream_probe.json. Without CUDA (or --dry-run) every variant runs in the Triton interpreter
on a small tensor, correctness only (no times)."""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

SHAPE = (4096, 393216)  # level1 relu / gelu / silu / ... (KernelBench sizes)
SMALL = (8, 1000)
REPS = 7
MODS = {"none": ("", ""), "evict_first": ("evict_first", ""), "cg_cs": ("", ".cs")}


def kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def flat(x, y, L, BLOCK: tl.constexpr, EV: tl.constexpr, ST: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < L
        v = tl.load(x + offs, mask=m, eviction_policy=EV)
        tl.store(y + offs, tl.maximum(v, 0), mask=m, eviction_policy=EV, cache_modifier=ST)

    @triton.jit
    def persistent(x, y, L, n_blocks, per, BLOCK: tl.constexpr, CHUNK: tl.constexpr, ST: tl.constexpr):
        pid = tl.program_id(0)
        if CHUNK:  # program p walks blocks [p·per, (p+1)·per)
            first, stop, step = pid * per, tl.minimum((pid + 1) * per, n_blocks), 1
        else:  # grid-stride: program p walks blocks p, p + G, ...
            first, stop, step = pid, n_blocks, tl.num_programs(0)
        for b in range(first, stop, step):
            offs = b * BLOCK + tl.arange(0, BLOCK)  # int32: L < 2**31 (asserted by the launcher)
            m = offs < L
            v = tl.load(x + offs, mask=m)
            tl.store(y + offs, tl.maximum(v, 0), mask=m, cache_modifier=ST)

    return flat, persistent


def variants(n_sm: int):
    """(label, launcher builder) for every design probed."""
    flat, persistent = kernels()
    out = []
    for (block, warps), mod in itertools.product(((1024, 1), (1024, 4), (2048, 2), (2048, 4), (4096, 4), (4096, 8),
                                                   (8192, 8), (16384, 16)), MODS):
        ev, st = MODS[mod]
        out.append((f"flat B{block} W{warps} {mod}", lambda x, y, L, b=block, w=warps, ev=ev, st=st: flat[
            (-(-L // b),)](x, y, L, BLOCK=b, EV=ev, ST=st, num_warps=w)))
    for (block, warps), waves, chunk, st in itertools.product(((1024, 4), (2048, 4), (4096, 8), (8192, 8)), (4, 16),
                                                              (0, 1), ("", ".cs")):
        grid = n_sm * waves
        label = f"persistent {'chunk' if chunk else 'stride'} B{block} W{warps} G{waves}xSM{' cs' if st else ''}"

        def run(x, y, L, b=block, w=warps, g=grid, c=chunk, st=st):
            assert L < 2**31, L
            n_blocks = -(-L // b)
            persistent[(g,)](x, y, L, n_blocks, -(-n_blocks // g), BLOCK=b, CHUNK=c, ST=st, num_warps=w)
        out.append((label, run))
    return out


def time_ms(fn, reps: int) -> float:
    import torch

    fn(), fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def probe(dtype_name: str, gpu: bool, deadline: float) -> list[dict]:
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    dev = "cuda" if gpu else "cpu"
    shape = SHAPE if gpu else SMALL
    x = torch.randn(shape, device=dev, dtype=dtype)
    y = torch.empty_like(x)
    L, nbytes = x.numel(), 2 * x.numel() * x.element_size()
    want = torch.relu(x)
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count if gpu else 4
    rows = []

    def record(label, fn, check=True):
        if time.time() > deadline:
            rows.append({"design": label, "skipped": "budget"})
            return
        if check:
            y.fill_(float("nan"))
            fn()
            if not torch.equal(y, want):
                rows.append({"design": label, "correct": False})
                print(f"{dtype_name} {label}: WRONG", flush=True)
                return
        row = {"design": label, "correct": True}
        if gpu:
            ms = time_ms(fn, REPS)
            row.update(ms=ms, tbs=nbytes / ms / 1e9)
            print(f"{dtype_name} {label}: {ms:.3f} ms, {row['tbs']:.2f} TB/s", flush=True)
        rows.append(row)

    record("torch.relu (eager)", lambda: torch.relu(x), check=False)
    record("torch copy (y.copy_(x))", lambda: y.copy_(x), check=False)
    for label, run in variants(n_sm):
        record(label, lambda run=run: run(x, y, L))
    return rows


CANDIDATE = """import torch
from torch import nn
from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig

PROG = ElementwiseProgram("relu", EwConfig.from_assignment({design!r}), {dtype!r})


class ModelNew(nn.Module):
    def forward(self, x):
        return PROG(x)
"""
CAMPAIGN_DESIGN = {"BN": 16, "BM": 1, "W": 1, "F": 1, "BF": 1024, "H": 0}  # the campaign's relu pick, both dtypes


def timer_check(dtype_name: str, gpu: bool, out: Path) -> list[dict]:
    """The campaign's timing path on relu: formloop.measure.timer in graph mode over Model-style calls (a new
    output per call), the candidate and eager relu alternated twice; then formloop.measure.harness.evaluate on
    problems/level1/relu.py with a ModelNew around the same program (candidate timed first, as in a campaign)."""
    import torch

    from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig
    from formloop.measure.harness import evaluate
    from formloop.measure.timer import time_calls

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    shape = SHAPE if gpu else SMALL
    dev = "cuda" if gpu else "cpu"
    prog = ElementwiseProgram("relu", EwConfig.from_assignment(CAMPAIGN_DESIGN), dtype_name)
    sets = [[torch.randn(shape, device=dev, dtype=dtype)]]
    rows = []
    for rnd in range(2):
        for name, fn in (("timer: candidate (flat B1024 W1)", prog), ("timer: eager relu", torch.relu)):
            t = time_calls(fn, sets, device=dev, mode="graph" if gpu else "auto").timing
            rows.append({"design": f"{name} #{rnd}", "ms": t.seconds * 1e3, "mode": t.mode, "source": t.source})
    del sets
    path = out / f"relu_candidate_{dtype_name}.py"
    path.write_text(CANDIDATE.format(design=CAMPAIGN_DESIGN, dtype=dtype_name))
    root = Path(__file__).resolve().parents[1]
    small = None if gpu else {"ROWS": 16, "COLS": 4096}
    r = evaluate(root / "problems" / "level1" / "relu.py", path, sets=1, seed=0, tolerance="kernelbench",
                 precision=None if dtype_name == "fp32" else dtype_name, timing=True, overrides=small)
    ms = {k: t and t.seconds * 1e3 for k, t in (("cand_ms", r.cand_time), ("ref_ms", r.ref_time))}
    rows.append({"design": "harness.evaluate", "correct": r.correct, **ms, "mode": r.cand_time and r.cand_time.mode,
                 "rounds": [t and t.note for t in (r.cand_time, r.ref_time)]})
    for row in rows:
        print(dtype_name, row, flush=True)
    return rows


def captured(body):
    """(a CUDA graph of body(), the output captured): one warm-up call on a side stream, as capture requires."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = body()
    return g, out


OFFSETS_KB = (0, 4, 64, 512, 1024, 2048, 3072, 4096, 6144, 8192, 16384, 32768)


def placement_check(dtype_name: str, gpu: bool) -> list[dict]:
    """Does a stream's speed depend on where its output lies? x fixed, y a view into one larger buffer at
    OFFSETS_KB from its start; eager clamp_min(x, 0, out=y) and formloop's flat walk (B1024 W1) timed by raw
    events; then one CUDA graph of torch.relu(x) (output in the graph's pool) and one of clamp_min into the
    offset-0 view, replayed and timed the same way."""
    import torch

    flat, _ = kernels()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    shape = SHAPE if gpu else SMALL
    dev = "cuda" if gpu else "cpu"
    x = torch.randn(shape, device=dev, dtype=dtype)
    L = x.numel()
    per_kb = 1024 // x.element_size()
    big = torch.empty(L + OFFSETS_KB[-1] * per_kb, device=dev, dtype=dtype)
    want = torch.relu(x)
    rows = []
    for kb in OFFSETS_KB if gpu else OFFSETS_KB[:3]:
        y = big[kb * per_kb: kb * per_kb + L].view(shape)
        for name, fn in (("eager clamp_min", lambda: torch.clamp_min(x, 0, out=y)),
                         ("flat B1024 W1", lambda: flat[(-(-L // 1024),)](x, y, L, BLOCK=1024, EV="", ST="",
                                                                          num_warps=1))):
            y.fill_(float("nan"))
            fn()
            row = {"design": f"{name} y at +{kb} KB", "correct": bool(torch.equal(y, want))}
            if gpu:
                row["ms"] = time_ms(fn, REPS)
            rows.append(row)
    if gpu:
        y0 = big[:L].view(shape)
        for name, body in (("graph: torch.relu(x), output in the graph pool", lambda: torch.relu(x)),
                           ("graph: clamp_min into y at +0 KB", lambda: torch.clamp_min(x, 0, out=y0))):
            g, _ = captured(body)
            rows.append({"design": name, "ms": time_ms(g.replay, REPS)})
            del g
    for row in rows:
        print(dtype_name, "placement", row, flush=True)
    return rows


def graphs_check(dtype_name: str, gpu: bool, n_graphs: int) -> list[dict]:
    """The same call captured in `n_graphs` CUDA graphs kept alive together, each output allocated in its own
    graph's pool (fresh memory, as the timer's capture of a Model gets): is a slow replay a property of the
    output's memory? Eager torch.relu and formloop's flat walk (B1024 W1, output by torch.empty_like)."""
    import torch

    flat, _ = kernels()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    x = torch.randn(SHAPE if gpu else SMALL, device="cuda" if gpu else "cpu", dtype=dtype)
    L = x.numel()

    def ours():
        y = torch.empty_like(x)
        flat[(-(-L // 1024),)](x, y, L, BLOCK=1024, EV="", ST="", num_warps=1)
        return y
    rows = []
    if not gpu:
        return [{"design": "graphs", "skipped": "no GPU"}]
    for name, body in (("torch.relu", lambda: torch.relu(x)), ("flat B1024 W1", ours)):
        graphs = []
        for k in range(n_graphs):
            g, out = captured(body)
            g.replay()
            rows.append({"design": f"graph {k}: {name}", "ms": time_ms(g.replay, REPS),
                         "out_ptr_mb": out.data_ptr() // 2**20, "correct": bool(torch.equal(out, torch.relu(x)))})
            print(dtype_name, "graphs", rows[-1], flush=True)
            graphs.append((g, out))
        del graphs
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return rows


def inputs_check(dtype_name: str, gpu: bool) -> list[dict]:
    """The harness's inputs: a set drawn in fp32 and cast (`original`, what the reference is timed on) and its
    clone (what the candidate is timed on, in memory the cast's fp32 temporary left free), beside a tensor drawn
    directly in the dtype. Eager relu and the campaign's program timed by formloop.measure.timer on each
    (graph and eager modes): does the input's memory decide a stream's speed?"""
    import torch

    from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig
    from formloop.measure.timer import time_calls

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    dev = "cuda" if gpu else "cpu"
    shape = SHAPE if gpu else SMALL
    prog = ElementwiseProgram("relu", EwConfig.from_assignment(CAMPAIGN_DESIGN), dtype_name)
    x32 = torch.randn(shape, device=dev)
    original = x32.to(dtype) if dtype != torch.float32 else x32
    del x32
    kinds = {"original": original, "clone": original.clone(), "fresh": torch.randn(shape, device=dev, dtype=dtype)}
    rows = []
    for mode in ("graph", "eager") if gpu else ("auto",):
        for kind, x in kinds.items():
            for name, fn in (("eager relu", torch.relu), ("flat B1024 W1", prog)):
                t = time_calls(fn, [[x]], device=dev, mode=mode).timing
                rows.append({"design": f"{mode}: {name} on the {kind} input", "ms": t.seconds * 1e3})
                print(dtype_name, "inputs", rows[-1], flush=True)
                if gpu:
                    torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dry-run", action="store_true", help="interpreter, small tensor, correctness only")
    ap.add_argument("--budget-s", type=float, default=240.0, help="no new variant after this many seconds")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--checks-only", action="store_true", help="skip the design probe and the timer check")
    ap.add_argument("--placement", action="store_true", help="also: the output-placement check")
    ap.add_argument("--timer", action="store_true", help="with --checks-only: the campaign's timing path on relu")
    ap.add_argument("--graphs", type=int, default=0, help="also: the call in this many live CUDA graphs")
    ap.add_argument("--inputs", action="store_true", help="also: the harness's original, cloned and fresh inputs")
    args = ap.parse_args(argv)
    import torch
    gpu = torch.cuda.is_available() and not args.dry_run
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    from formloop.measure.device import PowerSampler, read_clocks

    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + args.budget_s
    result = {"tier": "gpu" if gpu else "interpreter (correctness only)", "shape": list(SHAPE if gpu else SMALL),
              "device": torch.cuda.get_device_name() if gpu else "cpu", "dtypes": {}}
    with PowerSampler() as power:
        result["clock_before"] = read_clocks() if gpu else {}
        for name in args.dtypes.split(","):
            if not args.checks_only:
                result["dtypes"][name] = probe(name, gpu, deadline)
                result.setdefault("timer_check", {})[name] = timer_check(name, gpu, args.out)
            if args.timer:
                result.setdefault("timer_check", {})[name] = timer_check(name, gpu, args.out)
            if args.placement:
                result.setdefault("placement", {})[name] = placement_check(name, gpu)
            if args.inputs:
                result.setdefault("inputs", {})[name] = inputs_check(name, gpu)
            if args.graphs:
                result.setdefault("graphs", {})[name] = graphs_check(name, gpu, args.graphs)
        result["clock_after"] = read_clocks() if gpu else {}
    result["mean_power_w"] = power.mean_w
    (args.out / "stream_probe.json").write_text(json.dumps(result, indent=1))
    for name, rows in result["dtypes"].items():
        if not rows:
            continue
        timed = sorted((r for r in rows if "tbs" in r), key=lambda r: -r["tbs"])
        eager = next((r["ms"] for r in rows if r["design"].startswith("torch.relu") and "ms" in r), None)
        print(f"\n{name}: best designs (TB/s, read + write; × = eager relu ms / design ms, gpu)")
        for r in timed[:12]:
            print(f"  {r['design']:<48} {r['tbs']:.2f} TB/s  {eager / r['ms']:.3f}×")
    parts = ("dtypes", "placement", "graphs", "inputs")
    bad = [r["design"] for part in parts for rows in result.get(part, {}).values() for r in rows
           if r.get("correct") is False]
    print("wrong:", bad or "none", "| clocks", result["clock_before"], "->", result["clock_after"],
          "| power", result["mean_power_w"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
