"""Chip walls on real silicon (issue 18, part 3): the GPU GEMM family on smaller chips emulated by the
H200 (green-context SM counts, shared-memory budgets per block, maxnreg), a greedy wall relaxation
whose every purchase is validated by an emulated measurement, exhaustive search over the same grid
and random search at half its budget.

    PYTHONPATH=src python3 benchmarks/emulated_walls.py --out $OUT      # on the GPU (a few minutes)
    PYTHONPATH=src python3 benchmarks/emulated_walls.py --dry-run       # anywhere: the model plays the GPU

Area model (an assumption, labelled so everywhere): mm2 = sm_count * (AREA_SM + AREA_SMEM_KIB * smem KiB
+ AREA_REG * regs/thread * 2048 threads / 1024). The objective is the worst ratio over the shapes of
(time of the chip's pick) / (time of the full H200's pick), each time measured emulated; the model
predicts the same ratio from the cost formula on the emulated chip (source: model)."""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import sys
import time
import zlib

SHAPES = [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000)]
SMS, SMEM_KIB, REGS = (16, 33, 66, 132), (64, 128, 227), (128, 255)
AREA_SM, AREA_SMEM_KIB, AREA_REG = 1.6, 0.012, 0.004  # mm2 (assumed, illustrative)


def area(w) -> float:
    regs = 255 if w.regs_per_thread is None else w.regs_per_thread
    return w.sm_count * (AREA_SM + AREA_SMEM_KIB * w.smem_per_block / 1024 + AREA_REG * regs * 2)


def grid():
    from formloop.evaluate.emulated import Walls

    return [Walls(s, k * 1024, None if r == 255 else r) for s, k, r in itertools.product(SMS, SMEM_KIB, REGS)]


class Bench:
    def __init__(self, dry: bool):
        from formloop.hw.chips import get_chip
        from formloop.library import get_template

        self.dry, self.base = dry, get_chip("h200")
        self.t = get_template("gemm-tiling-gpu", dtype="bf16")
        self.cache: dict = {}
        self.evaluators: dict = {}
        self.measurements = 0

    def pick(self, w, shape):
        from formloop.evaluate.emulated import emulated_chip
        from formloop.library.gemm_tiling import workload
        from formloop.solve import enumerate_designs

        chip = emulated_chip(self.base, w)
        sol = enumerate_designs(self.t.formulate(workload(shape, "bf16"), chip))
        return dict(sol.assignment), float(sol.objective), chip

    def measure(self, w, shape) -> tuple[float, float, dict]:
        """(model us, measured us, design) of the pick of `shape` on chip `w` (cached)."""
        key = (w, shape)
        if key not in self.cache:
            from formloop.library.gemm_tiling import workload

            a, model_us, chip = self.pick(w, shape)
            if self.dry:  # the model plays the GPU, perturbed so that validation can miss
                us = model_us * (1 + 0.15 * math.sin(zlib.crc32(repr(key).encode()) % 97))
            else:
                from formloop.evaluate.emulated import EmulatedEvaluator
                from formloop.measure.timer import TimingPolicy

                if w not in self.evaluators:
                    self.evaluators[w] = EmulatedEvaluator(w, policy=TimingPolicy(budget_ms=20.0, min_reps=5,
                                                                                 max_calls=60))
                ev = self.evaluators[w]
                m = ev.evaluate(self.t, a, workload(shape, "bf16"), chip)
                us = m.latency_us if m.ok else math.inf
            self.measurements += 1
            self.cache[key] = (model_us, us, a)
        return self.cache[key]

    def objective(self, w, full) -> tuple[float, float]:
        """(model, measured) worst ratio over the shapes against the full chip."""
        ratios_m, ratios_g = [], []
        for s in SHAPES:
            mu, gu, _ = self.measure(w, s)
            fm, fg, _ = self.measure(full, s)
            ratios_m.append(mu / fm)
            ratios_g.append(gu / fg)
        return max(ratios_m), max(ratios_g)


def steps(w):
    from formloop.evaluate.emulated import Walls

    out = []
    regs = 255 if w.regs_per_thread is None else w.regs_per_thread
    for name, menu, cur in (("sm_count", SMS, w.sm_count), ("smem", SMEM_KIB, w.smem_per_block // 1024),
                            ("regs", REGS, regs)):
        i = menu.index(cur)
        if i + 1 < len(menu):
            nxt = menu[i + 1]
            vals = {"sm_count": w.sm_count, "smem": w.smem_per_block // 1024, "regs": regs, name: nxt}
            regs_next = None if vals["regs"] == 255 else vals["regs"]
            out.append((name, Walls(vals["sm_count"], vals["smem"] * 1024, regs_next)))
    return out


def relax(b: Bench, full, ceiling: float) -> list[dict]:
    """Greedy: buy the step with the largest model-predicted drop of the objective per mm2 within the
    ceiling; validate it by the emulated measurement; stop when no step gains (by the model)."""
    w = min(grid(), key=area)
    log = []
    while True:
        cur_m, cur_g = b.objective(w, full)
        best = None
        for name, nxt in steps(w):
            if area(nxt) > ceiling:
                continue
            nm, _ = _model_objective(b, nxt, full)
            gain = (cur_m - nm) / max(area(nxt) - area(w), 1e-9)
            if nm < cur_m and (best is None or gain > best[0]):
                best = (gain, name, nxt)
        if best is None:
            return log
        _, name, nxt = best
        nm, ng = b.objective(nxt, full)
        log.append({"buy": name, "to": nxt.label(), "area_mm2": area(nxt), "predicted_gain": cur_m / nm,
                    "measured_gain": cur_g / ng, "model_objective": nm, "measured_objective": ng})
        w = nxt


def _model_objective(b: Bench, w, full):
    ratios = []
    for s in SHAPES:
        _, mu, _ = b.pick(w, s)
        _, fu, _ = b.pick(full, s)
        ratios.append(mu / fu)
    return max(ratios), None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--ceiling", type=float, default=450.0, help="area ceiling, mm2 (assumed area model)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    from formloop.evaluate.emulated import Walls

    t0 = time.time()
    b = Bench(args.dry_run)
    full = Walls(132, 227 * 1024, None)
    source = "model (dry run: perturbed model plays the GPU)" if args.dry_run else "emulated (H200)"
    purchases = relax(b, full, args.ceiling)
    relax_calls = b.measurements
    admitted = [w for w in grid() if area(w) <= args.ceiling]
    exhaustive = {w.label(): b.objective(w, full) for w in admitted}
    best_ex = min(exhaustive.items(), key=lambda kv: kv[1][1])
    rng = random.Random(0)
    half = rng.sample(admitted, max(1, len(admitted) // 2))
    best_rand = min(((w.label(), b.objective(w, full)) for w in half), key=lambda kv: kv[1][1])
    result = {"source": source, "area_model": "assumed (see the module doc)", "ceiling_mm2": args.ceiling,
              "purchases": purchases, "relaxation_measurements": relax_calls,
              "exhaustive": {"chips": len(admitted), "best": best_ex[0], "objective": best_ex[1][1]},
              "random_half": {"chips": len(half), "best": best_rand[0], "objective": best_rand[1][1]},
              "measurements": {f"{w.label()} {'x'.join(map(str, s))}": v for (w, s), v in b.cache.items()},
              "seconds": time.time() - t0}
    with open(os.path.join(args.out, "emulated_walls.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    print(f"wall relaxation on emulated chips ({source}); area ceiling {args.ceiling} mm2 (assumed area model)")
    print(f"{'buy':>9} {'to':>16} {'mm2':>6} {'pred gain':>9} {'meas gain':>9} {'objective m/g':>14}")
    for r in purchases:
        print(f"{r['buy']:>9} {r['to']:>16} {r['area_mm2']:6.1f} {r['predicted_gain']:9.3f} {r['measured_gain']:9.3f} "
              f"{r['model_objective']:6.3f}/{r['measured_objective']:.3f}")
    end = purchases[-1] if purchases else None
    print(f"relaxation: ends at {end['to'] if end else 'the start chip'} "
          f"(measured objective {end['measured_objective'] if end else math.nan:.3f}, {relax_calls} measurements)")
    print(f"exhaustive over {len(admitted)} chips: {best_ex[0]} objective {best_ex[1][1]:.3f} ({source})")
    print(f"random, half budget ({len(half)} chips): {best_rand[0]} objective {best_rand[1][1]:.3f} ({source})")
    print(f"total {result['seconds']:.0f} s (wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
