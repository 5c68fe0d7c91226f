"""The conv regions of the shipped problems, one kernel at a time, on one GPU (one command):

    PYTHONPATH=src python3 benchmarks/conv_regions.py --out DIR [--fp32-operands tf32|fp32|...]

For every conv2d-epilogue region that `formloop optimize` recognizes in the conv problems (conv2d_3x3,
conv2d_patch_embed, conv_bn_relu, resnet_bottleneck, vit's patch embedding) at the problem's real
size: the instance the MILP chooses (through the kernel spec language), then correctness first
(fresh random NCHW inputs, float64 conv reference, max |error| and the worst ratio to KernelBench's
fp32 allclose, atol = rtol = 1e-4), then timing by formloop.measure.timer, eager and CUDA graph side
by side, in one run: torch's conv (the module, NCHW input, cuDNN with torch's default TF32 setting),
formloop on the NCHW input (the NCHW -> NHWC layout copy included), formloop on a channels-last input
(no layout copy: what a conv after a conv region sees), and the layout copy alone. Ratios are torch /
formloop. It also reports torch's own conv error vs float64 (cuDNN runs fp32 convs in TF32 unless
torch.backends.cudnn.allow_tf32 is off) and formloop's worst allclose ratio against torch's conv,
which is what the KernelBench rule checks. Without CUDA: the interpreter at SMALL sizes, correctness
only (labelled); --dry-run lists the regions and their instances only. Writes DIR/conv_regions.json."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ["level1/conv2d_3x3.py", "level1/conv2d_patch_embed.py", "level2/conv_bn_relu.py",
            "level3/resnet_bottleneck.py", "level3/vit.py"]


def regions(path: Path, small: bool, tier: str, operands: str):
    from formloop.optimize.capture import capture
    from formloop.optimize.conv_region import choose
    from formloop.optimize.recognize import recognize
    from formloop.sol.problem import load_problem

    prob = load_problem(str(path), small=small)
    cap = capture(prob)
    for r in recognize(cap).regions:
        if r.kind == "conv2d-epilogue":
            xshape = cap.shape(r.params["x"])
            yield prob, r, xshape, choose(r, tier=tier, fp32_operands=operands)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--fp32-operands", default="tf32", help="operand type of fp32 convs on the GPU (the engine's)")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    import torch
    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from torch.nn import functional as F

    from formloop.library.fused_conv import conv_chain
    from formloop.measure.timer import time_calls
    rows = []
    for rel in PROBLEMS:
        for prob, r, xshape, d in regions(ROOT / "problems" / rel, not gpu, "gpu" if gpu else "interpreter",
                                          args.fp32_operands):
            p = r.params
            row = {"problem": prob.name, "nodes": [n.name for n in r.nodes], "via": d["via"], "chain": d["chain"],
                   "input": list(xshape), "config": d["config"], "ab": d["ab"], "solver": d["solver"],
                   "predicted_us (model)": d["predicted_us"]}
            print(json.dumps(row), flush=True)
            rows.append(row)
            if args.dry_run:
                continue
            dev = "cuda" if gpu else "cpu"
            model = prob.build().to(dev)
            w = model.get_parameter(p["w"]).detach()
            kw = dict(stride=p["stride"], padding=p["padding"], dilation=p["dilation"], via=d["via"], ab=d["ab"],
                      c=p["dtype"], chain=d["chain"], config=d["config"])
            if p["bias"] is not None:
                kw["bias"] = model.get_parameter(p["bias"]).detach()
            if p["bn"] is not None and not d["post"]:
                kw["bn"] = model.get_submodule(p["bn"])
            if d["post"]:   # training-mode BatchNorm + chain after the kernel: optimize_set times the whole problem
                row["timed"] = f"the conv kernel only (not the BatchNorm statistics and the pass '{d['post']}')"
            x = torch.randn(*xshape, device=dev)
            y = conv_chain(x, w, **kw)
            if (p["bn"] is None or d["post"]) and d["chain"].replace("bias(axis=row,name=bias)", "").strip(" >") == "":
                ref = F.conv2d(x.double(), w.double(), None if p["bias"] is None else kw["bias"].double(),
                               stride=p["stride"], padding=p["padding"], dilation=p["dilation"])
                err = (y.double() - ref).abs()
                row["max_abs_err"] = float(err.max())
                row["kernelbench_fp32_worst_ratio"] = float((err / (1e-4 + 1e-4 * ref.abs())).max())
                row["correct_kernelbench_fp32"] = row["kernelbench_fp32_worst_ratio"] <= 1.0
            if not gpu:
                print(json.dumps({k: row[k] for k in row if "err" in k or "correct" in k}), "(interpreter)", flush=True)
                continue
            with torch.no_grad():   # the reference the KernelBench rule compares with: torch's conv as configured
                yt = torch.nn.functional.conv2d(x, w, kw.get("bias"), stride=p["stride"], padding=p["padding"],
                                                dilation=p["dilation"])
            row["cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
            if "max_abs_err" in row:
                terr = (yt.double() - ref).abs()
                row["torch_conv_max_abs_err"] = float(terr.max())
                row["torch_conv_kernelbench_fp32_worst_ratio"] = float((terr / (1e-4 + 1e-4 * ref.abs())).max())
                kb = ((y.double() - yt.double()).abs() / (1e-4 + 1e-4 * yt.double().abs())).max()
                row["formloop_vs_torch_conv_kernelbench_worst_ratio"] = float(kb)
            sets = [[torch.randn(*xshape, device=dev)] for _ in range(3)]
            cl = [[s[0].contiguous(memory_format=torch.channels_last)] for s in sets]
            conv = torch.nn.Conv2d(xshape[1], w.shape[0], tuple(w.shape[2:]), stride=p["stride"], padding=p["padding"],
                                   dilation=p["dilation"], bias=p["bias"] is not None).to(dev)
            with torch.no_grad():
                conv.weight.copy_(w)
                if p["bias"] is not None:
                    conv.bias.copy_(kw["bias"])
            cands = {"torch_conv_nchw": (lambda t: conv(t), sets),
                     "formloop_nchw_input": (lambda t: conv_chain(t, w, **kw), sets),
                     "formloop_channels_last_input": (lambda t: conv_chain(t, w, **kw), cl),
                     "layout_copy_only": (lambda t: t.permute(0, 2, 3, 1).contiguous(), sets)}
            with torch.no_grad():
                for mode in ("eager", "graph"):
                    for name, (fn, ins) in cands.items():
                        t = time_calls(fn, ins, device=dev, mode=mode).timing
                        row[f"{name}_{mode}_us (gpu)"] = t.seconds * 1e6
                    for base in ("nchw_input", "channels_last_input"):
                        row[f"speedup_{base}_{mode} (torch/formloop, gpu)"] = (
                            row[f"torch_conv_nchw_{mode}_us (gpu)"] / row[f"formloop_{base}_{mode}_us (gpu)"])
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "conv_regions.json").write_text(json.dumps({"tier": "gpu" if gpu else "interpreter", "rows": rows},
                                                           indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
