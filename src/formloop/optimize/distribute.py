"""Where a campaign's work runs: a local process pool (the default) or Ray (`--ray ADDRESS|auto|local`).

Two kinds of work: CPU steps (bootstrap: tracing, SOL floor, recognition; build: the MILP, the
kernels' source, the ModelNew file) and measurements (harness + integrity, each in its own
sandboxed child). With the process pool, CPU steps run in the pool and measurements one at a time
in the driver, so timings never share the device. With Ray, CPU steps are Ray tasks of one CPU and
measurements Ray tasks of one GPU each (`num_gpus=1` on the gpu tier: Ray runs at most one per GPU;
on the interpreter tier they take one CPU). Tasks return plain data; only the driver writes the
store. `ray` is imported only when asked for (the optional extra `ray`)."""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

from formloop.errors import InvalidInput


class _Deferred:
    """A measurement the process-pool engine runs in the driver when its result is asked for."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict):
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def result(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


class _Done:
    def __init__(self, value: Any):
        self.value = value

    def result(self) -> Any:
        return self.value


class ProcessEngine:
    """CPU steps in a spawn process pool of `workers` (in the driver when workers <= 1)."""

    name = "process-pool"
    lazy = True    # measurements run in the driver, one at a time, when their results are asked for

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = None
        if workers > 1:
            import multiprocessing as mp
            self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "workers": self.workers,
                "measurements": "one at a time in the driver (each in a sandboxed child)"}

    def submit(self, fn: Callable, *args: Any, **kwargs: Any):
        if self.pool is None:
            return _Done(fn(*args, **kwargs))
        return self.pool.submit(fn, *args, **kwargs)

    def submit_measure(self, fn: Callable, *args: Any, **kwargs: Any):
        return _Deferred(fn, args, kwargs)

    def submit_warm(self, fn: Callable, *args: Any, **kwargs: Any):
        """A torch.compile warm-up (CPU work in a sandboxed child that also runs on the device once):
        in the pool, all in parallel; nothing is measured meanwhile (formloop.optimize.compile_phase)."""
        return self.submit(fn, *args, **kwargs)

    def result(self, future) -> Any:
        return future.result()

    def unstarted(self, future) -> bool:
        """True for a measurement that has not begun (the driver runs it when its result is asked for)."""
        return isinstance(future, _Deferred)

    def map(self, fn: Callable, items: list[tuple[tuple, dict]]) -> list:
        futures = [self.submit(fn, *a, **k) for a, k in items]
        return [self.result(f) for f in futures]

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


class RayEngine:
    """CPU steps as Ray tasks (one CPU each), measurements as Ray tasks with one GPU each (gpu tier).

    `address`: 'auto' (a running cluster), 'local' (start a local instance of `workers` CPUs), or a
    cluster address; a Ray instance this process already started is used as it is."""

    name = "ray"
    lazy = False   # measurements are Ray tasks, running as soon as they are submitted

    def __init__(self, address: str, *, tier: str, workers: int):
        try:
            import ray
        except ImportError:
            raise InvalidInput("ray", address, "an installed Ray (formloop's optional extra ray; make venv "
                                               "installs it), or no --ray for the process pool") from None
        self.ray, self.tier = ray, tier
        self.started = False
        if not ray.is_initialized():
            try:
                if address == "local":
                    ray.init(num_cpus=max(1, workers), include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except Exception as exc:  # noqa: BLE001 - no cluster there: a named error, not a traceback
                raise InvalidInput("ray", address, "the address of a running Ray cluster (`ray start --head` "
                                   f"first), 'local' to start one here, or no --ray ({type(exc).__name__}: "
                                   f"{str(exc)[:120]})") from None
            self.started = True
        self.env = {"env_vars": _env()}
        self.cpu = {"num_cpus": 1, "runtime_env": self.env}
        self.gpu = {"num_cpus": 1, "num_gpus": 1 if tier == "gpu" else 0, "runtime_env": self.env}
        self.warm = {"num_cpus": 1, "num_gpus": 1 / max(1, workers) if tier == "gpu" else 0, "runtime_env": self.env}
        self._remote: dict[tuple[Callable, Any], Any] = {}

    def describe(self) -> dict[str, Any]:
        res = self.ray.cluster_resources()
        return {"engine": self.name, "cluster": {"CPU": res.get("CPU"), "GPU": res.get("GPU", 0.0),
                                                 "nodes": len(self.ray.nodes())},
                "measurements": "Ray tasks, num_gpus=1 each" if self.tier == "gpu" else "Ray tasks, one CPU each"}

    def _task(self, fn: Callable, gpu: bool):
        key = (fn, gpu)
        if key not in self._remote:
            self._remote[key] = self.ray.remote(fn).options(**(self.gpu if gpu else self.cpu))
        return self._remote[key]

    def submit(self, fn: Callable, *args: Any, **kwargs: Any):
        return self._task(fn, False).remote(*args, **kwargs)

    def submit_measure(self, fn: Callable, *args: Any, **kwargs: Any):
        return self._task(fn, True).remote(*args, **kwargs)

    def submit_warm(self, fn: Callable, *args: Any, **kwargs: Any):
        """A torch.compile warm-up: one CPU and a share of a GPU (gpu tier), so that they run side by
        side and see the device (Ray hides the GPUs from tasks that ask for none)."""
        key = (fn, "warm")
        if key not in self._remote:
            self._remote[key] = self.ray.remote(fn).options(**self.warm)
        return self._remote[key].remote(*args, **kwargs)

    def result(self, future) -> Any:
        return self.ray.get(future)

    def unstarted(self, future) -> bool:
        return False   # submitted tasks are Ray's to run; their results are kept

    def map(self, fn: Callable, items: list[tuple[tuple, dict]]) -> list:
        return self.ray.get([self.submit(fn, *a, **k) for a, k in items])

    def shutdown(self) -> None:
        if self.started:
            self.ray.shutdown()


def _env() -> dict[str, str]:
    """What a Ray worker needs to import formloop and run the same tier as the driver."""
    src = str(Path(__file__).resolve().parents[2])
    path = [src] + [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}
    for name in ("TRITON_INTERPRET", "FORMLOOP_STORE"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


def make_engine(ray: str | None, *, tier: str, workers: int):
    if ray is None:
        return ProcessEngine(workers)
    if not isinstance(ray, str) or not ray.strip():
        raise InvalidInput("ray", ray, "auto, local, or a Ray cluster address (host:port or ray://host:port)")
    return RayEngine(ray.strip(), tier=tier, workers=workers)
