"""The design-loss decomposition (formloop.evaluate.loss) of the GEMM picks of a recorded
`benchmarks/gemm_eager.py` run, on any machine (the timings are the run's GPU measurements):

    PYTHONPATH=src python3 benchmarks/gemm_design_loss.py --run DIR/gemm_eager.json

For each shape, the pick re-solved under the calibration that run learned (schedules on), its
measured CUDA-graph time from the run's menu, and

    ln(measured / SOL floor) = representation + precondition + selection + model error

(representation: the best design the family can express, by the model, against the SOL floor;
precondition: what the preconditions exclude; selection: the solver's pick against the best
admissible design; model error: measured against predicted; spread: ln(p80 / p20) of the timing).
cuBLAS's own ln(time / floor) is printed beside it: a family whose total exceeds cuBLAS's by more
than the spread loses in one of the four named places."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, type=Path, help="a gemm_eager.json with its learned calibration")
    ap.add_argument("--out", type=Path, default=None, help="write gemm_design_loss.json here")
    args = ap.parse_args(argv)
    from gemm import key_of

    from formloop.codesign.reuse import model_cost
    from formloop.evaluate.loss import design_loss
    from formloop.hw.chips import get_chip
    from formloop.library import get_template
    from formloop.library.gemm_tiling import workload
    from formloop.sol import sol_report
    from formloop.solve import SOLVERS

    run = json.loads(args.run.read_text())
    cal = (run.get("learned") or {}).get("calibration")
    if not cal:
        raise SystemExit(f"--run: {args.run} has no learned calibration (a gemm_eager.py run that refit)")
    chip = get_chip("h200")
    t = get_template("gemm-tiling-gpu", dtype="bf16", calibration=dict(cal["terms"]), calibration_id=cal.get("id"),
                     schedules=True)
    out = []
    print(f"design loss of the re-solved picks ({cal.get('label')}); times us; terms: natural log (0 = no loss)")
    print(f"{'shape':>16} {'schedule':>13} {'floor':>8} {'pred':>8} {'meas':>8} {'repr':>6} {'pre':>6} {'sel':>6} "
          f"{'model':>6} {'spread':>6} {'total':>6} {'cuBLAS':>7}")
    for r in run["rows"]:
        m, n, k = r["shape"]
        w = workload((m, n, k), "bf16")
        pick = dict(SOLVERS["enumerate"](t.formulate(w, chip)).assignment)
        menu = {key_of(d["design"]): d for d in r["designs"] if "graph" in d}
        timed = menu.get(key_of(pick))
        if timed is None:
            print(f"{m}x{n}x{k}: the re-solved pick was not in the run's menu (not timed); skipped")
            continue
        g = timed["graph"]
        floor = sol_report("gemm", {"M": m, "N": n, "K": k}, "bf16", chip).time_floor_s * 1e6
        predicted, broken = model_cost(t, pick, w, chip)
        loss = design_loss(t, w, chip, predicted_us=predicted, measured_us=g["us"], floor_us=floor,
                           spread_us=(g["p20_us"], g["p80_us"]))
        lib = (r.get("torch") or {}).get("graph", {}).get("us")
        loss.update(shape=[m, n, k], design=pick, schedule=timed.get("schedule"), cublas_us=lib,
                    cublas_total=math.log(lib / floor) if lib else None)
        out.append(loss)

        def f(x):
            return f"{x:6.3f}" if x is not None else "     -"
        print(f"{f'{m}x{n}x{k}':>16} {str(timed.get('schedule')):>13} {floor:8.1f} {predicted:8.1f} {g['us']:8.1f} "
              f"{f(loss['representation'])} {f(loss['precondition'])} {f(loss['selection'])} "
              f"{f(loss['model_error'])} {f(loss['spread'])} {f(loss['total'])} {f(loss['cublas_total']):>7}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gemm_design_loss.json").write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
