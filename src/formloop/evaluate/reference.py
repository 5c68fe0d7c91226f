"""Reference times of kernel problems: eager PyTorch and torch.compile on the GPU, beside their SOL.

The model and its inputs are created directly on the device (`torch.device("cuda")` around the
problem's own constructors: no host tensors, no host-to-device copies) and nothing is copied back
to the host; times are medians of CUDA-event-timed eager calls by the one timer
(`formloop.measure.timer`). The model runs as KernelBench runs it (no `.eval()`). Without CUDA
nothing is timed and every row says so."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from formloop.sol.problem import Problem, call_inputs
from formloop.sol.problemset import load_problem_set, sol_row

NO_CUDA = "not measured: no CUDA device"   # every unmeasured time carries a "not measured: ..." note
OVER_BUDGET = "not measured: time budget spent"


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _on_device(model, inputs) -> str:
    """'' when every tensor is on the GPU, else which one was made elsewhere."""
    import torch

    for what, tensors in (("input", [t for t in inputs if isinstance(t, torch.Tensor)]),
                          ("parameter or buffer", [*model.parameters(), *model.buffers()])):
        for t in tensors:
            if not t.is_cuda:
                return f"not measured: a {what} of shape {tuple(t.shape)} was made on {t.device}"
    return ""


def time_reference(problem: Problem, *, compiled: bool = False,
                   seed: int = 0) -> tuple[float | None, str, float | None]:
    """(median seconds per call by CUDA events, '' or why not measured, host seconds of the first
    compiled call) of the problem's reference, eager or through torch.compile, on the CUDA device."""
    import torch

    from formloop.measure.timer import time_calls

    if not torch.cuda.is_available():
        return None, NO_CUDA, None
    model = inputs = fn = None
    try:
        torch.manual_seed(seed)
        with torch.device("cuda"):
            model = problem.build()
            inputs = call_inputs(problem, "get_inputs")
        note = _on_device(model, inputs)
        if note:
            return None, note, None
        fn, first = model, None
        if compiled:
            fn = torch.compile(model)
            start = time.perf_counter()
            with torch.no_grad():
                fn(*inputs)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
        with torch.no_grad():  # eager calls timed by CUDA events, as KernelBench times them
            run = time_calls(fn, [inputs], device="cuda", mode="eager")
        return run.timing.seconds, "", first
    except torch.cuda.OutOfMemoryError:
        return None, "not measured: out of device memory", None
    except Exception as exc:  # noqa: BLE001 - a reference or compiler failure is reported in its row
        what = "compile failed" if compiled else "reference failed"
        return None, f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}", None
    finally:
        del model, inputs, fn
        torch._dynamo.reset()
        torch.cuda.empty_cache()


UNITS = {"flops": "FLOP", "bytes": "byte", "floor_s": "s (sol)", "eager_s": "s (gpu, CUDA events)",
         "compiled_s": "s (gpu, CUDA events)", "compile_wall_s": "s (host wall time)", "sol_seconds": "s (host)",
         "eager_over_floor": "x (measured / sol)", "compiled_over_floor": "x (measured / sol)"}


def problem_rows(root: str | Path, chip: str, *, measure: bool = True, compile_too: bool = True,
                 small: bool = False, levels: tuple[int, ...] = (), budget_s: float | None = None,
                 on_row: Callable[[dict, int, int], None] | None = None, **sol_kwargs) -> list[dict]:
    """One row per problem under `root`: its automatic SOL (meta tensors, host seconds it took) and,
    when `measure` and CUDA are there, its eager and compiled reference times and their ratio to the
    floor. Two passes: SOL and eager time of every problem, then torch.compile of each while
    `budget_s` (timing seconds, SOL excluded) lasts. `on_row(row, step, steps)` follows progress."""
    import torch

    problems = load_problem_set(root, small=small, levels=levels)
    cuda = measure and torch.cuda.is_available()
    steps = len(problems) * (2 if cuda and compile_too else 1)
    why = NO_CUDA if measure else "not measured: not requested"
    spent, rows = 0.0, []
    for i, problem in enumerate(problems):
        row = sol_row(problem, root, chip, **sol_kwargs).as_dict()
        row.update(eager_s=None, eager_note=why, compiled_s=None, compiled_note=why, compile_wall_s=None,
                   device=_device_name())
        if cuda:
            start = time.perf_counter()
            row["eager_s"], row["eager_note"], _ = time_reference(problem)
            spent += time.perf_counter() - start
            if not compile_too:
                row["compiled_note"] = "not measured: compile not requested"
        rows.append(row)
        if on_row is not None:
            on_row(row, i + 1, steps)
    for i, (problem, row) in enumerate(zip(problems, rows) if cuda and compile_too else ()):
        if budget_s is not None and spent > budget_s:
            row["compiled_note"] = OVER_BUDGET
        else:
            start = time.perf_counter()
            row["compiled_s"], row["compiled_note"], row["compile_wall_s"] = time_reference(problem, compiled=True)
            spent += time.perf_counter() - start
        if on_row is not None:
            on_row(row, len(problems) + i + 1, steps)
    for row in rows:
        floor = row.get("floor_s")
        for key in ("eager", "compiled"):
            t = row[f"{key}_s"]
            row[f"{key}_over_floor"] = t / floor if t is not None and floor else None
    return rows
