"""Device ceilings, measured: copy bandwidth and the bf16 / tf32 matrix rates (cuBLAS).

    PYTHONPATH=src python3 benchmarks/ceilings.py [--json out.json]

Copy bandwidth counts bytes read plus bytes written of a large device-to-device copy; the matrix
rates are 8192³ products on random operands (never zeros). All times are CUDA-graph replays of
several launches, event-timed, median. These numbers become the chip's `measured` ceilings."""
from __future__ import annotations

import argparse
import json
import sys


def _graph_median_ms(fn, launches: int, reps: int = 7) -> float:
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(2):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(launches):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / launches)
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth(nbytes: int = 2**30) -> float:
    """bytes/s of a device-to-device copy (read + write counted), two buffers alternating."""
    import torch

    n = nbytes // 4
    src = [torch.randn(n, device="cuda") for _ in range(2)]
    dst = [torch.empty(n, device="cuda") for _ in range(2)]
    ms = _graph_median_ms(lambda i: dst[i % 2].copy_(src[i % 2]), launches=20, reps=11)
    return 2 * n * 4 / (ms * 1e-3)


def read_bandwidth(nbytes: int = 2**30) -> float:
    """bytes/s of a streaming read (a sum over a large bf16 tensor; the result is a few bytes)."""
    import torch

    x = [torch.randn(nbytes // 2, device="cuda").to(torch.bfloat16) for _ in range(2)]
    out = [torch.empty((), device="cuda", dtype=torch.float32) for _ in range(2)]
    ms = _graph_median_ms(lambda i: torch.sum(x[i % 2], dim=0, dtype=torch.float32, out=out[i % 2]), launches=20, reps=11)
    return nbytes / (ms * 1e-3)


def matmul_rate(dtype: str, n: int = 8192) -> float:
    """FLOP/s of an n³ torch.matmul (cuBLAS) in bf16 or tf32 on random operands."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    t = {"bf16": torch.bfloat16, "tf32": torch.float32}[dtype]
    a = [torch.randn(n, n, device="cuda").to(t) for _ in range(2)]
    b = [torch.randn(n, n, device="cuda").to(t) for _ in range(2)]
    c = [torch.empty(n, n, device="cuda", dtype=t) for _ in range(2)]
    ms = _graph_median_ms(lambda i: torch.matmul(a[i % 2], b[i % 2], out=c[i % 2]), launches=4)
    return 2 * n ** 3 / (ms * 1e-3)


def warm_up(seconds: float = 1.5) -> None:
    """Keep the GPU busy until its clocks have ramped (an idle H200 sits at a few hundred MHz)."""
    import time

    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            torch.matmul(a, a)
        torch.cuda.synchronize()


def memory_ceiling() -> dict[str, float]:
    """bytes/s: the memory ceiling (`mem_bandwidth`, the best of two copies and a streaming read: each is a lower
    bound on what DRAM can do) and each of the three (`bw_*`). Call after warm_up()."""
    copies = {"copy_1GiB": copy_bandwidth(2**30), "copy_256MiB": copy_bandwidth(2**28), "read_1GiB": read_bandwidth()}
    return {"mem_bandwidth": max(copies.values()), **{f"bw_{k}": v for k, v in copies.items()}}


def measure() -> dict[str, float]:
    warm_up()
    return {**memory_ceiling(), "flops_bf16": matmul_rate("bf16"), "flops_tf32": matmul_rate("tf32")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the ceilings to this file")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: ceilings are measured on the GPU only", file=sys.stderr)
        return 2
    c = measure()
    print(f"{torch.cuda.get_device_name()}: memory {c['mem_bandwidth'] / 1e12:.2f} TB/s (best of copy/read), "
          f"bf16 {c['flops_bf16'] / 1e12:.0f} TFLOP/s, tf32 {c['flops_tf32'] / 1e12:.0f} TFLOP/s (cuBLAS 8192^3, gpu)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(c, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
