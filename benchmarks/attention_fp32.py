"""The fp32 flash-attention kernel of `formloop optimize` (formloop.library.attention_fp32_kernel) at the
shapes of the shipped attention problems, one command:

    PYTHONPATH=src python3 benchmarks/attention_fp32.py --out DIR

Per shape: correctness first (fresh random inputs, output poisoned with NaN, error against a float64
reference computed in chunks on the GPU, for the precision the error bound picks and for plain TF32
to show why it is refused), then timing by formloop.measure.timer, CUDA graph and eager side by side,
for the MILP's instance and the attempt-1..3 alternatives (tile pinned, the MILP solves the rest),
against the problem's own reference (torch SDPA on fp32 inputs) in the same run; ratios = reference
time / kernel time. Writes DIR/attention_fp32.json and prints one line per shape and instance.

Without CUDA: the interpreter at small shapes, correctness only (labelled)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

SHAPES = {  # name: B, Hq, Hkv, Lq, Lk, D, causal (the problems at their full sizes)
    "attention_causal": (16, 32, 32, 2048, 2048, 128, True),
    "attention_decode_gqa": (64, 32, 8, 1, 8192, 128, False),
    "attention_gqa_causal": (8, 32, 8, 4096, 4096, 128, True),
    "attention_prefill": (32, 16, 16, 1024, 1024, 64, False),
    "mingpt_attention": (32, 12, 12, 1024, 1024, 64, True),
    "vit_block_attention": (32, 12, 12, 197, 197, 64, False),
    "tail_causal_1000": (4, 16, 4, 1000, 1000, 128, True),
}
SMALL = {"small_causal_gqa": (1, 4, 2, 37, 37, 64, True), "small_decode": (2, 8, 2, 1, 70, 64, False)}


def reference64(q, k, v, causal, chunk_heads=8):
    import torch

    g = q.shape[1] // k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    lq, lk = q.shape[2], k.shape[2]
    mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril() if causal else None
    for b in range(q.shape[0]):
        for h0 in range(0, q.shape[1], chunk_heads):
            hs = range(h0, min(q.shape[1], h0 + chunk_heads))
            qq = q[b, h0:hs.stop].double()
            kk = k[b, [h // g for h in hs]].double()
            vv = v[b, [h // g for h in hs]].double()
            s = (qq @ kk.transpose(-2, -1)) * q.shape[-1] ** -0.5
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            out[b, h0:hs.stop] = torch.softmax(s, -1) @ vv
    return out


def run_shape(name, shape, device, attempts, timing):
    import torch
    from torch.nn import functional as F

    from formloop.library.attention_fp32 import choose_config, precision_for
    from formloop.library.attention_fp32_kernel import fp32_attention

    b, hq, hkv, lq, lk, d, causal = shape
    prec, preds = precision_for()
    gen = torch.Generator(device=device).manual_seed(1)
    q = torch.randn(b, hq, lq, d, device=device, generator=gen)
    k, v = (torch.randn(b, hkv, lk, d, device=device, generator=gen) for _ in range(2))
    ref = reference64(q, k, v, causal)
    rows = []
    insts = []
    for a in range(attempts):
        try:
            insts.append(choose_config(b, hq, hkv, lq, lk, d, causal, prec, attempt=a))
        except Exception as exc:  # noqa: BLE001
            rows.append({"shape": name, "attempt": a, "error": f"{type(exc).__name__}: {exc}"[:200]})
    if device == "cpu":
        insts = [{"config": {"Br": 16, "Bc": 16, "W": 4, "S": 1}, "source": "interpreter"}]
    for a, inst in enumerate(insts):
        for p in ([prec, "tf32"] if a == 0 else [prec]):
            out = torch.full_like(q, float("nan"))
            fp32_attention(q, k, v, causal=causal, config=inst["config"], precision=p, out=out)
            err = (out.double() - ref).abs()
            tol = 1e-4 + 1e-4 * ref.abs()
            row = {"shape": name, "dims": list(shape), "attempt": a, "precision": p, "config": inst["config"],
                   "source": inst["source"], "predicted_us (model)": inst.get("predicted_us"),
                   "max_abs_err (gpu vs fp64)" if device != "cpu" else "max_abs_err (interpreter vs fp64)":
                       err.max().item(), "kernelbench_ok": bool((err <= tol).all().item()),
                   "unwritten": int(torch.isnan(out).sum().item()), "predicted_worst_err (model)": preds[p]}
            if timing and p == prec:
                row.update(time_it(lambda: fp32_attention(q, k, v, causal=causal, config=inst["config"],
                                                          precision=p), "kernel"))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if timing:
        kv = k.repeat_interleave(hq // hkv, 1) if hkv != hq else k
        vv = v.repeat_interleave(hq // hkv, 1) if hkv != hq else v
        base = time_it(lambda: F.scaled_dot_product_attention(q, kv, vv, is_causal=causal), "sdpa_fp32")
        base.update(time_it(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
                            "sdpa_fp32_enable_gqa"))
        for r in rows:
            for mode in ("graph", "eager"):
                kt, st = r.get(f"kernel_{mode}_us"), base.get(f"sdpa_fp32_enable_gqa_{mode}_us")
                if kt and st:
                    r[f"speedup_vs_sdpa_{mode}"] = st / kt
        rows.append({"shape": name, "baseline": base})
        print(json.dumps({"shape": name, "baseline": base}), flush=True)
    return rows


def time_it(fn, label):
    from formloop.measure.timer import time_launches

    out = {}
    for mode in ("graph", "eager"):
        try:
            t = time_launches(lambda i: fn(), 1, device="cuda", mode=mode).timing
            out[f"{label}_{mode}_us"] = t.seconds * 1e6
            out[f"{label}_{mode}_method"] = t.describe() + " (gpu)"
        except Exception as exc:  # noqa: BLE001
            out[f"{label}_{mode}_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--attempts", type=int, default=4, help="instances per shape: the MILP's, then pinned tiles")
    ap.add_argument("--only", action="append", default=[], help="only these shapes (repeatable)")
    ap.add_argument("--dry-run", action="store_true", help="interpreter, small shapes, correctness only")
    args = ap.parse_args(argv)
    import torch

    gpu = torch.cuda.is_available() and not args.dry_run
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    shapes = SHAPES if gpu else SMALL
    shapes = {k: v for k, v in shapes.items() if not args.only or k in args.only}
    rows = []
    for name, shape in shapes.items():
        rows += run_shape(name, shape, "cuda" if gpu else "cpu", args.attempts if gpu else 1, gpu)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "attention_fp32.json").write_text(json.dumps({"tier": "gpu" if gpu else "interpreter",
                                                             "rows": rows}, indent=1))
    bad = [r for r in rows if "kernelbench_ok" in r and not r["kernelbench_ok"] and r["precision"] != "tf32"]
    print(f"{len(bad)} kernel rows outside KernelBench's fp32 tolerance at the chosen precision "
          f"({'gpu' if gpu else 'interpreter'}); wrote {args.out / 'attention_fp32.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
