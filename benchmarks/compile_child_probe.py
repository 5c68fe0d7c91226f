"""Where a torch.compile baseline's child spends its time, and whether a forkserver that has already
imported torch.compile's front and back ends can still hand CUDA to its children. One command:

    PYTHONPATH=src python3 benchmarks/compile_child_probe.py --out DIR      # a GPU machine, about 1-2 minutes

For each forkserver preload -- 'torch' (formloop's sandbox today), 'compiler' (torch._dynamo and
torch._inductor.compile_fx too) and 'compiler+nvml' (the same with PYTORCH_NVML_BASED_CUDA_CHECK=1, so that
torch.cuda.is_available() asks NVML instead of initializing the CUDA driver before the fork) -- a fresh
driver process forks three children in turn, each of which builds torch.compile(relu model), runs it once
(an Inductor cache shared by all, so the second and third children find it warm) and reports its seconds:
imports, construction, first call, CUDA usable. Writes DIR/compile_child_probe.json."""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

PRELOADS = {"torch": ["torch"], "compiler": ["torch", "torch._dynamo", "torch._inductor.compile_fx"],
            "compiler+nvml": ["torch", "torch._dynamo", "torch._inductor.compile_fx"]}


def child(conn) -> None:
    out = {}
    t0 = time.monotonic()
    try:
        import torch
        import torch._dynamo  # noqa: F401
        out["imports_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        x = torch.randn(4096, 4096, device="cuda")
        torch.cuda.synchronize()
        out["cuda_first_use_s"] = time.monotonic() - t1
        t2 = time.monotonic()
        fn = torch.compile(torch.nn.ReLU())
        out["construct_s"] = time.monotonic() - t2
        t3 = time.monotonic()
        y = fn(x)
        torch.cuda.synchronize()
        out["first_call_s"] = time.monotonic() - t3
        out["ok"] = bool(torch.equal(y, torch.relu(x)))
    except Exception as exc:  # noqa: BLE001 - the probe reports what failed
        out["ok"], out["error"] = False, f"{type(exc).__name__}: {str(exc)[:300]}"
    out["total_s"] = time.monotonic() - t0
    conn.send(out)
    conn.close()


def driver(mode: str) -> list[dict]:
    if mode == "compiler+nvml":
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOADS[mode])
    rows = []
    for k in range(3):
        r, w = ctx.Pipe(duplex=False)
        t0 = time.monotonic()
        p = ctx.Process(target=child, args=(w,))
        p.start()
        w.close()
        got = r.recv() if r.poll(300) else {"ok": False, "error": "no result in 300 s"}
        p.join(30)
        rows.append({"mode": mode, "child": k, "wall_s": round(time.monotonic() - t0, 3),
                     **{a: (round(b, 3) if isinstance(b, float) else b) for a, b in got.items()}})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--mode", choices=sorted(PRELOADS), help=argparse.SUPPRESS)   # one driver (internal)
    args = ap.parse_args(argv)
    if args.mode:
        print(json.dumps(driver(args.mode)))
        return 0
    cache = args.out / "inductor_cache"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}
    rows = []
    for mode in PRELOADS:
        p = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--mode", mode], env=env,
                           capture_output=True, text=True, timeout=900)
        got = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else \
            [{"mode": mode, "ok": False, "error": p.stderr[-400:]}]
        rows += got
        for r in got:
            print(r, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_child_probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
