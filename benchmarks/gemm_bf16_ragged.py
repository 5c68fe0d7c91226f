"""gemm_bf16's MILP design (the H200 campaign's attempt 0: Tm128 Tn256 Tk64 S4 W8, L=1 TMA) at the shape
probe's ragged shapes, through what the assembled ModelNew calls (fused_gemm.gemm_chain): correctness only
(no timing). For each shape: the load path taken per call, and the candidate's and torch's own bf16 matmul's
elements outside KernelBench's allclose (atol = rtol = 0.01) against float64, both on the same inputs.

    python3 benchmarks/gemm_bf16_ragged.py --out DIR        # GPU, 4096^3 and the probe's 2049 variants
    python3 benchmarks/gemm_bf16_ragged.py --dry-run        # CPU, Triton interpreter, small shapes
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DESIGN = {"Tm": 128, "Tn": 256, "Tk": 64, "S": 4, "W": 8, "KS": 1, "G": 8, "L": 1}
GPU_SHAPES = [(4096, 4096, 4096), (2049, 4096, 4096), (4096, 4096, 2049), (4096, 2049, 4096)]   # M, N, K
DRY_SHAPES = [(128, 256, 64), (65, 256, 64), (128, 256, 33), (128, 129, 64)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="directory for ragged.json")
    ap.add_argument("--dry-run", action="store_true", help="Triton interpreter on the CPU at small shapes")
    args = ap.parse_args()
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from formloop.library import fused_gemm

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: use --dry-run", file=sys.stderr)
        return 2
    rows = []
    for m, n, k in DRY_SHAPES if args.dry_run else GPU_SHAPES:
        g = torch.Generator(device=device).manual_seed(m * 7 + n * 3 + k)
        a = torch.randn(m, k, device=device, generator=g).bfloat16()
        b = torch.randn(k, n, device=device, generator=g).bfloat16()
        truth = a.double() @ b.double()
        path = fused_gemm.load_path(DESIGN, a, b)
        got = fused_gemm.gemm_chain(a, b, ab="bf16", c="bf16", lb="row", config=DESIGN)
        ref = a @ b

        def bad(x):
            return int((~torch.isclose(x.double(), truth, atol=0.01, rtol=0.01)).sum())
        row = {"M": m, "N": n, "K": k, "load_path": "tma" if path else "pointer",
               "candidate_bad_vs_fp64": bad(got), "torch_bad_vs_fp64": bad(ref), "elements": m * n,
               "candidate_bad_vs_torch": int((~torch.isclose(got.float(), ref.float(), atol=0.01, rtol=0.01)).sum())}
        rows.append(row)
        print(f"M={m} N={n} K={k}: path {row['load_path']}; elements outside allclose(0.01, 0.01) of float64: "
              f"candidate {row['candidate_bad_vs_fp64']}, torch {row['torch_bad_vs_fp64']} of {m * n} "
              f"({'interpreter' if args.dry_run else 'gpu'}); candidate vs torch {row['candidate_bad_vs_torch']}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ragged.json").write_text(json.dumps({"design": DESIGN, "rows": rows}, indent=1))
    return 1 if any(r["candidate_bad_vs_fp64"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
