"""Does a decode step gain from filling the L2 with the O projection's weights while attention runs?

    PYTHONPATH=src python3 benchmarks/decode_l2_window.py --out DIR [--scenario decode:2048 ...]

Why: a Qwen3-8B decode step streams ~390 MB of weights through four GEMVs at ~4 TB/s, but between the QKV and
the O projection sit the q/k-norm-rope kernel and attention (8-17 us), which use a fraction of the memory
bandwidth. If the O projection's weights (33.5 MB; the L2 holds 50 MB) are asked into the L2 when that window
opens, the O projection reads them from the L2 instead of HBM.

How: a tiny kernel launched right after the QKV GEMV issues L2 prefetches over a byte range and exits (bulk:
one `cp.async.bulk.prefetch.L2.global` per CHUNK bytes, the copy engine moves them; lines: one
`prefetch.global.L2` per 128-byte line). Prefetches change no value, so the layer's output is the same; it is
still checked against the fp32 reference first. Variants per scenario (the plan's designs with attention chosen
in context, PD off and on): no prefetch; the prefetch kernel over 0 bytes (its own launch cost); bulk over the
whole O weight, over its first half, and over the O weight plus the first 16 MB of GateUp; lines over the O
weight. Each is timed by formloop's timer (CUDA graph over operand sets that exceed the L2, and eager), in one
process, with the measured memory ceiling (benchmarks/ceilings.py) for the floor. GPU only. Writes
DIR/decode_l2_window.json."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ceilings import memory_ceiling, warm_up  # noqa: E402
from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library.qwen3_layer import get_model, new_weights, parse_scenario  # noqa: E402
from formloop.library.qwen3_layer_measure import correctness, operand_sets  # noqa: E402
from formloop.library.qwen3_layer_plan import layer_floor, plan_many  # noqa: E402
from formloop.library.qwen3_layer_tune import tune_attention  # noqa: E402
from formloop.measure.timer import time_launches  # noqa: E402

T0 = time.time()
CHUNK = 32768  # bytes per bulk prefetch


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


@triton.jit
def _bulk_prefetch(base, n_bytes, CHUNK_B: tl.constexpr, PER: tl.constexpr):
    i = tl.program_id(0) * PER + tl.arange(0, PER)
    off = i.to(tl.int64) * CHUNK_B
    ok = off < n_bytes
    size = tl.minimum(n_bytes - off, CHUNK_B).to(tl.int32)
    ptr = base + tl.where(ok, off, 0)
    tl.inline_asm_elementwise("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\t"
                              "@p cp.async.bulk.prefetch.L2.global [$1], $3;\n\tmov.u32 $0, 0;\n\t}",
                              "=r,l,r,r", [ptr.to(tl.int64), ok.to(tl.int32), size], dtype=tl.int32, is_pure=False,
                              pack=1)


@triton.jit
def _line_prefetch(base, n_bytes, PER: tl.constexpr):
    i = tl.program_id(0) * PER + tl.arange(0, PER)
    off = i.to(tl.int64) * 128
    ptr = base + tl.where(off < n_bytes, off, 0)
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptr.to(tl.int64)],
                              dtype=tl.int32, is_pure=False, pack=1)


def prefetcher(kind: str, ranges: list[tuple[torch.Tensor, int]]):
    """A launch that asks the L2 for each (tensor, first n bytes) range."""
    def launch():
        for t, n in ranges:
            base = t.view(torch.uint8) if t.dtype != torch.uint8 else t
            if kind == "bulk":
                per = 64
                _bulk_prefetch[(max(1, triton.cdiv(triton.cdiv(n, CHUNK), per)),)](base, n, CHUNK_B=CHUNK, PER=per,
                                                                                  num_warps=2)
            else:
                per = 512
                _line_prefetch[(max(1, triton.cdiv(triton.cdiv(n, 128), per)),)](base, n, PER=per, num_warps=4)
    return launch


def variants(layer) -> dict:
    wo, gu = layer.w["w_o"], layer.w_gu
    n_o = wo.numel() * wo.element_size()
    return {"none": None,
            "bulk 0 B": prefetcher("bulk", [(wo, 0)]),
            "bulk O": prefetcher("bulk", [(wo, n_o)]),
            "bulk O half": prefetcher("bulk", [(wo, n_o // 2)]),
            "bulk O + 16 MB GateUp": prefetcher("bulk", [(wo, n_o), (gu, 16 << 20)]),
            "lines O": prefetcher("line", [(wo, n_o)])}


def with_prefetch(layer, pf, after: str):
    """The layer's launches with `pf` right after the step named `after`."""
    def run(x, kc, vc, out):
        for name, step in layer.steps(x, kc, vc, out):
            step()
            if pf is not None and name == after:
                pf()
        return out
    return run


def scenario_rows(p, device, chip, mem_bw: float, attn_candidates: int) -> dict:
    from formloop.library.qwen3_layer_kernels import LayerKernels

    w = new_weights(p.cfg, device, seed=0)
    p, attn_rec = tune_attention(p, device, attn_candidates, w, log=log)
    sol = layer_floor(p.cfg, p.scenario)
    row = {"scenario": p.scenario.text, "attn_design": p.parts["attn"].design, "sol": sol,
           "mem_floor_us": sol["bytes"] / mem_bw * 1e6, "variants": []}
    sets = operand_sets(p, device, chip)
    for pd in (0, 1):
        q = p.with_fusion(p.fusion.with_pdl(bool(pd)))
        layer = LayerKernels(q.cfg, q.scenario, q.fusion, {n: r.design for n, r in q.parts.items()}, w, device)
        after = "qkv_norm" if q.fusion.NF else "qkv"
        for name, pf in variants(layer).items():
            run = with_prefetch(layer, pf, after)
            check = correctness(q, run, w, device)
            rec = {"variant": name, "PD": pd, "ok": check["ok"], "out_rel_err": check["out_rel_err"]}
            if check["ok"]:
                for mode in ("graph", "eager"):
                    t = time_launches(lambda i: run(*sets[i]), len(sets), device=device, mode=mode)
                    rec[f"{mode}_us"] = t.timing.seconds * 1e6
                    rec[f"{mode}_device"] = t.timing.as_dict().get("device")
                rec["mem_floor_fraction"] = row["mem_floor_us"] / rec["graph_us"]
            row["variants"].append(rec)
            log(f"{p.scenario.text} PD={pd} {name:>22}: " + (f"{rec['graph_us']:7.1f} us graph, {rec['eager_us']:7.1f} "
                f"us eager (gpu), {100 * rec['mem_floor_fraction']:.1f} % of the memory floor" if check["ok"]
                else f"WRONG ({check})"))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--scenario", action="append", help="decode:H (repeatable); default decode:512/2048/8192")
    ap.add_argument("--attn-candidates", type=int, default=10)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("decode_l2_window: needs a CUDA GPU (the prefetches are PTX)", file=sys.stderr)
        return 2
    device, chip = "cuda", get_chip("h200")
    cfg = get_model("qwen3-8b")
    scs = [parse_scenario(s) for s in (args.scenario or ["decode:512", "decode:2048", "decode:8192"])]
    plans = plan_many(cfg, scs, workers=8, norm_fusion=True)
    warm_up()
    mem = memory_ceiling()
    log("memory ceiling (gpu, measured): " + ", ".join(f"{k} {v / 1e12:.2f} TB/s" for k, v in mem.items()))
    out = {"device": torch.cuda.get_device_name(), "memory_tb_s": {k: v / 1e12 for k, v in mem.items()},
           "chunk_bytes": CHUNK,
           "scenarios": []}
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    for p in plans:
        out["scenarios"].append(scenario_rows(p, device, chip, mem["mem_bandwidth"], args.attn_candidates))
        (dest / "decode_l2_window.json").write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
