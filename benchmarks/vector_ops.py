"""Row-wise, elementwise and qk-norm-rope-kv kernels (formloop.library rowwise / elementwise / qk_rope) vs
torch eager and torch.compile, at Qwen3-8B and KernelBench-like sizes, on one GPU, in one command:

    PYTHONPATH=src python3 benchmarks/vector_ops.py --out $OUT                 # H200, about 2-3 minutes
    PYTHONPATH=src python3 benchmarks/vector_ops.py --dry-run --out /tmp/v    # CPU: interpreter, tiny sizes
    PYTHONPATH=src python3 benchmarks/vector_ops.py --set --menu --no-compile --out $OUT   # H200, ~2-3 min

--set runs the problem set's single vector ops instead (problems/level1, fp32 or --set-dtype bf16, KernelBench
sizes: relu, silu, mish, gelu, hardtanh, leaky_relu, residual_add, row_sum, row_max, softmax_rows, log_softmax,
logsumexp, argmax_dim, batch_norm, group_norm, instance_norm, max_pool2d). The vecops five, old designs (the
2026-12-01 picks) vs the current pick beside torch.compile:
    PYTHONPATH=src python3 benchmarks/vector_ops.py --set --menu --menu-budget-s 900 --budget-s 900 \
        --cases argmax_dim,batch_norm,group_norm,instance_norm,max_pool2d --out $OUT        # H200, ~5-8 min --menu also times the model's top designs per case (elementwise: the k best of
each layout, 2D and flat, and the pick's other eviction hint; rowwise: the best per tile width (2k)
and per warp count from 4 warps; vecops
colreduce: the k best per run width RP), each checked first, so one call shows the pick vs the best
measured design vs torch.

Per case: the MILP's design for the shape (template priors), then correctness first (fresh random inputs,
NaN-poisoned outputs, error against float64 torch; the torch baselines checked the same way), then
timing by formloop.measure.timer: ours eager and CUDA graph, torch eager and eager + graph, torch.compile
(default mode) and + graph, all in this process over operand sets spanning 3x the L2. Reports µs (gpu),
the model's µs, speedups, and the fraction of copy bandwidth the SOL bytes reach (bytes / time /
measured copy bandwidth). Writes vector_ops.json under --out; prints one line per case."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--dry-run", action="store_true", help="CPU: Triton interpreter, tiny sizes, correctness only")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    p.add_argument("--budget-s", type=float, default=150.0, help="skip torch.compile after this many seconds")
    p.add_argument("--cases", default="", help="comma-separated case-name prefixes (default: all)")
    p.add_argument("--set", action="store_true", help="the problem set's single vector ops (KernelBench sizes)")
    p.add_argument("--menu", action="store_true", help="also time the model's top designs per case")
    p.add_argument("--set-dtype", choices=("fp32", "bf16"), default="fp32",
                   help="--set: the elementwise and row-wise cases' dtype (default fp32)")
    p.add_argument("--menu-k", type=int, default=2, help="designs per layout group in the menu (default 2)")
    p.add_argument("--menu-budget-s", type=float, default=160.0, help="no new menu after this many seconds")
    return p.parse_args(argv)


ARGS = _args(sys.argv[1:]) if __name__ == "__main__" else None
if ARGS is not None and ARGS.dry_run:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from formloop.hw.chips import get_chip  # noqa: E402
from formloop.library import elementwise as ew  # noqa: E402
from formloop.library import qk_rope, rowwise, vecops  # noqa: E402
from formloop.library.elementwise_kernel import ElementwiseProgram, EwConfig  # noqa: E402
from formloop.library.qk_rope_kernel import QkRopeConfig, QkRopeProgram, reference_hf, rope_tables  # noqa: E402
from formloop.library.rowwise_kernel import TORCH_DTYPES, RowConfig, RowwiseProgram, group_norm  # noqa: E402
from formloop.library.rowwise_reference import reference as row_reference  # noqa: E402
from formloop.library.vecops_kernel import col_argreduce  # noqa: E402
from formloop.measure.timer import operand_sets_for, time_launches  # noqa: E402
from formloop.solve import ranked_designs  # noqa: E402

EPS = 1e-6
TOL = {"fp32": 1e-5, "bf16": 1e-2, "fp16": 2e-3}
QWEN = dict(Hq=32, Hkv=8, D=128, hidden=4096)


def hf_rmsnorm(x, w, eps=EPS):
    """Qwen3RMSNorm.forward as HF writes it (what eager runs)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def hf_add_rmsnorm(x, r, w):
    r = x + r
    return hf_rmsnorm(r, w), r


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


def hf_qk_rope_kv(q, k, v, qw, kw, cos, sin, pos, slots, kc, vc):
    """Qwen3Attention's q_norm/k_norm, apply_rotary_pos_emb and the cache update, in the model dtype."""
    c = torch.cat((cos, cos), -1)[pos][:, None, :].to(q.dtype)
    s = torch.cat((sin, sin), -1)[pos][:, None, :].to(q.dtype)
    qn, kn = hf_rmsnorm(q, qw), hf_rmsnorm(k, kw)
    kc.view(-1, *kc.shape[-2:])[slots] = kn * c + rotate_half(kn) * s
    vc.view(-1, *vc.shape[-2:])[slots] = v
    return qn * c + rotate_half(qn) * s


class Case:
    """One benchmark case: `make(gen)` draws an operand set (a dict); `ours(ops)`/`torch(ops)` run on one;
    `ref(ops)` is the float64 answer; `got(ops, result)` the tensors compared with it (in order)."""

    def __init__(self, name, family, dtype, sol_bytes, make, ours, torch_fn, ref, got, model_us, design, menu=None):
        self.name, self.family, self.dtype, self.sol_bytes = name, family, dtype, sol_bytes
        self.make, self.ours, self.torch_fn, self.ref, self.got = make, ours, torch_fn, ref, got
        self.model_us, self.design = model_us, design
        self.menu = menu  # (k) -> [(design, model µs, ours fn)]: the model's top designs, for --menu


def _menu(t, wl, k, build, group=None, distinct=(), extra=()):
    """The model's top designs of template `t` at workload `wl`: (design, model µs, build(design)); `group` a
    decision name or several (the k best per value of each, merged)."""
    f = t.formulate(wl, get_chip("h200"))
    ranked = []
    for g in (group if isinstance(group, tuple) else (group,)):
        have = [r for r, _ in ranked]
        ranked += [(d, c) for d, c in ranked_designs(f, k, group=g, distinct=distinct) if d not in have]
    ranked.sort(key=lambda dc: dc[1])
    seen = [d for d, _ in ranked]
    for d in extra:  # variants the ranking ties away (e.g. the eviction hint of the pick)
        if d not in seen and not t.check(d, wl, get_chip("h200")):
            ranked.append((d, _model(t, wl, d)))
    return [(d, c, build(d)) for d, c in ranked]


def _model(t, wl, design):
    chip = get_chip("h200")
    return float(t.evaluate_terms(design, t.bind(wl, chip))["cost"])


def row_case(op, R, C, dtype, device, small, name=""):
    if small:
        R, C = min(R, 5), min(C, 100)
    td = TORCH_DTYPES[dtype]
    d = rowwise.solved_design(op, R, C, dtype) if not small else {"BC": 32, "RP": 2, "W": 1, "S": 2}
    prog = RowwiseProgram(op, RowConfig.from_assignment(d))

    def make(gen):
        ops = {"x": torch.randn(R, C, generator=gen, device=device).to(td),
               "w": (torch.rand(C, generator=gen, device=device) + 0.5).to(td),
               "b": torch.randn(C, generator=gen, device=device).to(td)}
        ops["r"] = torch.randn(R, C, generator=gen, device=device).to(td) if op == "rmsnorm-residual" else ops["x"]
        return ops

    def run(p):
        return lambda o: p(o["x"], weight=o["w"], bias=o["b"], residual=o["r"], eps=EPS)

    ours = run(prog)

    eager = {"rmsnorm": lambda o: hf_rmsnorm(o["x"], o["w"]),
             "rmsnorm-residual": lambda o: hf_add_rmsnorm(o["x"], o["r"], o["w"]),
             "layernorm": lambda o: F.layer_norm(o["x"], (C,), o["w"], o["b"], EPS),
             "softmax": lambda o: torch.softmax(o["x"], -1), "log-softmax": lambda o: torch.log_softmax(o["x"], -1),
             "sum": lambda o: o["x"].sum(-1), "mean": lambda o: o["x"].mean(-1),
             "max": lambda o: o["x"].amax(-1), "argmax": lambda o: o["x"].argmax(-1),
             "logsumexp": lambda o: torch.logsumexp(o["x"], -1)}[op]

    def ref(o):  # float64 on the operands' device (the GPU for the large problem-set shapes)
        out = row_reference(op, o["x"], o["w"], o["b"], o["r"], EPS)
        return list(out) if isinstance(out, tuple) else [out]

    def got(o, res):
        return list(res) if isinstance(res, tuple) else [res]

    t = rowwise.make(op, dtype)
    wl = rowwise.workload(R, C, dtype)

    def menu(k):  # the best per tile width (2k of them), then the best per warp count from 4 warps up
        build = lambda a: run(RowwiseProgram(op, RowConfig.from_assignment(a)))  # noqa: E731
        widths = _menu(t, wl, 1, build, group="BC", distinct=("BC", "RP", "W"))[:2 * k]
        warps = [m for m in _menu(t, wl, 1, build, group="W", distinct=("BC", "RP", "W")) if m[0]["W"] >= 4]
        return widths + [m for m in warps if m[0] not in [w[0] for w in widths]]
    return Case(f"{name or op}-{R}x{C}-{dtype}", "rowwise", dtype, rowwise.sol_bytes(op, R, C, td.itemsize), make,
                ours, eager, ref, got, _model(t, wl, d), d, menu)


def ew_case(name, chain, M, N, dtype, device, small, eager, small_design=None):
    if small:
        M, N = min(M, 6), min(N, 70)
    td = TORCH_DTYPES[dtype]
    d = ew.solved_design(chain, M, N, dtype) if not small else (small_design or {"BN": 32, "BM": 2, "W": 1})
    d = {"F": 0, "BF": 1024, "H": 0, **d}  # a 2D design names the flat walk's decisions at their canonical values
    prog = ElementwiseProgram(chain, EwConfig.from_assignment(d), dtype)

    def make(gen):
        x = torch.randn(M, N, generator=gen, device=device).to(td)
        return {"x": x, **prog.new_inputs(x, gen)}

    t = ew.elementwise(chain, dtype)
    facts = ew.chain_facts(prog.chain, default_dtype=dtype)
    nbytes = int(M * N * (2 * td.itemsize + facts.tile_bytes) + N * facts.vec_row_bytes)
    wl = ew.workload(M, N, dtype)

    def run(p):
        return lambda o: p(o["x"], {k: v for k, v in o.items() if k != "x"})

    def build(a):
        return run(ElementwiseProgram(chain, EwConfig.from_assignment(a), dtype))

    hinted = [{**d, "H": 1 - d["H"]}] if d.get("F") else []
    menu = lambda k: _menu(t, wl, k, build, group="F", distinct=("F", "BF", "BM", "BN", "W"), extra=hinted)  # noqa
    return Case(f"{name}-{M}x{N}-{dtype}", "elementwise", dtype, nbytes, make, run(prog), eager,
                lambda o: [prog.reference(o["x"], {k: v for k, v in o.items() if k != "x"})],
                lambda o, res: [res], _model(t, wl, d), d, menu)


def qk_case(T, L, dtype, device, small):
    Hq, Hkv, D = QWEN["Hq"], QWEN["Hkv"], QWEN["D"]
    if small:
        T, L, Hq, Hkv = min(T, 3), min(L, 8), 4, 2
    td = TORCH_DTYPES[dtype]
    d = qk_rope.solved_design(T, Hq, Hkv, D, dtype) if not small else {"HP": 2, "W": 1}
    prog = QkRopeProgram(QkRopeConfig.from_assignment(d), dtype)
    cos, sin = rope_tables(L + T, D, 1e6, device)

    def make(gen):
        qkv = torch.randn(T, (Hq + 2 * Hkv) * D, generator=gen, device=device).to(td)
        return {"q": qkv[:, : Hq * D].view(T, Hq, D), "k": qkv[:, Hq * D: (Hq + Hkv) * D].view(T, Hkv, D),
                "v": qkv[:, (Hq + Hkv) * D:].view(T, Hkv, D), "qw": (torch.rand(D, device=device) + 0.5).to(td),
                "kw": (torch.rand(D, device=device) + 0.5).to(td),
                "pos": torch.arange(L - T, L, device=device) if T < L else torch.arange(T, device=device),
                "kc": torch.zeros(1, L + T, Hkv, D, device=device, dtype=td),
                "vc": torch.zeros(1, L + T, Hkv, D, device=device, dtype=td)}

    def slots(o):
        return o["pos"]

    def ours(o):
        return prog(o["q"], o["k"], o["v"], o["qw"], o["kw"], cos, sin, o["pos"], slots(o), o["kc"], o["vc"])

    def eager(o):
        return hf_qk_rope_kv(o["q"], o["k"], o["v"], o["qw"], o["kw"], cos, sin, o["pos"], slots(o), o["kc"], o["vc"])

    def ref(o):
        c = {k: v.cpu() for k, v in o.items()}
        rq, rk, rv = reference_hf(c["q"], c["k"], c["v"], c["qw"], c["kw"], c["pos"])
        return [rq, rk, rv]

    def got(o, res):
        s = slots(o)
        return [res, o["kc"][0][s], o["vc"][0][s]]

    t = qk_rope.qk_norm_rope_kv(dtype)
    return Case(f"qk-norm-rope-kv-T{T}-{dtype}", "qk_rope", dtype, qk_rope.sol_bytes(T, Hq, Hkv, D, td.itemsize),
                make, ours, eager, ref, got, _model(t, qk_rope.workload(T, Hq, Hkv, D, dtype), d), d)


def gn_case(N, C, HW, G, device, small):
    if small:
        N, C, HW, G = 2, 8, 20, 4
    d = rowwise.solved_design("groupnorm", N * G, C // G * HW, "fp32") if not small else {"BC": 32, "RP": 2, "W": 1,
                                                                                         "S": 2}
    cfg = RowConfig.from_assignment(d)

    def make(gen):
        return {"x": torch.randn(N, C, HW, generator=gen, device=device),
                "w": torch.rand(C, generator=gen, device=device) + 0.5,
                "b": torch.randn(C, generator=gen, device=device)}

    t = rowwise.make("groupnorm", "fp32")
    return Case(f"groupnorm-{N}x{C}x{HW}-G{G}-fp32", "rowwise", "fp32", 2 * N * C * HW * 4 + 2 * C * 4,
                make, lambda o: group_norm(o["x"], G, o["w"], o["b"], 1e-5, config=cfg),
                lambda o: F.group_norm(o["x"], G, o["w"], o["b"], 1e-5),
                lambda o: [F.group_norm(o["x"].cpu().double(), G, o["w"].cpu().double(), o["b"].cpu().double(), 1e-5)],
                lambda o, res: [res], _model(t, rowwise.workload(N * G, C // G * HW, "fp32"), d), d)


def colarg_case(B, D1, D2, device, small):
    """torch.argmax(x, dim=1) of x [B, D1, D2] (argmax_dim): vecops-colreduce."""
    if small:
        B, D1, D2 = 2, 40, 37
    R, nbytes = B * D2, B * D1 * D2 * 4 + B * D2 * 8
    t, wl = vecops.make("colreduce"), vecops.workload(R, D1, nbytes)
    d = vecops.solved_design("colreduce", R, D1, nbytes) if not small else {"BC": 16, "RP": 32, "W": 1, "SPLIT": 1}

    def run(a):
        return lambda o: col_argreduce("argmax", o["x"], 1, config=a)

    def menu(k):   # the 2026-12-01 pick first, then the k best per run width RP
        old = OLD_VECOPS["argmax_dim"] if not small else {"BC": 16, "RP": 8, "W": 1, "SPLIT": 1, "GL": 0}
        extra = LATER["argmax_dim"] if not small else ()
        return [(old, _model(t, wl, old), run(old))] + [m for m in _menu(t, wl, k, run, group="RP", extra=extra,
                                                                         distinct=("BC", "RP", "W")) if m[0] != old]
    return Case(f"argmax_dim-{B}x{D1}x{D2}-fp32", "vecops", "fp32", nbytes,
                lambda gen: {"x": torch.randn(B, D1, D2, generator=gen, device=device)}, run(d),
                lambda o: torch.argmax(o["x"], 1), lambda o: [torch.argmax(o["x"].double(), 1)],
                lambda o, res: [res], _model(t, wl, d), d, menu)


# the vecops picks of the 2026-12-01 round-4 campaign (the campaign store's designs; vecops.solved_design at 05caed0
# gives the same; measured on the H200, CUDA graph: batch_norm 4.52 ms, group_norm 7.05 ms, instance_norm 7.09 ms,
# max_pool2d 0.133 ms, argmax_dim 2.97 ms): timed beside the current pick by --menu
OLD_VECOPS = {"batch_norm": {"BC": 128, "RP": 8, "W": 1, "SPLIT": 4, "GL": 0},
              "group_norm": {"BC": 128, "RP": 8, "W": 1, "SPLIT": 16, "GL": 0},
              "instance_norm": {"BC": 128, "RP": 8, "W": 1, "SPLIT": 16, "GL": 0},
              "max_pool2d": {"BC": 64, "RP": 8, "W": 1, "SPLIT": 1, "GL": 0},
              "argmax_dim": {"BC": 16, "RP": 32, "W": 1, "SPLIT": 1, "GL": 0}}
# picks of later models, measured 2026-12-01 (benchmarks/vector_ops.py --set --menu): kept in the menus
LATER = {"max_pool2d": ({"BC": 64, "RP": 128, "W": 16, "SPLIT": 1, "GL": 0},    # 483.8 µs (37fece3's pick)
                        {"BC": 64, "RP": 1, "W": 1, "SPLIT": 1, "GL": 1}),      # 140.9 µs (374cff7's pick)
         "argmax_dim": ({"BC": 16, "RP": 512, "W": 16, "SPLIT": 1, "GL": 0},    # 6850 µs (374cff7's pick)
                        {"BC": 32, "RP": 128, "W": 8, "SPLIT": 1, "GL": 0})}    # 2939 µs (best of that menu)


def norm_case(name, mode, N, C, HW, G, device, small):
    """batch_norm (training: batch statistics, running stats updated), group_norm, instance_norm of x [N, C, HW]
    (problems/level1 sizes): vecops norm-stats + combine + norm-apply. The design is {stats, apply}; the menu
    is the 2026-12-01 pick, the current pick, and the best apply per tile width beside the picked stats."""
    if small:
        N, C, HW, G = 2, 8, 45, 4
    from formloop.library.vecops_kernel import seg_norm

    g = C if mode == "instance" else G
    rows, nbytes = N * C, N * C * HW * 4
    ts, ta = vecops.make("norm-stats"), vecops.make("norm-apply")
    ws, wa = vecops.workload(rows, HW, nbytes), vecops.workload(rows, HW, 2 * nbytes)
    if small:
        d = {"stats": {"BC": 16, "RP": 2, "W": 1, "SPLIT": 2}, "apply": {"BC": 32, "RP": 1, "W": 1, "SPLIT": 2}}
    else:
        d = {"stats": vecops.solved_design("norm-stats", rows, HW, nbytes),
             "apply": vecops.solved_design("norm-apply", rows, HW, 2 * nbytes)}

    def model(dd):
        return _model(ts, ws, dd["stats"]) + _model(ta, wa, dd["apply"])

    def make(gen):
        return {"x": torch.randn(N, C, HW, generator=gen, device=device) * 2 + 1,
                "w": torch.rand(C, generator=gen, device=device) + 0.5, "b": torch.randn(C, generator=gen, device=device),
                "rm": torch.zeros(C, device=device), "rv": torch.ones(C, device=device)}

    def run(dd):
        def fn(o):
            aff = {} if mode == "instance" else {"weight": o["w"], "bias": o["b"]}
            run_stats = {"running_mean": o["rm"], "running_var": o["rv"]} if mode == "batch" else {}
            return seg_norm(mode, o["x"], stats=dd["stats"], apply=dd["apply"], groups=g, **aff, **run_stats)
        return fn

    torch_fn = {"batch": lambda o: F.batch_norm(o["x"], o["rm"], o["rv"], o["w"], o["b"], True, 0.1, 1e-5),
                "group": lambda o: F.group_norm(o["x"], g, o["w"], o["b"], 1e-5),
                "instance": lambda o: F.instance_norm(o["x"], eps=1e-5)}[mode]

    def ref(o):   # float64 on the operands' device; batch statistics (the running stats are not compared)
        x = o["x"].double()
        if mode == "batch":
            return [F.batch_norm(x, None, None, o["w"].double(), o["b"].double(), True, 0.1, 1e-5)]
        if mode == "group":
            return [F.group_norm(x, g, o["w"].double(), o["b"].double(), 1e-5)]
        return [F.instance_norm(x, eps=1e-5)]

    def menu(k):
        old = OLD_VECOPS[name]
        out = [({"stats": old, "apply": old}, model({"stats": old, "apply": old}), run({"stats": old, "apply": old})),
               (d, model(d), run(d))]
        for a, _ in ranked_designs(ta.formulate(wa, get_chip("h200")), 1, group="BC", distinct=("BC", "RP", "W")):
            alt = {"stats": d["stats"], "apply": a}
            if alt != d and len(out) < 2 + 2 * k:
                out.append((alt, model(alt), run(alt)))
        return out
    return Case(f"{name}-{N}x{C}x{HW}-fp32", "vecops", "fp32", 2 * nbytes, make, run(d), torch_fn, ref,
                lambda o, res: [res], model(d), d, menu)


def pool_case(N, C, H, W, device, small):
    """F.max_pool2d(x, 3, 2, 1) of x [N, C, H, W] (max_pool2d): vecops-gather, one load per tap (GL 0) or
    window-row runs (GL 1); the menu: the 2026-12-01 pick, the best designs per GL and wider window-row tiles
    (4 outputs per thread at 4-16 warps: the model's wave term prices small programs, this measures it)."""
    if small:
        N, C, H, W = 2, 3, 13, 11
    from formloop.library.vecops_gather import max_pool2d, out_size

    oh, ow = out_size(H, W, 3, 2, 1, 1)
    rows, nbytes = N * C * oh, (N * C * oh * ow + N * C * H * W) * 4
    q, kr = vecops.pool_row_taps((3, 3), 2, 1)
    t, wl = vecops.make("gather"), vecops.workload(rows, ow, nbytes, 9, kr)
    d = vecops.solved_design("gather", rows, ow, nbytes, taps=9, row_taps=kr) if not small else \
        {"BC": 8, "RP": 4, "W": 1, "SPLIT": 1, "GL": 1}

    def run(a):
        return lambda o: max_pool2d(o["x"], 3, config=a, stride=2, padding=1)

    def menu(k):
        old = OLD_VECOPS["max_pool2d"]
        out = [(old, _model(t, wl, old), run(old))]
        wider = [{"BC": 64, "RP": rp, "W": w, "SPLIT": 1, "GL": 1} for rp, w in ((8, 4), (16, 8), (32, 16))]
        wider += list(LATER["max_pool2d"]) if not small else []
        return out + [m for m in _menu(t, wl, k, run, group="GL", distinct=("BC", "RP", "W", "GL"), extra=wider)
                      if m[0] != old]
    return Case(f"max_pool2d-{N}x{C}x{H}x{W}-fp32", "vecops", "fp32", nbytes,
                lambda gen: {"x": torch.randn(N, C, H, W, generator=gen, device=device)}, run(d),
                lambda o: F.max_pool2d(o["x"], 3, 2, 1), lambda o: [F.max_pool2d(o["x"].double(), 3, 2, 1)],
                lambda o, res: [res], _model(t, wl, d), d, menu)


ACTS = {"relu": ("relu", torch.relu), "silu": ("silu", F.silu), "mish": ("mish", F.mish), "gelu": ("gelu", F.gelu),
        "hardtanh": ("hardtanh(lo=-1.0,hi=1.0)", lambda x: F.hardtanh(x, -1.0, 1.0)),
        "leaky_relu": ("leaky_relu(slope=0.01)", lambda x: F.leaky_relu(x, 0.01))}


def set_cases(device, small, dtype="fp32"):
    """The problem set's single vector ops (problems/level1), KernelBench sizes: what formloop optimize
    picks for them, and the menu around it. `dtype` (--set-dtype): the elementwise and row-wise cases' dtype
    (the bf16 variant of the set); the vecops cases stay fp32."""
    flat = {"BN": 16, "BM": 1, "W": 1, "F": 1, "BF": 64, "H": 0}  # the interpreter's flat walk (a tail: 6·70 % 64)
    out = [ew_case(name, chain, 4096, 393216, dtype, device, small, lambda o, f=fn: f(o["x"]),
                   small_design={**flat, "H": i % 2}) for i, (name, (chain, fn)) in enumerate(ACTS.items())]
    out.append(ew_case("residual_add", "add(name=other)", 32 * 4096, 4096, dtype, device, small,
                       lambda o: o["x"] + o["other"], small_design=flat))
    out += [row_case("sum", 32768, 32768, dtype, device, small, "row_sum"),
            row_case("max", 32768, 32768, dtype, device, small, "row_max"),
            row_case("softmax", 4096, 393216, dtype, device, small, "softmax_rows"),
            row_case("log-softmax", 4096, 393216, dtype, device, small, "log_softmax"),
            row_case("logsumexp", 16384, 65536, dtype, device, small)]
    out.append(colarg_case(128, 4096, 4095, device, small))
    out += [norm_case("batch_norm", "batch", 64, 64, 512 * 512, 1, device, small),
            norm_case("group_norm", "group", 112, 64, 512 * 512, 8, device, small),
            norm_case("instance_norm", "instance", 112, 64, 512 * 512, 64, device, small),
            pool_case(64, 64, 112, 112, device, small)]
    return out


def cases(device, small):
    """Qwen3-8B layer parts first (bf16), then KernelBench-like fp32 ops: torch.compile's first compiles
    go to the cases the layer needs if the time budget runs out."""
    h = QWEN["hidden"]
    out = [row_case("rmsnorm", r, h, "bf16", device, small) for r in (1, 128, 2048)]
    out += [row_case("rmsnorm-residual", r, h, "bf16", device, small) for r in (1, 2048)]
    out += [qk_case(1, 4096, "bf16", device, small), qk_case(2048, 2048, "bf16", device, small)]
    out += [ew_case("silu_mul", "silu >> mul(name=other)", 2048, 12288, "bf16", device, small,
                    lambda o: F.silu(o["x"]) * o["other"])]
    out += [row_case(op, 4096, 4096, "fp32", device, small) for op in ("softmax", "layernorm", "log-softmax", "sum",
                                                                         "argmax", "logsumexp")]
    out += [row_case("rmsnorm", 4096, 8192, "fp32", device, small), row_case("softmax", 128, 65536, "fp32", device,
                                                                               small)]
    out += [ew_case("gelu_tanh_bias", "gelu(approx=tanh) >> bias(axis=row,name=b)", 8192, 4096, "bf16", device, small,
                    lambda o: (F.gelu(o["x"].float(), approximate="tanh") + o["b"].float()).to(o["x"].dtype)),
            ew_case("relu", "relu", 4096, 4096, "fp32", device, small, lambda o: torch.relu(o["x"])),
            ew_case("mish_scale", "mish >> scale(by=2.0) >> hardtanh(lo=-1.0,hi=1.0)", 4096, 4096, "fp32", device,
                    small, lambda o: F.hardtanh(F.mish(o["x"]) * 2.0, -1.0, 1.0))]
    out += [gn_case(16, 64, 128 * 128, 8, device, small)]
    return out


def rel_error(got, want, chunk: int = 1 << 26) -> float:
    """‖got − want‖ / ‖want‖ in float64 on got's device (int results: exact), in chunks of `chunk` elements
    (the problem-set tensors hold 1.6e9 elements)."""
    want = want.to(got.device)
    if got.dtype in (torch.int64, torch.int32):
        return 0.0 if torch.equal(got, want.to(got.dtype)) else 1.0
    g, w = got.reshape(-1), want.reshape(-1)
    num = den = 0.0
    for i in range(0, g.numel(), chunk):
        gd, wd = g[i:i + chunk].double(), w[i:i + chunk].double()
        if gd.isnan().any():
            return float("inf")
        num += float((gd - wd).square().sum())
        den += float(wd.square().sum())
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def check(case, fn, gen):
    ops = case.make(gen)
    errs = [rel_error(g, w) for g, w in zip(case.got(ops, fn(ops)), case.ref(ops))]
    return max(errs)


def timings(fn, sets, device, pool=None):
    out = {}
    for mode in ("eager", "graph"):
        try:
            r = time_launches(lambda i: fn(sets[i]), len(sets), device=device, mode=mode, pool=pool)
            out[f"{mode}_us"] = r.timing.seconds * 1e6
        except Exception as exc:  # noqa: BLE001 - recorded with the reason
            out[f"{mode}_us"] = None
            out[f"{mode}_failure"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return out


def measure_case(case, row, device, gen, l2, bw, args, start):
    """Timings of ours, torch eager and torch.compile on the same operand sets (eager and CUDA graph), every
    graph in one memory pool (outputs freed between timings can take the same blocks: a multi-GB stream's speed
    follows its memory, formloop.measure.rounds). Returns the sets, the best eager time and the pool."""
    n = operand_sets_for(case.sol_bytes, l2)
    sets = [case.make(gen) for _ in range(n)]
    pool = torch.cuda.graph_pool_handle() if str(device).startswith("cuda") else None
    row["operand_sets"] = n
    row["ours"] = timings(case.ours, sets, device, pool)
    row["eager"] = timings(case.torch_fn, sets, device, pool)
    if not args.no_compile and time.time() - start < args.budget_s:
        compiled = torch.compile(case.torch_fn)
        row["err_compile"] = check(case, compiled, gen)
        row["compile"] = timings(compiled, sets, device, pool)
    else:
        row["compile"] = {"skipped": "--no-compile" if args.no_compile else "time budget"}
    ours_g = row["ours"].get("graph_us")
    eager_times = [x for x in (row["eager"].get("graph_us"), row["eager"].get("eager_us")) if x]
    best_eager = min(eager_times) if eager_times else None
    comp = row["compile"].get("graph_us")
    row["speedup_vs_eager"] = best_eager / ours_g if ours_g and best_eager else None
    row["speedup_vs_compile"] = comp / ours_g if ours_g and comp else None
    row["copy_fraction"] = case.sol_bytes / (ours_g * 1e-6) / bw if ours_g else None
    return sets, best_eager, pool


def run_menu(case, row, args, gen, tol, device=None, sets=None, best_eager=None, pool=None):
    """The model's top designs: each checked against float64 first, then (on the GPU) timed in a CUDA graph
    on the case's operand sets; the pick's row says where the model's choice ranks."""
    out = []
    for design, model_us, fn in case.menu(args.menu_k):
        r = {"design": design, "model_us": model_us, "pick": design == case.design}
        try:
            r["err"] = check(case, fn, gen)
        except Exception as exc:  # noqa: BLE001 - recorded with the reason
            r["err"], r["failure"] = float("inf"), f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        r["correct"] = r["err"] <= tol
        if sets is not None and r["correct"]:
            r.update(timings_graph(fn, sets, device, pool))
            if r.get("graph_us") and best_eager:
                r["speedup_vs_eager"] = best_eager / r["graph_us"]
        out.append(r)
        print(f"    menu {_design(design):44s} model {model_us:10.1f} us  err {r['err']:.1e}  gpu graph "
              f"{_fmt(r.get('graph_us')):>9s} us  x eager {_fmt(r.get('speedup_vs_eager'), '.2f'):>5s}"
              + ("  (pick)" if r["pick"] else "") + ("" if r["correct"] else "  FAILED"))
    row["menu"] = out
    timed = [r for r in out if r.get("graph_us")]
    if timed:
        best = min(timed, key=lambda r: r["graph_us"])
        row["menu_best"] = {"design": best["design"], "graph_us": best["graph_us"],
                            "speedup_vs_eager": best.get("speedup_vs_eager")}
        print(f"    best measured: {_design(best['design'])} {best['graph_us']:.1f} us (gpu graph), "
              f"x eager {_fmt(best.get('speedup_vs_eager'), '.2f')}; pick {_fmt(row['ours'].get('graph_us'))} us; "
              f"torch eager (best of graph, eager) {_fmt(best_eager)} us")
    return all(r["correct"] for r in out)


def timings_graph(fn, sets, device, pool=None):
    try:
        return {"graph_us": time_launches(lambda i: fn(sets[i]), len(sets), device=device, mode="graph",
                                          pool=pool).timing.seconds * 1e6}
    except Exception as exc:  # noqa: BLE001 - recorded with the reason
        return {"graph_us": None, "graph_failure": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}


def _design(d):
    return ",".join(f"{k}={v}" for k, v in d.items())


def copy_bw() -> float:
    n = 2**28
    src, dst = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    r = time_launches(lambda i: dst.copy_(src), 1, device="cuda", mode="graph")
    return 2 * n * 4 / r.timing.seconds


def main() -> int:
    args = ARGS or _args([])
    gpu = torch.cuda.is_available() and not args.dry_run
    if not gpu and os.environ.get("TRITON_INTERPRET") != "1":
        print("no CUDA device: run with --dry-run (Triton interpreter, tiny sizes)", file=sys.stderr)
        return 2
    device, start = ("cuda" if gpu else "cpu"), time.time()
    gen = torch.Generator(device=device).manual_seed(0)
    bw = copy_bw() if gpu else float("nan")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size if gpu else 0
    result = {"device": torch.cuda.get_device_name() if gpu else "cpu (interpreter)", "copy_bw_Bps": bw,
              "versions": {"torch": torch.__version__}, "command": " ".join(sys.argv), "cases": []}
    print(f"{result['device']}: copy bandwidth {bw / 1e12:.2f} TB/s (gpu, 1 GiB fp32 copy, graph)" if gpu else
          "dry run: Triton interpreter, tiny sizes, correctness only (no timing)")
    print(f"{'case':34s} {'err(ours)':>9s} {'err(torch)':>10s} {'ours g/e us':>14s} {'eager g/e us':>14s} "
          f"{'compile g us':>12s} {'model us':>8s} {'x eager':>7s} {'x comp':>6s} {'copy%':>6s}")
    wanted = [w for w in args.cases.split(",") if w]
    listed = set_cases(device, not gpu, args.set_dtype) if args.set else cases(device, not gpu)
    picked = [c for c in listed if not wanted or any(c.name.startswith(w) for w in wanted)]
    os.makedirs(args.out, exist_ok=True)
    for case in picked:
        row = {"case": case.name, "family": case.family, "dtype": case.dtype, "design": case.design,
               "sol_bytes": case.sol_bytes, "model_us": case.model_us}
        tol = TOL[case.dtype] * (3 if case.family == "qk_rope" else 1)
        row["err_ours"], row["err_torch"] = check(case, case.ours, gen), check(case, case.torch_fn, gen)
        row["tolerance"] = tol
        row["correct"] = row["err_ours"] <= tol
        row["torch_correct"] = row["err_torch"] <= tol  # the baseline is held to the same tolerance
        sets = best_eager = pool = None
        if gpu and row["correct"]:
            sets, best_eager, pool = measure_case(case, row, device, gen, l2, bw, args, start)
        _print(row)
        if args.menu and case.menu is not None:
            if time.time() - start < args.menu_budget_s:
                row["menu_correct"] = run_menu(case, row, args, gen, tol, device, sets, best_eager, pool)
            else:
                row["menu"] = f"skipped: past --menu-budget-s {args.menu_budget_s} s"
                print(f"    menu {row['menu']}")
        del sets, pool
        result["cases"].append(row)
        with open(os.path.join(args.out, "vector_ops.json"), "w") as f:  # after every case: a cut run keeps its rows
            json.dump(result, f, indent=1, default=str)
    ok = all(r["correct"] and r.get("menu_correct", True) for r in result["cases"])
    if gpu and args.menu:
        _menu_summary(result["cases"])
    if gpu:
        for key in ("speedup_vs_eager", "speedup_vs_compile"):
            xs = [r[key] for r in result["cases"] if r.get(key)]
            g = math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
            print(f"geomean {key} (graph vs best torch, gpu): {g:.3f}x over {len(xs)} cases")
    print(f"{sum(r['correct'] for r in result['cases'])}/{len(result['cases'])} cases correct; "
          f"{time.time() - start:.0f} s wall; wrote {os.path.join(args.out, 'vector_ops.json')}")
    return 0 if ok else 1


def _menu_summary(rows):
    """One line per case: the pick, the best measured design of the menu, torch eager (µs, gpu, CUDA graph)."""
    print(f"\n{'case':34s} {'pick us':>9s} {'best us':>9s} {'x eager pick':>12s} {'x eager best':>12s}  best design")
    picks, bests = [], []
    for r in rows:
        b = r.get("menu_best") or {}
        pick_x, best_x = r.get("speedup_vs_eager"), b.get("speedup_vs_eager")
        picks += [pick_x] if pick_x else []
        bests += [max(best_x, pick_x or 0)] if best_x else []
        print(f"{r['case']:34s} {_fmt(r.get('ours', {}).get('graph_us')):>9s} {_fmt(b.get('graph_us')):>9s} "
              f"{_fmt(pick_x, '.2f'):>12s} {_fmt(best_x, '.2f'):>12s}  {_design(b.get('design') or {})}")
    for name, xs in (("pick", picks), ("best of menu", bests)):
        print(f"{name}: {sum(x >= 1.0 for x in xs)}/{len(xs)} cases >= 1.0x torch eager (gpu, graph)")


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def _print(r):
    o, e, c = r.get("ours", {}), r.get("eager", {}), r.get("compile", {})
    print(f"{r['case']:34s} {r['err_ours']:9.1e} {r['err_torch']:10.1e} "
          f"{_fmt(o.get('graph_us')):>6s}/{_fmt(o.get('eager_us')):>7s} {_fmt(e.get('graph_us')):>6s}/"
          f"{_fmt(e.get('eager_us')):>7s} {_fmt(c.get('graph_us')):>12s} {_fmt(r['model_us']):>8s} "
          f"{_fmt(r.get('speedup_vs_eager'), '.2f'):>7s} {_fmt(r.get('speedup_vs_compile'), '.2f'):>6s} "
          f"{_fmt(r.get('copy_fraction') and 100 * r['copy_fraction']):>6s}" + ("" if r["correct"] else "  FAILED"))


if __name__ == "__main__":
    sys.exit(main())
