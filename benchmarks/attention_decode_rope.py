"""Decode attention with the rope inside (the Qwen3 layer's RA) against the rope kernel + plain attention,
same designs, same timer, same run; checked first where the copy engine reads a stale cache row.

    PYTHONPATH=src python3 benchmarks/attention_decode_rope.py --out DIR             (GPU, about a minute)
    PYTHONPATH=src python3 benchmarks/attention_decode_rope.py --out DIR --dry-run   (CPU interpreter, tiny)

Qwen3-8B's attention (batch 1, Hq 32, Hkv 8, d 128, bf16, RMSNorm eps 1e-6, RoPE theta 1e6). A decode step
attends over L keys: the cache's L − 1 and the new token's, at position L − 1. For each L and design (the
attention-decode MILP pick under the priors, and fixed copy-engine and pointer designs):
  1. check, both paths, on fresh random raw q / new k / new v (one QKV row) and caches holding the history with
     the row L − 1 set to NaN (a stale row: its bits are whatever a finished sequence left): the output against
     float64 (HF q/k RMSNorm + rotate-half RoPE, softmax attention over the history and the new key), the new
     cache row against the rotated key (bf16 rounding), the value row exact, no NaN anywhere;
       separate  qk-norm-rope-kv (its MILP design) writes q and the new K/V row, then attention-decode reads them;
       fused     attention-decode with `rope`: one launch;
  2. time both (formloop.measure.timer, CUDA graph and eager, KV cache copies that together exceed the L2).
Lengths: the layer's decode steps (513, 2049, 4097, 8193) and ones whose owner split ends in a partial tile that
holds the stale row (2048, 4096, 777). Writes DIR/attention_decode_rope.json and prints the table (us, gpu)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__" and "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"   # before triton is imported

import torch  # noqa: E402

from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import attention_service, qk_rope  # noqa: E402
from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan  # noqa: E402
from formloop.library.attention_decode_newtoken import NewToken  # noqa: E402
from formloop.library.qk_rope_kernel import QkRopeConfig, QkRopeProgram, reference_hf, rope_tables  # noqa: E402
from formloop.measure.timer import operand_sets_for, time_launches  # noqa: E402

LENGTHS = (513, 2049, 4097, 8193, 2048, 4096, 777)
FIXED = (dict(Bn=64, KS=12, QP=4, S=4, W=8, MG=2, TM=1), dict(Bn=128, KS=16, QP=4, S=3, W=8, MG=2, TM=1),
         dict(Bn=256, KS=12, QP=4, S=2, W=8, MG=2, TM=1), dict(Bn=64, KS=8, QP=4, S=3, W=4, MG=1, TM=1),
         dict(Bn=64, KS=16, QP=4, S=3, W=4, MG=0, TM=0))
EPS, THETA, TOL = 1e-6, 1e6, 2e-2
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def new_case(Hq, Hkv, D, L, device, gen, copies: int):
    """The QKV row (raw q, new k, v), the norms' weights, and `copies` caches [1, Hkv, L, D] with row L − 1 NaN."""
    qkv = torch.randn(1, (Hq + 2 * Hkv) * D, generator=gen).to(torch.bfloat16).to(device)
    w = [(torch.rand(D, generator=gen) + 0.5).to(torch.bfloat16).to(device) for _ in range(2)]
    caches = []
    for i in range(copies):
        kc, vc = (torch.randn(1, Hkv, L, D, generator=gen).to(torch.bfloat16).to(device) for _ in range(2))
        kc[:, :, L - 1] = float("nan")
        vc[:, :, L - 1] = float("nan")
        caches.append((kc, vc))
    return qkv, w, caches


def reference(q, k_new, v_new, qw, kw, kc, vc, L):
    """float64 on the device: (output [1, Hq, D], rotated new key [1, Hkv, D])."""
    Hq, D = q.shape[1], q.shape[2]
    rq, rk, _ = reference_hf(q, k_new, v_new, qw, kw, torch.full((1,), L - 1), THETA, EPS)
    g = Hq // kc.shape[1]
    keys = torch.cat([kc[:, :, : L - 1].double(), rk[:, :, None]], 2).repeat_interleave(g, 1)
    vals = torch.cat([vc[:, :, : L - 1].double(), v_new.double()[:, :, None]], 2).repeat_interleave(g, 1)
    w = torch.softmax(torch.einsum("bhd,bhld->bhl", rq, keys) / math.sqrt(D), -1)
    return torch.einsum("bhl,bhld->bhd", w, vals), rk


def paths(plan_sep: DecodePlan, plan_fused: DecodePlan, rope: QkRopeProgram, qkv, w, cos, sin, device):
    """(separate(kc, vc, out), fused(kc, vc, out)): the two ways to compute one step over a cache pair."""
    Hq, Hkv, D = plan_sep.Hq, plan_sep.Hkv, plan_sep.D
    q = qkv[:, : Hq * D].view(1, Hq, D)
    k_new = qkv[:, Hq * D: (Hq + Hkv) * D].view(1, Hkv, D)
    v_new = qkv[:, (Hq + Hkv) * D:].view(1, Hkv, D)
    L = plan_sep.L
    q_rot = torch.empty(1, Hq, D, dtype=torch.bfloat16, device=device)
    pos = torch.full((1,), L - 1, dtype=torch.int32, device=device)
    ws_sep, ws_fused = plan_sep.new_workspace(device), plan_fused.new_workspace(device)
    new = NewToken(k_new, v_new, w[0], w[1], cos, sin)

    def separate(kc, vc, out):
        rope(q, k_new, v_new, w[0], w[1], cos, sin, pos, pos, kc[0], vc[0], eps=EPS, heads_first=True, q_out=q_rot)
        plan_sep.run(q_rot, kc, vc, out, ws_sep)

    def fused(kc, vc, out):
        plan_fused.run(q, kc, vc, out, ws_fused, new=new)

    return (q, k_new, v_new), separate, fused


def check(fn, raw, w, caches, L, device) -> dict:
    """Run `fn` on the first cache pair (row L − 1 NaN) and compare with float64."""
    kc, vc = caches[0][0].clone(), caches[0][1].clone()
    q, k_new, v_new = raw
    out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16, device=device)
    want, rk = reference(q, k_new, v_new, w[0], w[1], kc, vc, L)
    history = (kc[:, :, : L - 1].clone(), vc[:, :, : L - 1].clone())
    fn(kc, vc, out)
    if device == "cuda":
        torch.cuda.synchronize()
    err = float((out.double() - want).abs().max())
    k_err = float((kc[:, :, L - 1].double() - rk).abs().max())
    ok = (not torch.isnan(out).any().item()) and err <= TOL and k_err <= TOL * max(1.0, float(rk.abs().max())) \
        and torch.equal(vc[:, :, L - 1], v_new) and torch.equal(kc[:, :, : L - 1], history[0]) \
        and torch.equal(vc[:, :, : L - 1], history[1])
    return {"ok": bool(ok), "max_err": err, "new_k_max_err": k_err, "tolerance": TOL, "reference": "float64"}


def run(out_dir: Path, lengths, dry: bool) -> int:
    device = "cpu" if dry else "cuda"
    Hq, Hkv, D = (4, 2, 64) if dry else (32, 8, 128)
    chip = get_chip("h200")
    rope = QkRopeProgram(QkRopeConfig.from_assignment(qk_rope.solved_design(1, Hq, Hkv, D)), "bf16")
    rows, ok_all = [], True
    for L in lengths:
        gen = torch.Generator().manual_seed(L)
        n = 2 if dry else operand_sets_for(2 * Hkv * L * D * 2, chip.l2_bytes)
        qkv, w, caches = new_case(Hq, Hkv, D, L, device, gen, n)
        cos, sin = rope_tables(L, D, THETA, device=device)
        pick = attention_service.solve("attention-decode", f"1,{Hq},{Hkv},{D},{L}")["design"]
        designs = [{k: int(v) for k, v in pick.items()}] + [d for d in FIXED if d != pick]
        for d in designs[:2] if dry else designs:
            if dry:
                d = {**d, "TM": 0, "Bn": 16, "S": 1}
            row = {"L": L, "design": d, "pick": d == designs[0]}
            try:
                cfg = DecodeConfig.from_assignment(d)
                sep = DecodePlan(cfg, 1, Hq, Hkv, D, L, "bf16")
                fus = DecodePlan(cfg, 1, Hq, Hkv, D, L, "bf16", rope=True, rope_eps=EPS)
            except Exception as exc:  # noqa: BLE001 (a design the length does not admit: recorded, skipped)
                rows.append({**row, "skipped": f"{type(exc).__name__}: {str(exc)[:160]}"})
                continue
            raw, separate, fused = paths(sep, fus, rope, qkv, w, cos, sin, device)
            outs = [torch.empty(1, Hq, D, dtype=torch.bfloat16, device=device) for _ in caches]
            for name, fn in (("separate", separate), ("fused", fused)):
                row[name] = {"check": check(fn, raw, w, caches, L, device)}
                ok_all = ok_all and row[name]["check"]["ok"]
                if row[name]["check"]["ok"] and not dry:
                    launch = lambda i, fn=fn: fn(*caches[i], outs[i])  # noqa: E731
                    for mode in ("graph", "eager"):
                        t = time_launches(launch, len(caches), device=device, mode=mode)
                        row[name][f"{mode}_us"] = t.timing.seconds * 1e6
                        row[name][f"{mode}_timing"] = t.timing.as_dict()
            s, f = row["separate"], row["fused"]
            if "graph_us" in s and "graph_us" in f:
                row["saving_graph_us"] = s["graph_us"] - f["graph_us"]
                row["saving_eager_us"] = s["eager_us"] - f["eager_us"]
            log(f"L={L} {d}{' (pick)' if row['pick'] else ''}: separate {s['check']['ok']} "
                f"{s.get('graph_us', float('nan')):.1f}/{s.get('eager_us', float('nan')):.1f} us, fused "
                f"{f['check']['ok']} {f.get('graph_us', float('nan')):.1f}/{f.get('eager_us', float('nan')):.1f} us "
                f"(graph/eager, gpu); fused max err {f['check']['max_err']:.2e}")
            rows.append(row)
    versions = {"torch": torch.__version__}
    if not dry:
        versions["device"] = torch.cuda.get_device_name()
    (out_dir / "attention_decode_rope.json").write_text(json.dumps({"rows": rows, "versions": versions,
                                                                   "tier": "interpreter" if dry else "gpu"},
                                                                  indent=1, default=str))
    print("L, design, separate g/e, fused g/e, saving g/e (us, gpu; both checked vs float64 first)")
    for r in rows:
        if "fused" in r and "graph_us" in r["fused"]:
            s, f = r["separate"], r["fused"]
            print(f"{r['L']:>6} {'Bn{Bn} KS{KS} QP{QP} S{S} W{W} MG{MG} TM{TM}'.format(**r['design']):<30} "
                  f"{s['graph_us']:7.1f} / {s['eager_us']:6.1f}  {f['graph_us']:7.1f} / {f['eager_us']:6.1f}  "
                  f"{r['saving_graph_us']:+5.1f} / {r['saving_eager_us']:+5.1f}{'  pick' if r['pick'] else ''}")
    return 0 if ok_all else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true", help="the Triton interpreter, tiny heads, two lengths")
    ap.add_argument("--lengths", help="comma-separated L (keys including the new one)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else ((40, 33) if args.dry_run else LENGTHS)
    return run(out, lengths, args.dry_run or not torch.cuda.is_available())


if __name__ == "__main__":
    sys.exit(main())
