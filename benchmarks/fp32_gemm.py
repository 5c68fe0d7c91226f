"""fp32 GEMMs of the problem set in each operand precision: formloop's kernel with tf32, tf32x3 and
fp32 (SIMT) operands against eager torch fp32 (cuBLAS, allow_tf32 off: KernelBench's reference) and
torch with allow_tf32 on, one command:

    PYTHONPATH=src python3 benchmarks/fp32_gemm.py --out DIR

Correctness first, per case and precision: fresh random inputs (activations randn, nn.Linear weights
at PyTorch's default init, bmm/mm operands randn, as the problems draw them), the error against the
float64 product (‖c − t‖/‖t‖, max |c − t|), KernelBench's verdict against the fp32 reference
(torch.allclose, atol = rtol = 1e-4: failing elements) and the a-priori bound of
formloop.optimize.precision (predicted worst error, allowed). Then timing by formloop.measure.timer,
CUDA graph and eager side by side, speedup vs eager torch fp32 in the same run. Variants: tf32x3 on
operands split before the GEMM (library.tf32_split), and for a B stored [K, N] the tf32 and tf32x3
kernels on B copied K-major first (optimize.gemm_region.kmajor_b). Writes
DIR/fp32_gemm.json. Without CUDA (or with --dry-run) the same pipeline runs in the Triton
interpreter at small sizes (labelled; host wall times, not kernel times)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

# (name, batch, M, N, K, B layout): "col" = an nn.Linear weight [N, K], "row" = a randn [K, N] matrix
CASES = (("linear_bias_gelu", 1, 16384, 16384, 4096, "col"), ("gemm_scale_clamp", 1, 8192, 8192, 4096, "col"),
         ("gateup_silu_mul", 1, 8192, 28672, 4096, "col"),
         ("gemm_skinny", 1, 16, 8192, 8192, "row"), ("bmm_heads", 128, 512, 2048, 1024, "row"))
SMALL = (("gemm_scale_clamp", 1, 64, 256, 128, "col"), ("bmm_heads", 4, 64, 64, 128, "row"))
PRECISIONS = ("tf32", "tf32x3", "fp32")
# tf32x3 with the operands split before the GEMM (formloop.library.tf32_split): one TF32 GEMM over 3K,
# its tile the MILP's (None) or pinned
SPLIT_TILES = (None, (128, 256, 32), (128, 128, 64))


def milp_config(check_spec, op: str, ab: str, lb: str, dims, gpu: bool, tile=None):
    """(the MILP's tile configuration of the kernel spec for `op` at dims (batch, M, N, K), or None; the
    check's answer). Without a GPU the interpreter's coarse tile is pinned; on the GPU `tile` pins one."""
    batch, M, N, K = dims
    shape = f"{batch} x {M} x {N} x {K}" if batch > 1 else f"{M} x {N} x {K}"
    extra = f"    tile = {tile[0]} x {tile[1]} x {tile[2]}\n" if tile and gpu else ""
    if not gpu:
        extra = "    tile = 64 x 64 x 64\n    split_k = 1\n    load = ptr\n"
    chosen = check_spec(text=f"kernel k = {op} {{\n    a = {ab} row\n    b = {ab} {lb}\n    c = fp32 row\n"
                             f"    arch = sm90\n    shape = {shape}\n{extra}}}\n")
    if not chosen.get("ok"):
        return None, chosen
    return {k: int(v) for k, v in chosen["design"]["assignment"].items()}, chosen


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dry-run", action="store_true", help="interpreter at small sizes")
    args = ap.parse_args(argv)
    import torch
    gpu = torch.cuda.is_available() and not args.dry_run
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    from formloop.dsl.service import check_spec
    from formloop.library.fused_gemm import gemm_chain
    from formloop.measure.timer import time_calls
    from formloop.optimize.precision import bound

    dev = "cuda" if gpu else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for name, batch, M, N, K, lb in CASES if gpu else SMALL:
        op = "batched_gemm" if batch > 1 else "gemm"
        a = torch.randn((batch, M, K) if batch > 1 else (M, K), device=dev, generator=g)
        if lb == "col":
            b = (torch.rand((N, K), device=dev, generator=g) * 2 - 1) / math.sqrt(K)
        else:
            b = torch.randn((batch, K, N) if batch > 1 else (K, N), device=dev, generator=g)
        bm = b.T if lb == "col" else b
        truth = torch.matmul(a.double(), bm.double())
        torch.backends.cuda.matmul.allow_tf32 = False
        ref = torch.matmul(a, bm)
        rms_ab = 1 / math.sqrt(3 * K) if lb == "col" else 1.0
        calls = {"torch fp32 (eager ref)": (lambda a, b: torch.matmul(a, b.T if lb == "col" else b), False),
                 "torch allow_tf32": (lambda a, b: torch.matmul(a, b.T if lb == "col" else b), True)}
        for p in PRECISIONS:
            cfg, chosen = milp_config(check_spec, op, p, lb, (batch, M, N, K), gpu)
            if cfg is None:
                print(f"{name} {p}: spec refused: {chosen.get('lines')}", flush=True)
                continue
            calls[f"formloop {p}"] = (lambda a, b, p=p, cfg=cfg: gemm_chain(a, b, op=op, ab=p, lb=lb, config=cfg),
                                      False)
        for p in ("tf32", "tf32x3") if lb == "row" else ():   # B copied K-major first (gemm_region.kmajor_b)
            cfg, _ = milp_config(check_spec, op, p, "col", (batch, M, N, K), gpu)
            if cfg is not None:
                calls[f"formloop {p} b k-major"] = (lambda a, b, p=p, cfg=cfg: gemm_chain(
                    a, b, op=op, ab=p, lb="row", config=cfg, b_kmajor=True), False)
        for tile in SPLIT_TILES if gpu else SPLIT_TILES[:1]:   # the interpreter: the MILP's tile only
            cfg, _ = milp_config(check_spec, op, "tf32", lb, (batch, M, N, 3 * K), gpu, tile)
            if cfg is None:
                continue
            label = "formloop tf32x3 split " + ("milp" if tile is None else "x".join(map(str, tile)))
            calls[label] = (lambda a, b, cfg=cfg: gemm_chain(a, b, op=op, ab="tf32x3", lb=lb, config=cfg,
                                                             presplit=True), False)
        results = {}
        for label, (fn, tf32) in calls.items():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            c = fn(a, b)
            d = c.double() - truth
            prec = (label.split()[1] if label.startswith("formloop") else ("tf32" if tf32 else "fp32"))
            bd = bound(prec, K=K, N=N, outputs=batch * M * N, rms_ab=rms_ab)
            row = {"case": name, "shape": [batch, M, N, K], "impl": label,
                   "rel_error_vs_fp64": float(d.norm() / truth.norm()), "max_abs_error_vs_fp64": float(d.abs().max()),
                   "allclose_fail_elements_vs_fp32_ref": int((~torch.isclose(ref, c, rtol=1e-4, atol=1e-4)).sum()),
                   "finite": bool(torch.isfinite(c).all()), "bound_worst_error": bd["worst_error"],
                   "bound_allowed": bd["allowed"]}
            sets = [(torch.randn_like(a), b) for _ in range(2)]
            for mode in ("graph", "eager"):
                t = time_calls(fn, sets, device=dev, mode=mode).timing
                row[f"{mode}_us"], row["time_source"] = t.seconds * 1e6, t.source if gpu else "interpreter (host wall)"
            results[label] = row
            torch.backends.cuda.matmul.allow_tf32 = False
        base = results["torch fp32 (eager ref)"]
        for row in results.values():
            for mode in ("graph", "eager"):
                row[f"speedup_{mode}_vs_torch_fp32"] = base[f"{mode}_us"] / row[f"{mode}_us"]
            rows.append(row)
            print(f"{name:17s} {row['impl']:34s} rel err {row['rel_error_vs_fp64']:.2e} "
                  f"max {row['max_abs_error_vs_fp64']:.2e} (bound {row['bound_worst_error']:.1e}, "
                  f"allowed {row['bound_allowed']:.0e}) allclose-fail "
                  f"{row['allclose_fail_elements_vs_fp32_ref']:>8d}  graph {row['graph_us']:9.1f} us "
                  f"({row['speedup_graph_vs_torch_fp32']:.2f}x)  eager {row['eager_us']:9.1f} us "
                  f"({row['speedup_eager_vs_torch_fp32']:.2f}x)  [{row['time_source']}]", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fp32_gemm.json").write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
    print(f"wrote {args.out / 'fp32_gemm.json'} (times: {'gpu, formloop.measure.timer' if gpu else 'interpreter'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
