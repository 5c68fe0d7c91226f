"""argmax over the middle dim of [B, D1, D2] (the set's argmax_dim, 128 x 4096 x 4095): the library's
colreduce kernel against two loop structures it does not have yet, and torch.argmax, one command:

    PYTHONPATH=src python3 benchmarks/colreduce_variants.py --out DIR          # H200, about 1-2 minutes
    PYTHONPATH=src python3 benchmarks/colreduce_variants.py --dry-run --out D  # CPU: interpreter, tiny sizes
    PYTHONPATH=src python3 benchmarks/colreduce_variants.py --registers        # any machine: sm_90 builds

Variants (each a program per (batch, RP contiguous output columns), walking D1 BC rows at a time):
  lib    formloop.library.vecops_kernel.col_argreduce (one tile in flight per step);
  pf     the same loop with the next tile loaded before the current one is compared (two in flight);
  split  D1 cut into SPLIT chunks run as separate programs, each writing (max, first index) to a workspace,
         then a combine kernel (earlier chunk wins ties: torch's first index).
Every design is checked first (indices equal to torch.argmax on a fresh input; the output poisoned with
-1), then timed by formloop.measure.timer, CUDA graph and eager, beside torch.argmax in the same run.
Ratio = torch's graph time / the design's graph time. Writes DIR/colreduce_variants.json.
--registers compiles the library kernel for sm_90 (Triton's compiler and the wheel's ptxas and cuobjdump, no GPU
needed) at the designs of REG_DESIGNS and prints each build's registers per thread and stack bytes (spills)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
if "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"   # before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from formloop.library.vecops_kernel import col_argreduce  # noqa: E402

LIB = [(16, 32, 1), (8, 32, 1), (32, 32, 1), (16, 64, 1), (16, 64, 2), (32, 64, 2), (32, 128, 4)]
PF = [(16, 32, 1), (8, 32, 1), (32, 32, 1), (16, 64, 1), (16, 64, 2), (8, 64, 2), (32, 128, 4), (16, 128, 4)]
REG_DESIGNS = [(16, 32, 1), (16, 64, 1), (32, 32, 1), (32, 64, 2), (32, 128, 4), (16, 128, 1), (8, 128, 1),
               (32, 64, 1), (16, 256, 2), (64, 32, 1)]
SPLIT = [(16, 32, 1, 2), (16, 32, 1, 4), (16, 64, 2, 4), (16, 128, 4, 4), (16, 128, 4, 8), (32, 128, 4, 8),
         (16, 256, 8, 8)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--dry-run", action="store_true", help="Triton interpreter, tiny sizes, correctness only")
    ap.add_argument("--dtype", action="append", default=[], choices=("fp32", "bf16"))
    ap.add_argument("--registers", action="store_true", help="sm_90 builds' registers and spills, then stop")
    args = ap.parse_args(argv)
    if args.registers:
        for dtype in args.dtype or ["fp32", "bf16"]:
            for d in REG_DESIGNS:
                regs, stack = sm90_registers(d, dtype)
                print(f"{dtype} {d[0]}x{d[1]}x{d[2]}: {regs} registers per thread, stack {stack} B "
                      f"({d[0] * d[1] // (32 * d[2])} elements per thread)")
        return 0
    dev = "cuda" if torch.cuda.is_available() and not args.dry_run else "cpu"
    B, D1, D2 = (2, 70, 37) if dev == "cpu" else (128, 4096, 4095)
    designs = [("lib", d, argmax_lib) for d in LIB] + [("pf", d, argmax_pf) for d in PF] + \
              [("split", d, argmax_split) for d in SPLIT]
    if dev == "cpu":
        designs = [(k, d, f) for k, d, f in designs if d[1] <= 64]
    rows, t0 = [], time.time()
    for dtype in args.dtype or ["fp32", "bf16"]:
        dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        gen = torch.Generator(device=dev).manual_seed(1)
        x = torch.randn(B, D1, D2, generator=gen, device=dev).to(dt)
        want = torch.argmax(x, 1)
        base = _time(lambda: torch.argmax(x, 1), dev)
        rows.append({"dtype": dtype, "variant": "torch.argmax", "design": None, "ok": True, **base})
        print(f"{dtype} torch.argmax: graph {_us(base.get('graph_us'))} eager {_us(base.get('eager_us'))}", flush=True)
        for kind, d, fn in designs:
            row = {"dtype": dtype, "variant": kind, "design": d}
            try:
                got = fn(x, d, poison=True)
                row["ok"] = bool(torch.equal(got, want))
                if row["ok"] and dev != "cpu":
                    row.update(_time(lambda: fn(x, d), dev))
                    row["vs_torch_graph"] = base["graph_us"] / row["graph_us"]
                    row["vs_torch_eager"] = base["eager_us"] / row["eager_us"]
            except Exception as exc:  # noqa: BLE001 - recorded with its reason
                row["ok"], row["failure"] = False, f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(f"{dtype} {kind} {d}: ok={row['ok']} graph {_us(row.get('graph_us'))} eager "
                  f"{_us(row.get('eager_us'))} x{row.get('vs_torch_graph') or 0:.3f} {row.get('failure', '')}",
                  flush=True)
        del x, want
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"shape": [B, D1, D2], "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreter)",
            "torch": torch.__version__, "seconds": round(time.time() - t0, 1)}
    (args.out / "colreduce_variants.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    bad = [r for r in rows if not r["ok"]]
    print(f"{len(rows)} rows, {len(bad)} not correct; {meta}")
    return 1 if bad else 0


def _us(v):
    return f"{v:.1f} us" if v else "-"


def _time(call, dev):
    if dev == "cpu":
        return {}
    from formloop.measure.timer import time_launches
    out = {}
    for mode in ("graph", "eager"):
        out[f"{mode}_us"] = time_launches(lambda i: call(), 1, device=dev, mode=mode).timing.seconds * 1e6
    return out


def sm90_registers(design, dtype: str) -> tuple[int, int]:
    """(registers per thread, stack bytes) of the library's colreduce kernel built for sm_90 at (BC, RP, W)."""
    import re
    import subprocess
    import tempfile

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from formloop.library.vecops_kernel import _colarg_kernel

    bc, rp, w = design
    sig = {"x_ptr": {"fp32": "*fp32", "bf16": "*bf16"}[dtype], "y_ptr": "*i64", "D1": "i32", "D2": "i32",
           "MIN": "constexpr", "BC": "constexpr", "RP": "constexpr"}
    k = triton.compile(ASTSource(_colarg_kernel, sig, {"MIN": False, "BC": bc, "RP": rp}),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": 3})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        dump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        text = subprocess.run([dump, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    regs, stack = re.search(r"REG:(\d+).*?STACK:(\d+)", text).groups()
    return int(regs), int(stack)


def argmax_lib(x, d, poison=False):
    bc, rp, w = d
    return col_argreduce("argmax", x, 1, config={"BC": bc, "RP": rp, "W": w, "SPLIT": 1})


def _out(x, poison):
    b, _, d2 = x.shape
    return torch.full((b, d2), -1, dtype=torch.int64, device=x.device) if poison else \
        torch.empty((b, d2), dtype=torch.int64, device=x.device)


@triton.jit
def _pf_kernel(x_ptr, y_ptr, D1, D2, BC: tl.constexpr, RP: tl.constexpr):
    """argmax over D1 with the next [BC, RP] tile loaded before the current one is compared."""
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * RP + tl.arange(0, RP)
    col_ok = cols < D2
    base = x_ptr + b * D1 * D2 + cols[None, :]
    acc = tl.full([BC, RP], float("-inf"), tl.float32)
    idx = tl.zeros([BC, RP], tl.int32)
    r = tl.arange(0, BC)
    m = (r < D1)[:, None] & col_ok[None, :]
    x = tl.load(base + r.to(tl.int64)[:, None] * D2, mask=m, other=float("-inf")).to(tl.float32)
    for d0 in range(0, D1, BC):
        dn = d0 + BC + r
        mn = (dn < D1)[:, None] & col_ok[None, :]
        xn = tl.load(base + dn.to(tl.int64)[:, None] * D2, mask=mn, other=float("-inf")).to(tl.float32)
        d = d0 + r
        better = (x > acc) & (d < D1)[:, None]
        idx = tl.where(better, d[:, None], idx)
        acc = tl.where(better, x, acc)
        x = xn
    best = tl.max(acc, 0)
    out = tl.min(tl.where(acc == best[None, :], idx, 2147483647), 0)
    tl.store(y_ptr + b * D2 + cols, out.to(tl.int64), mask=col_ok)


def argmax_pf(x, d, poison=False):
    bc, rp, w = d
    b, d1, d2 = x.shape
    y = _out(x, poison)
    _pf_kernel[(b, triton.cdiv(d2, rp))](x, y, d1, d2, BC=bc, RP=rp, num_warps=w)
    return y


@triton.jit
def _split_kernel(x_ptr, v_ptr, i_ptr, D1, D2, CH, BC: tl.constexpr, RP: tl.constexpr):
    """Chunk s of D1 ([s·CH, (s+1)·CH)) of batch b: the running (max, first index) of RP columns."""
    b = tl.program_id(0).to(tl.int64)
    s = tl.program_id(2)
    cols = tl.program_id(1) * RP + tl.arange(0, RP)
    col_ok = cols < D2
    base = x_ptr + b * D1 * D2 + cols[None, :]
    acc = tl.full([BC, RP], float("-inf"), tl.float32)
    idx = tl.zeros([BC, RP], tl.int32)
    lo = s * CH
    hi = tl.minimum(lo + CH, D1)
    for d0 in range(lo, hi, BC):
        d = d0 + tl.arange(0, BC)
        m = (d < hi)[:, None] & col_ok[None, :]
        x = tl.load(base + d.to(tl.int64)[:, None] * D2, mask=m, other=float("-inf")).to(tl.float32)
        better = (x > acc) & m
        idx = tl.where(better, d[:, None], idx)
        acc = tl.where(better, x, acc)
    best = tl.max(acc, 0)
    first = tl.min(tl.where(acc == best[None, :], idx, 2147483647), 0)
    at = (s * tl.num_programs(0) + b) * D2 + cols
    tl.store(v_ptr + at, best, mask=col_ok)
    tl.store(i_ptr + at, first, mask=col_ok)


@triton.jit
def _combine_kernel(v_ptr, i_ptr, y_ptr, N, S: tl.constexpr, BLOCK: tl.constexpr):
    """y = the index of the largest chunk maximum, the earliest chunk on ties."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = o < N
    best = tl.load(v_ptr + o, mask=ok, other=float("-inf"))
    arg = tl.load(i_ptr + o, mask=ok, other=0)
    for s in tl.static_range(1, S):
        v = tl.load(v_ptr + s * N + o, mask=ok, other=float("-inf"))
        i = tl.load(i_ptr + s * N + o, mask=ok, other=0)
        take = v > best
        arg = tl.where(take, i, arg)
        best = tl.where(take, v, best)
    tl.store(y_ptr + o, arg.to(tl.int64), mask=ok)


def argmax_split(x, d, poison=False):
    bc, rp, w, split = d
    b, d1, d2 = x.shape
    ch = triton.cdiv(triton.cdiv(d1, split), bc) * bc
    split = triton.cdiv(d1, ch)
    vals = torch.empty((split, b, d2), dtype=torch.float32, device=x.device)
    idxs = torch.empty((split, b, d2), dtype=torch.int32, device=x.device)
    y = _out(x, poison)
    _split_kernel[(b, triton.cdiv(d2, rp), split)](x, vals, idxs, d1, d2, ch, BC=bc, RP=rp, num_warps=w)
    n = b * d2
    _combine_kernel[(triton.cdiv(n, 1024),)](vals, idxs, y, n, S=split, BLOCK=1024, num_warps=4)
    return y


if __name__ == "__main__":
    raise SystemExit(main())
