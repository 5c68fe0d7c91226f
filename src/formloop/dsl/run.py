"""Running a spec: correctness against the float64 reference the spec implies, then timing on a
GPU (CUDA-graph replays through formloop.evaluate.gpu, and eager launches), with the SOL floor;
without a GPU the Triton interpreter checks it at a reduced shape, labelled as such.

Imports torch lazily; `use_interpreter` must run before triton is first imported."""
from __future__ import annotations

import math
import os
import sys
from typing import Any

from formloop.dsl.bridge import Design
from formloop.dsl.ir import SpecIR
from formloop.errors import InvalidInput
from formloop.hw.chips import get_chip
from formloop.library.gemm_epilogue_emit import Conv2d, Shape
from formloop.library.gemm_epilogue_ops import chain_facts
from formloop.sol.ops import Counts
from formloop.sol.report import build_report


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def use_interpreter() -> None:
    """Switch Triton to its interpreter (no CUDA device); refuse if it is too late to switch."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    if "triton" in sys.modules:
        raise InvalidInput("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET"),
                           "1, set before triton is imported (there is no CUDA device to compile for)")
    os.environ["TRITON_INTERPRET"] = "1"


def reduced_shape(spec: SpecIR, assignment) -> Shape:
    """A small shape that keeps the instance's structure: a ragged edge tile on M and N, every
    split with k-tiles of its own, the row whole for row reductions, glu's pairs, alignment."""
    s, a = spec.kernel.shape, assignment
    facts = chain_facts(spec.kernel.chain)
    k = min(s.K, 2 * a["KS"] * a["Tk"])
    if s.conv is not None:
        g = s.conv
        small = Conv2d(1, min(g.h, 6), min(g.w, 6), g.c, g.k if facts.row else min(g.k, a["Tn"] + 16), g.r, g.s,
                       g.stride, g.pad, g.dilation)
        return Shape.of_conv(small) if small.p >= 1 and small.q >= 1 else s
    n = s.N if facts.row else min(s.N, a["Tn"] + 16)
    return Shape(min(s.M, a["Tm"] + 16), n, k, batch=min(s.batch, 2))


def sol_floor(spec: SpecIR, shape: Shape, case_bytes: int) -> dict[str, Any]:
    """Speed-of-light floor of the spec's work on its chip (datasheet peaks, formloop.sol)."""
    k = spec.kernel
    mm = 2 * shape.batch * shape.M * shape.N * shape.K
    vec = int(shape.batch * shape.M * shape.N * chain_facts(k.chain).ops)
    dtype = "fp32" if k.a.dtype in ("tf32", "tf32x3") else k.a.dtype
    r = build_report("dsl-" + k.op, {"M": shape.M, "N": shape.N, "K": shape.K, "batch": shape.batch}, dtype,
                     get_chip(k.chip), Counts(mm, vec, case_bytes),
                     compute_precision=k.a.dtype if k.a.dtype in ("tf32", "tf32x3") else None)
    return {"floor_us": r.time_floor_s * 1e6, "bound": r.bound, "flops": r.flops, "bytes": r.bytes,
            "source": f"sol ({r.chip} datasheet peaks, {r.compute_precision})"}


def time_eager(runnable, device: str, generator, *, sets: int = 4, reps: int = 20) -> dict[str, Any]:
    """Median µs of one eager launch (no graph: Python and launch overheads included), each rep a
    pass over `sets` operand sets bracketed by CUDA events."""
    import torch

    cases = [runnable.new_case(device, generator) for _ in range(sets)]
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
        per.append(start.elapsed_time(end) * 1e3 / sets)
    per.sort()
    return {"median_us": per[len(per) // 2], "reps": reps, "operand_sets": sets,
            "timing": f"eager launches, {reps} passes over {sets} operand sets, event-timed median"}


def run_program(spec: SpecIR, design: Design, *, timing: bool = True, seed: int = 0) -> dict[str, Any]:
    """Correctness, then (on a GPU) timing of the spec's program at its shape."""
    import torch

    from formloop.dsl.program import SpecProgram, plan_of
    from formloop.evaluate.gpu import check

    gpu = cuda_available()
    shape, label = spec.kernel.shape, "gpu"
    if not gpu:
        shape = reduced_shape(spec, design.assignment)
        label = "interpreter"
    program = SpecProgram(spec, plan_of(spec, design.assignment, shape))
    device = "cuda" if gpu else "cpu"
    gen = torch.Generator(device=device).manual_seed(seed)
    checks = [check(program, device, gen) for _ in range(2)]
    worst = max(checks, key=lambda c: (not c.passed, c.rel_error if math.isfinite(c.rel_error) else math.inf))
    out: dict[str, Any] = {
        "tier": label, "shape": _shape_dict(shape), "requested_shape": _shape_dict(spec.kernel.shape),
        "correct": all(c.passed for c in checks),
        "correctness": {"rel_error": worst.rel_error, "max_error_rms": worst.max_error_rms,
                        "tolerance": worst.tolerance, "all_written": worst.all_written, "checks": len(checks),
                        "reference": "float64 torch on the same inputs"},
    }
    if not gpu:
        out["timing"] = None
        out["note"] = ("no CUDA device: checked in the Triton interpreter at a reduced shape; no time is reported "
                       "(the interpreter's wall time says nothing about the kernel)")
        return out
    if timing and out["correct"]:
        from formloop.evaluate.gpu import TimingPolicy, device_facts, time_runnable

        graph = time_runnable(program, device, gen, TimingPolicy(), device_facts()["l2_bytes"])
        eager = time_eager(program, device, gen)
        sol = sol_floor(spec, shape, program.case_bytes)
        out["timing"] = {"graph_us": graph["median_us"], "graph_p20_us": graph["p20_us"],
                         "graph_p80_us": graph["p80_us"], "eager_us": eager["median_us"],
                         "graph": graph["timing"], "eager": eager["timing"], "source": "gpu (CUDA events)"}
        out["sol"] = {**sol, "fraction": sol["floor_us"] / graph["median_us"]}
    return out


def _shape_dict(s: Shape | None) -> dict | None:
    if s is None:
        return None
    d = {"M": s.M, "N": s.N, "K": s.K, "batch": s.batch}
    if s.conv is not None:
        d["conv"] = {f: getattr(s.conv, f) for f in ("n", "h", "w", "c", "k", "r", "s", "stride", "pad", "dilation")}
    return d

