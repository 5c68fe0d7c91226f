"""Where decode attention's time goes on the GPU: the template's pick against skeletons of its own launch,
same timer, same run, same KV sets (beyond the L2), beside cuDNN.

    PYTHONPATH=src python3 benchmarks/decode_attention_floor.py --out DIR   (GPU, ~1 minute)
    PYTHONPATH=src python3 benchmarks/decode_attention_floor.py --out DIR --dry-run   (CPU interpreter, tiny)

For each KV length L (batch 1, Hq 32, Hkv 8, d 128, bf16) the pick of attention-decode (priors, MILP) and, over the
pick's grid (programs per KV head group × KS splits, its Bn, warps and stages), three skeletons that do less:
  empty      the same grid, no work (launch and teardown);
  read       each program streams its split's K and V tiles (masked pointer loads, pipelined like the pick) and
             stores one fp32 row (Σ over its keys of k + v): the read floor of the pick's split;
  read+fold  read, then the pick's in-launch fold: partial rows stored, one acquire-release counter per program,
             the last arriver loads the KS partials, sums them and stores the result.
With --sweep, the read and read+fold skeletons also run over a grid of launches (Bn, KS, S, W at QP 4) at each
length, graph only: the fastest skeleton bounds what any kernel of this structure (split-KV, in-launch fold) can
reach, whatever its math; then the family's own kernel at the three fastest read+fold launches (each merge
and load path). Each skeleton's output is checked against torch (Σ over all keys of k + v, fp32) before it is
timed; the pick and cuDNN (SDPA, enable_gqa) are checked against float64 attention on the device. Times: formloop.measure.timer, CUDA graph
and eager, µs (gpu). Writes DIR/decode_attention_floor.json and prints the table."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__" and "--dry-run" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"   # before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from formloop.measure.timer import operand_sets_for, time_launches  # noqa: E402

LENGTHS = (512, 2048, 8192, 16384, 32768)
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


@triton.jit
def _skeleton(k_ptr, v_ptr, ws_ptr, cnt_ptr, out_ptr, L, per_split, KS, Hkv, G: tl.constexpr, QP: tl.constexpr,
              BN: tl.constexpr, D: tl.constexpr, READ: tl.constexpr, FOLD: tl.constexpr, KSP: tl.constexpr):
    pid = tl.program_id(0)
    j = tl.program_id(1)
    a = (pid // (G // QP)) % Hkv
    d = tl.arange(0, D)
    if READ:
        lo = j * per_split * BN
        hi = tl.minimum(L, lo + per_split * BN)
        cols = tl.arange(0, BN)
        acc = tl.zeros((BN, D), tl.float32)
        for start in range(lo, hi, BN):
            keys = start + cols
            ok = keys < hi
            rows = (a * L + keys).to(tl.int64) * D
            k = tl.load(k_ptr + rows[:, None] + d[None, :], mask=ok[:, None], other=0.0)
            v = tl.load(v_ptr + rows[:, None] + d[None, :], mask=ok[:, None], other=0.0)
            acc += k.to(tl.float32) + v.to(tl.float32)
        s = tl.sum(acc, 0)
        if FOLD:
            tl.store(ws_ptr + (pid * KS + j) * D + d, s)
            tl.debug_barrier()
            if tl.atomic_add(cnt_ptr + pid, 1, sem="acq_rel", scope="gpu") == KS - 1:
                jj = tl.arange(0, KSP)
                part = tl.load(ws_ptr + (pid * KS + jj[:, None]) * D + d[None, :], mask=(jj < KS)[:, None],
                               other=0.0, cache_modifier=".cg")
                tl.store(out_ptr + pid * D + d, tl.sum(part, 0))
                tl.atomic_xchg(cnt_ptr + pid, 0, sem="relaxed", scope="gpu")
        else:
            tl.store(ws_ptr + (pid * KS + j) * D + d, s)


def skeleton_launcher(kind: str, grid, L: int, per: int, cfg: dict, G: int, Hkv: int, D: int, device):
    """launch(k, v) for one skeleton over the pick's grid, and the buffer holding its result."""
    KS = grid[1]
    ws = torch.zeros(grid[0] * KS * D, device=device, dtype=torch.float32)
    cnt = torch.zeros(grid[0], device=device, dtype=torch.int32)
    out = torch.zeros(grid[0] * D, device=device, dtype=torch.float32)
    meta = dict(G=G, QP=cfg["QP"], BN=cfg["Bn"], D=D, READ=kind != "empty", FOLD=kind == "read+fold",
                KSP=triton.next_power_of_2(KS), num_warps=cfg["W"], num_stages=cfg["S"])

    def launch(k, v):
        _skeleton[grid](k, v, ws, cnt, out, L, per, KS, Hkv, **meta)
    return launch, (out if kind == "read+fold" else ws)


def check_skeleton(kind, result, k, v, grid, G, QP, Hkv, D) -> float | None:
    """Relative error of a skeleton's result against torch (None for the empty kernel)."""
    if kind == "empty":
        return None
    per_head = (k.float() + v.float()).sum(dim=2)[0]              # [Hkv, D]
    programs = torch.arange(grid[0], device=k.device)
    want_rows = per_head[(programs // (G // QP)) % Hkv]            # [programs, D]
    if kind == "read+fold":
        got = result.view(grid[0], D)
    else:
        got = result.view(grid[0], grid[1], D).sum(1)
    return float((got - want_rows).norm() / want_rows.norm().clamp_min(1e-30))


def timed(launch, n, device) -> dict:
    g = time_launches(launch, n, device=device, mode="graph")
    e = time_launches(launch, n, device=device, mode="eager")
    return {"graph_us": g.timing.seconds * 1e6, "eager_us": e.timing.seconds * 1e6,
            "device_state": dict(g.timing.device)}


def checked_plan(plan, q, kvs: list, want, device: str, eager: bool = True) -> dict:
    """A DecodePlan on NaN-poisoned output against float64 attention `want` on the first KV set, then timed over
    all of them (graph, and eager unless `eager` is False) when correct."""
    out = torch.full(tuple(q.shape), float("nan"), device=device, dtype=torch.bfloat16)
    wss = [plan.new_workspace(device) for _ in kvs]
    plan.run(q, *kvs[0], out, wss[0])
    err = float((out.double() - want).norm() / want.norm())
    r = {"rel_err": err, "ok": err <= 2e-2}
    if r["ok"]:
        def launch(i):
            plan.run(q, *kvs[i], out, wss[i])
        if eager:
            r.update(timed(launch, len(kvs), device))
        else:
            r["graph_us"] = time_launches(launch, len(kvs), device=device, mode="graph").timing.seconds * 1e6
    return r


def run_length(L: int, device: str, dims: tuple[int, int, int]) -> dict:
    from formloop.library import attention_service
    from formloop.library.attention_cases import reference
    from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan, splits_fit
    from formloop.hw.chips import get_chip

    Hq, Hkv, D = dims
    G = Hq // Hkv
    solved = attention_service.solve("attention-decode", f"1,{Hq},{Hkv},{D},{L}", chip="h200")
    cfg = {k: int(v) for k, v in solved["design"].items()}
    plan = DecodePlan.of(DecodeConfig.from_assignment(cfg), {"B": 1, "Hq": Hq, "Hkv": Hkv, "D": D, "L": L}, "bf16")
    per = -(-(-(-L // cfg["Bn"])) // cfg["KS"])
    assert splits_fit(L, cfg["Bn"], cfg["KS"])
    grid = plan.grid
    kv_bytes = 2 * Hkv * L * D * 2
    n = operand_sets_for(kv_bytes, get_chip("h200").l2_bytes) if device == "cuda" else 2
    gen = torch.Generator(device=device).manual_seed(L)
    q = torch.randn(1, Hq, D, device=device, generator=gen).to(torch.bfloat16)
    kvs = [tuple(torch.randn(1, Hkv, L, D, device=device, generator=gen).to(torch.bfloat16) for _ in range(2))
           for _ in range(n)]
    row = {"L": L, "design": cfg, "grid": list(grid), "model_us": solved["objective_us"], "kv_sets": n,
           "kv_bytes": kv_bytes, "rows": {}}
    for kind in ("empty", "read", "read+fold"):
        launch, result = skeleton_launcher(kind, grid, L, per, cfg, G, Hkv, D, device)
        result.fill_(float("nan"))
        launch(*kvs[0])
        err = check_skeleton(kind, result, *kvs[0], grid, G, cfg["QP"], Hkv, D)
        r = {"rel_err": err, "ok": err is None or err <= 1e-4}
        if r["ok"]:
            r.update(timed(lambda i, f=launch: f(*kvs[i]), n, device))
        row["rows"][kind] = r
    want = reference(q[:, :, None, :], *kvs[0], dtype=torch.float64)[:, :, 0, :]
    row["rows"]["pick"] = checked_plan(plan, q, kvs, want, device)
    if device == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q4, o4 = q[:, :, None, :], torch.full((1, Hq, 1, D), float("nan"), device=device, dtype=torch.bfloat16)

        def cudnn(i):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o4.copy_(torch.nn.functional.scaled_dot_product_attention(q4, *kvs[i], enable_gqa=True))
        cudnn(0)
        err = float((o4[:, :, 0].double() - want).norm() / want.norm())
        r = {"rel_err": err, "ok": err <= 2e-2}
        if r["ok"]:
            r.update(timed(cudnn, n, device))
        row["rows"]["cudnn"] = r
    return row


SWEEP = {"Bn": (32, 64, 128), "KS": (8, 16, 32, 64), "S": (2, 3, 6), "W": (4, 8)}


def sweep_length(L: int, device: str, dims: tuple[int, int, int]) -> dict:
    """The read and read+fold skeletons over the SWEEP grid (QP 4), each checked, then graph-timed."""
    import itertools

    from formloop.hw.chips import get_chip
    from formloop.library.attention_decode_kernel import splits_fit

    Hq, Hkv, D = dims
    G = Hq // Hkv
    QP = min(4, G)
    n = operand_sets_for(2 * Hkv * L * D * 2, get_chip("h200").l2_bytes) if device == "cuda" else 2
    gen = torch.Generator(device=device).manual_seed(L + 1)
    kvs = [tuple(torch.randn(1, Hkv, L, D, device=device, generator=gen).to(torch.bfloat16) for _ in range(2))
           for _ in range(n)]
    rows = []
    for Bn, KS, S, W in itertools.product(*SWEEP.values()):
        if not splits_fit(L, Bn, KS):  # fewer than half the splits get a tile (the template's C4)
            continue
        per = -(-(-(-L // Bn)) // KS)
        cfg = {"Bn": Bn, "KS": KS, "QP": QP, "S": S, "W": W}
        grid = (Hkv * (G // QP), KS)
        for kind in ("read", "read+fold"):
            launch, result = skeleton_launcher(kind, grid, L, per, cfg, G, Hkv, D, device)
            result.fill_(float("nan"))
            launch(*kvs[0])
            err = check_skeleton(kind, result, *kvs[0], grid, G, QP, Hkv, D)
            row = {"kind": kind, **cfg, "rel_err": err, "ok": err <= 1e-4}
            if row["ok"]:
                t = time_launches(lambda i, f=launch: f(*kvs[i]), n, device=device, mode="graph")
                row["graph_us"] = t.timing.seconds * 1e6
            rows.append(row)
    best = {k: min((r for r in rows if r["kind"] == k and r.get("graph_us")), key=lambda r: r["graph_us"],
                   default=None) for k in ("read", "read+fold")}
    kernels = kernel_at_grids(L, device, dims, rows, kvs) if device == "cuda" else []
    return {"L": L, "kv_sets": n, "rows": rows, "best": best, "kernels": kernels,
            "wrong": sum(not r["ok"] for r in rows) + sum(not r["ok"] for r in kernels)}


def kernel_at_grids(L: int, device: str, dims, rows: list, kvs: list, top: int = 3) -> list[dict]:
    """The decode family's own kernel at the `top` fastest read+fold launches of the sweep (QP 4), each merge
    MG 1 / 0 and load path TM 0 / 1: checked against float64 attention, then graph-timed on the same KV sets."""
    from formloop.library.attention_cases import reference
    from formloop.library.attention_decode_kernel import DecodeConfig, DecodePlan

    Hq, Hkv, D = dims
    folds = sorted((r for r in rows if r["kind"] == "read+fold" and r.get("graph_us")), key=lambda r: r["graph_us"])
    gen = torch.Generator(device=device).manual_seed(L + 2)
    q = torch.randn(1, Hq, D, device=device, generator=gen).to(torch.bfloat16)
    want = reference(q[:, :, None, :], *kvs[0], dtype=torch.float64)[:, :, 0, :]
    out = []
    for r in folds[:top]:
        for mg, tm in ((1, 0), (1, 1), (0, 0), (0, 1)):
            d = {"Bn": r["Bn"], "KS": r["KS"], "QP": r["QP"], "S": r["S"], "W": r["W"], "MG": mg, "TM": tm}
            row = {"design": d, "skeleton_us": r["graph_us"]}
            try:
                plan = DecodePlan.of(DecodeConfig(**d), {"B": 1, "Hq": Hq, "Hkv": Hkv, "D": D, "L": L}, "bf16")
                row.update(checked_plan(plan, q, kvs, want, device, eager=False))
            except Exception as exc:  # noqa: BLE001 (a design that fails is a finding)
                # a launch past the chip's shared memory is outside the family (the template's wall C1), not wrong
                fits = type(exc).__name__ != "OutOfResources"
                row.update(ok=not fits, fits=fits, error=f"{type(exc).__name__}: {str(exc)[:160]}")
            out.append(row)
            log(f"L={L} kernel {d}: " + (f"{row['graph_us']:.1f} us (gpu, graph)" if row.get("graph_us") else
                                         row.get("error", f"WRONG rel err {row.get('rel_err')}"))
                + f"; its read+fold skeleton {r['graph_us']:.1f} us")
    return out


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lengths", help="comma-separated KV lengths (default 512,2048,8192,16384,32768)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, tiny heads (code path only)")
    ap.add_argument("--sweep", help="comma-separated lengths at which to sweep the skeletons over launches")
    args = ap.parse_args(argv)
    device = "cpu" if args.dry_run else "cuda"
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else ([96] if args.dry_run else LENGTHS)
    dims = (32, 8, 128) if not args.dry_run else (8, 2, 16)
    res = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter, dry run)",
           "torch": torch.__version__, "triton": triton.__version__, "unit": "us (gpu)", "lengths": []}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cols = ("empty", "read", "read+fold", "pick", "cudnn")
    print("| L | design | " + " | ".join(f"{c} g / e" for c in cols) + " | pick / read+fold (graph) |")
    print("| --- " * (len(cols) + 3) + "|")
    for L in lengths:
        row = run_length(L, device, dims)
        res["lengths"].append(row)
        (out / "decode_attention_floor.json").write_text(json.dumps(res, indent=1, default=str))
        cells = []
        for c in cols:
            r = row["rows"].get(c)
            cells.append("—" if not r else ("WRONG" if not r["ok"] else
                                            f"{r.get('graph_us', float('nan')):.1f} / {r.get('eager_us', 0):.1f}"))
        ratio = (row["rows"]["pick"].get("graph_us", float("nan")) /
                 row["rows"]["read+fold"].get("graph_us", float("nan")))
        print(f"| {L} | {row['design']} | " + " | ".join(cells) + f" | {ratio:.2f} |", flush=True)
    for L in ([int(x) for x in args.sweep.split(",")] if args.sweep else []):
        sw = sweep_length(L, device, dims)
        res.setdefault("sweep", []).append(sw)
        (out / "decode_attention_floor.json").write_text(json.dumps(res, indent=1, default=str))
        for kind, b in sw["best"].items():
            log(f"sweep L={L}: fastest {kind} skeleton of {sum(r['kind'] == kind for r in sw['rows'])}: "
                + (f"{b['graph_us']:.1f} us (gpu, graph) at Bn {b['Bn']} KS {b['KS']} S {b['S']} W {b['W']}"
                   if b else "none timed") + f"; wrong {sw['wrong']}")
    bad = [(r["L"], k) for r in res["lengths"] for k, v in r["rows"].items() if not v["ok"]]
    bad += [(sw["L"], r["kind"], r["Bn"], r["KS"]) for sw in res.get("sweep", []) for r in sw["rows"] if not r["ok"]]
    bad += [(sw["L"], r["design"]) for sw in res.get("sweep", []) for r in sw["kernels"] if not r["ok"]]
    if bad:
        log(f"WRONG: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
