"""The kernel spec language as user actions: check a spec, emit its Triton source, run it.

A spec is given as text (`spec`, what an agent writes) or as a file (`path`), exactly one; `shape`
overrides the spec's problem size (gemm MxNxK, batched_gemm BxMxNxK, conv2d NxHxWxCxK). A refused
spec is an answer: `ok` false with every broken rule in `diagnostics` (line, column, field, value,
allowed) and `lines`; bad arguments raise formloop errors as every api function does. Open fields
(`?`) are solved by gemm-epilogue-gpu's MILP (`solver`: milp or enumerate) and the instance is
checked against the proved template before anything runs (formloop.dsl.service)."""
from __future__ import annotations

from collections.abc import Mapping

from formloop.api.values import plain
from formloop.dsl import service
from formloop.errors import InvalidInput

Calibration = str | Mapping[str, float] | None


def dsl_check(spec: str | None = None, *, path: str | None = None, shape: str | None = None,
              calibration: Calibration = None, solver: str = "milp") -> dict:
    """Validate a spec (every rule, before any compile); with a shape, solve its open fields (model
    times in us) and check the instance against the proved template."""
    return plain(service.check_spec(text=spec, path=path, shape=shape, calibration=calibration, solver=solver))


def dsl_emit(spec: str | None = None, *, path: str | None = None, shape: str | None = None,
             calibration: Calibration = None, solver: str = "milp") -> dict:
    """The Triton source of the spec's main kernel (`source`), with the design in its header."""
    return plain(service.emit_spec(text=spec, path=path, shape=shape, calibration=calibration, solver=solver))


def dsl_run(spec: str | None = None, *, path: str | None = None, shape: str | None = None,
            calibration: Calibration = None, solver: str = "milp", timing: bool = True, seed: int = 0) -> dict:
    """Check, solve, instance-check, then run: correctness against the float64 torch reference the
    spec implies and, on a GPU, timing (us, gpu: CUDA graph and eager) with the SOL fraction; without
    a GPU the Triton interpreter at a reduced shape, labelled `tier: interpreter`. `ok` is whether
    the kernel was correct."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidInput("seed", seed, "a whole number >= 0")
    return plain(service.run_spec(text=spec, path=path, shape=shape, calibration=calibration, timing=timing,
                                  seed=seed, solver=solver))
