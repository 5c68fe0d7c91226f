"""fp32 row sums against KernelBench's rule: how often the reference's own rounding, and a candidate's, miss it.

    PYTHONPATH=src python3 benchmarks/row_sum_error.py --out DIR [--seeds 4]    # H200, about a minute
    PYTHONPATH=src python3 benchmarks/row_sum_error.py --out DIR --dry-run      # CPU: interpreter, small rows

problems/level1/row_sum.py sums each row of a 32768 x 32768 fp32 tensor; KernelBench's rule is
torch.allclose(candidate, reference, atol=1e-4, rtol=1e-4) against torch.sum's own fp32 result. Per seed
(fresh torch.randn on the device): the reference torch.sum(x, 1); the truth, float64 sums of row blocks (no
whole fp64 copy) rounded to fp32; formloop's rowwise sum kernel at three tile widths, each with fp32 and with
fp64 partials. For the truth and every kernel: elements failing the rule against the reference, and the
largest |error| against the truth. Then timing (formloop.measure.timer, CUDA graph and eager, on the same
input) of every kernel beside torch.sum: µs and torch's time over the kernel's. Writes DIR/row_sum_error.json."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ARGS = None
if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--dry-run", action="store_true", help="CPU: Triton interpreter, small rows, no timing")
    ARGS = p.parse_args()
    if ARGS.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"   # before triton is imported anywhere

import torch  # noqa: E402
import triton  # noqa: E402

from formloop.library.rowwise_kernel import RED_CODE, RowConfig, _reduce_kernel  # noqa: E402
from formloop.measure.timer import time_launches  # noqa: E402

SHAPE, SMALL = (32768, 32768), (64, 3000)
TOL = 1e-4
DESIGNS = (RowConfig(64, 16, 1, 2), RowConfig(256, 4, 1, 2), RowConfig(2048, 1, 2, 2))


def row_sum(x: torch.Tensor, cfg: RowConfig, acc64: bool, out: torch.Tensor) -> torch.Tensor:
    R, C = x.shape
    _reduce_kernel[(triton.cdiv(R, cfg.RP),)](x, out, R, C, x.stride(0), OP=RED_CODE["sum"], BC=cfg.BC, RP=cfg.RP,
                                              ACC64=acc64, num_warps=cfg.W, num_stages=cfg.S)
    return out


def truth_fp32(x: torch.Tensor, block: int = 1024) -> torch.Tensor:
    return torch.cat([x[i:i + block].double().sum(1) for i in range(0, x.shape[0], block)]).float()


def errors(got: torch.Tensor, ref: torch.Tensor, truth: torch.Tensor) -> dict:
    bad = ~torch.isclose(got, ref, atol=TOL, rtol=TOL)
    return {"fail_vs_reference": int(bad.sum()), "max_abs_vs_truth": float((got - truth).abs().max()),
            "max_abs_vs_reference": float((got - ref).abs().max())}


def name(cfg: RowConfig, acc64: bool) -> str:
    return f"BC{cfg.BC} RP{cfg.RP} W{cfg.W} S{cfg.S} {'fp64' if acc64 else 'fp32'} partials"


def main(args) -> dict:
    device = "cpu" if args.dry_run or not torch.cuda.is_available() else "cuda"
    R, C = SMALL if device == "cpu" else SHAPE
    kernels = [(cfg, acc) for cfg in DESIGNS for acc in (False, True)]
    rows, x = {"truth (fp64 sums rounded to fp32)": []} | {name(c, a): [] for c, a in kernels}, None
    for seed in range(args.seeds):
        gen = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(R, C, generator=gen, device=device)
        ref, truth = torch.sum(x, 1), truth_fp32(x)
        rows["truth (fp64 sums rounded to fp32)"].append(errors(truth, ref, truth))
        for cfg, acc in kernels:
            out = row_sum(x, cfg, acc, torch.full((R,), float("nan"), device=device))
            rows[name(cfg, acc)].append(errors(out, ref, truth))
    report = {"shape": [R, C], "device": device, "seeds": args.seeds, "rule": f"allclose atol=rtol={TOL}",
              "errors": rows, "timing": {}}
    if device == "cuda":
        out = torch.empty(R, device=device)
        sides = {"torch.sum": lambda i: torch.sum(x, 1)} | {
            name(c, a): (lambda i, c=c, a=a: row_sum(x, c, a, out)) for c, a in kernels}
        for mode in ("graph", "eager"):
            us = {k: time_launches(fn, 1, device=device, mode=mode).timing.seconds * 1e6 for k, fn in sides.items()}
            report["timing"][mode] = {k: {"us": v, "torch_over_this": us["torch.sum"] / v} for k, v in us.items()}
        report["gpu"] = torch.cuda.get_device_name()
    return report


def print_report(r: dict) -> None:
    print(f"row sums {r['shape'][0]} x {r['shape'][1]} fp32 on {r['device']}, {r['seeds']} seeds, rule {r['rule']}")
    print("| sum | elements failing the rule vs torch.sum, per seed | max abs error vs truth | max abs difference "
          "from torch.sum | CUDA graph µs (torch / this) | eager µs (torch / this) |")
    for k, per in r["errors"].items():
        t = [r["timing"].get(m, {}).get(k) for m in ("graph", "eager")]
        cells = [f"{v['us']:.0f} ({v['torch_over_this']:.3f}x)" if v else "-" for v in t]
        print(f"| {k} | {' / '.join(str(e['fail_vs_reference']) for e in per)} | "
              f"{max(e['max_abs_vs_truth'] for e in per):.2e} | {max(e['max_abs_vs_reference'] for e in per):.2e} | "
              f"{cells[0]} | {cells[1]} |")
    for m, t in r["timing"].items():
        print(f"torch.sum {m}: {t['torch.sum']['us']:.0f} µs")


if __name__ == "__main__":
    result = main(ARGS)
    ARGS.out.mkdir(parents=True, exist_ok=True)
    (ARGS.out / "row_sum_error.json").write_text(json.dumps(result, indent=1))
    print_report(result)
    sys.exit(0)
