"""What a sandboxed child sets up before the untrusted code runs, and what it reports beyond its stages
(formloop.measure.sandbox's `_child` calls these; `send` is its channel to the parent)."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def inductor_threads(env: dict) -> None:
    """Inductor decided its compile threads when the forkserver imported it (GPU_PRELOAD), from the forkserver's
    environment: the child's TORCHINDUCTOR_COMPILE_THREADS, where set, applies here too."""
    config = sys.modules.get("torch._inductor.config")
    value = env.get("TORCHINDUCTOR_COMPILE_THREADS", "")
    if config is not None and value.isdigit() and int(value) >= 1:
        config.compile_threads = int(value)


def no_progress_monitor() -> None:
    """tqdm (Inductor's progress bars) starts a monitor thread that notices only every 10 s that its bars are
    gone: the harness's wait for threads a candidate left running would wait those 10 s in every torch.compile
    baseline (RESULTS.md, round 10). Bars without the monitor behave the same."""
    try:
        import tqdm
    except ImportError:
        return
    tqdm.tqdm.monitor_interval = 0


def count_compiles(send: Callable[[tuple[str, Any]], None]) -> None:
    """Where the preload imported Triton (a GPU): tell the parent the seconds of every kernel compiled
    here (a Triton cache miss), so a child's time shows what compiling took."""
    knobs = getattr(sys.modules.get("triton"), "knobs", None)
    if knobs is None or not hasattr(knobs, "compilation"):
        return
    before = knobs.compilation.listener

    def listener(**kw: Any) -> None:
        if before is not None:
            before(**kw)
        if not kw.get("cache_hit", True):
            send(("compiled", kw["times"].total / 1e6))

    knobs.compilation.listener = listener


def send_cache_counts(send: Callable[[tuple[str, Any]], None]) -> None:
    """Inductor's FX graph and AOTAutograd cache hits and misses in this child (torch.compile ran here)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return
    counts = {k: v for k, v in utils.counters["inductor"].items() if "cache_hit" in k or "cache_miss" in k}
    for name, n in counts.items():
        send(("count", (name, n)))
