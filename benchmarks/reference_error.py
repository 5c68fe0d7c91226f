"""Who is off, the candidate or the reference? A ModelNew and the problem's Model run on the same inputs
cast to a dtype, each compared with the float64 Model on those inputs (the truth), one command:

    PYTHONPATH=src python3 benchmarks/reference_error.py PROBLEM.py CANDIDATE.py [--dtype bf16] [--small]

Prints, for the candidate and the reference: ‖x − t‖/‖t‖, max |x − t|, and the elements outside
KernelBench's allclose (atol = rtol = the dtype's tolerance) against the truth rounded to the dtype;
then the candidate's failures against the reference (KernelBench's verdict). On the CPU the kernels run
in Triton's interpreter (TRITON_INTERPRET=1 is set when there is no CUDA device); use --small there."""
from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import sys

TOL = {"fp32": 1e-4, "bf16": 1e-2, "fp16": 1e-2}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem")
    ap.add_argument("candidate")
    ap.add_argument("--dtype", choices=sorted(TOL), default="bf16")
    ap.add_argument("--small", action="store_true", help="the problem's SMALL sizes")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    from formloop.sol.problem import load_problem

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    prob = load_problem(args.problem, small=args.small)
    torch.manual_seed(args.seed)
    init = prob.get_init_inputs()
    ref = prob.Model(*init)
    spec = importlib.util.spec_from_file_location("candidate_under_test", args.candidate)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    new = mod.ModelNew(*init)
    new.load_state_dict(ref.state_dict())
    truth_model = copy.deepcopy(ref).to(dt).double().to(dev)   # the parameters as the two hold them (rounded)
    x = [t.to(dev, dt) if t.is_floating_point() else t.to(dev) for t in prob.get_inputs()]
    with torch.no_grad():   # the truth on the very inputs the two see (already rounded to the dtype)
        truth = truth_model(*[t.double() if t.is_floating_point() else t for t in x])
        outs = {"candidate": new.to(dev, dt)(*x), "reference": ref.to(dev, dt)(*x)}
    tol = TOL[args.dtype]
    rounded = truth.to(dt).float()
    for name, out in outs.items():
        d = out.double() - truth
        fails = int((~torch.isclose(out.float(), rounded, atol=tol, rtol=tol)).sum())
        print(f"{name:9s} vs float64 truth: norm error {float(d.norm() / truth.norm()):.3g}, max error "
              f"{float(d.abs().max()):.3g}, {fails} of {out.numel()} outside allclose({tol:g}) of the truth")
    bad = int((~torch.isclose(outs["candidate"].float(), outs["reference"].float(), atol=tol, rtol=tol)).sum())
    print(f"candidate vs reference (KernelBench's verdict): {bad} of {truth.numel()} outside allclose({tol:g}) "
          f"[{dev}{', interpreter' if dev == 'cpu' else ''}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
