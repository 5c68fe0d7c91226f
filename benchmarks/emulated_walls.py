"""Chip walls on real silicon (issue 18, part 3): the GPU GEMM family or the attention-decode family on
smaller chips emulated by the H200 (green-context SM counts, shared-memory budgets per block, maxnreg register
caps), the project's wall relaxation (codesign.walls.relax_walls, Algorithm 1, over codesign.emulated_walls'
problem) whose every purchase is validated by an emulated measurement, exhaustive search over the same grid and
random search at half its budget.

    PYTHONPATH=src python3 benchmarks/emulated_walls.py --out $OUT      # on the GPU (under a minute)
    PYTHONPATH=src python3 benchmarks/emulated_walls.py --family attention-decode --out $OUT
    PYTHONPATH=src python3 benchmarks/emulated_walls.py --dry-run       # anywhere: the model plays the GPU

Area model (an ASSUMPTION, labelled so everywhere; codesign.emulated_walls.AREA): mm2 = sm_count *
(1.6 + 0.012 * smem KiB + 0.004 * regs/thread * 2048 threads / 1024). The objective is the worst ratio
over the shapes of (time of the chip's pick) / (time of the full H200's pick), each time measured
emulated; the model predicts the same ratio from the cost formula on the emulated chip (source: model).
The register cap is a wall of each family (REGISTER_WALL); a design that still fails to compile or launch
on an emulated chip gives way to the model's next-best admitted design (recorded under 'fallbacks'); gains
are only taken between finite measurements.

Families (--family): gemm (bf16 GEMMs, SHAPES; eager timing, as the recorded runs) and attention-decode
(bf16 decode attention B, Hq, Hkv, D, L: DECODE_SHAPES; back-to-back stream timing, so that the host's
launch work of a kernel of tens of microseconds stays out of the ratios; the family's own cost, which
counts the programs an SM holds, is the model)."""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import zlib

SHAPES = [(4096, 4096, 4096), (64, 4096, 4096), (1000, 1000, 1000)]
DECODE_SHAPES = [(8, 32, 8, 128, 4096), (1, 32, 8, 128, 32768)]  # B, Hq, Hkv, D, L: batched and long-cache decode
FAMILIES = {"gemm": ("gemm-tiling-gpu", SHAPES, "eager"),
            "attention-decode": ("attention-decode", DECODE_SHAPES, "stream")}
REGISTER_WALL = {"gemm": "fp32 accumulators a thread <= min(128, regs/thread - 64) (gemm-tiling-gpu C2)",
                 "attention-decode": "fp32 accumulator and score rows a thread <= min(160, regs/thread - 95) "
                                     "(attention-decode C2)"}
SMS, SMEM_KIB, REGS = (16, 33, 66, 132), (64, 128, 227), (128, 255)
FALLBACKS = 4  # designs tried per (chip, shape): the pick, then the model's next best admitted ones
BAND = 0.5     # a purchase misses when its measured drop is off the predicted one by more than half (then: refit)


def lib(ceiling: float = 450.0):
    from formloop.codesign.emulated_walls import library

    return library(SMS, SMEM_KIB, REGS, ceiling)


def area(w, library=None) -> float:
    """mm2 of emulated chip `w` under the assumed area model."""
    regs = 255 if w.regs_per_thread is None else w.regs_per_thread
    return (library or lib()).chip(sm=w.sm_count, smem=w.smem_per_block // 1024, regs=regs).area


def grid(library=None):
    from formloop.codesign.emulated_walls import walls_of

    return [walls_of(h) for h in (library or lib()).chips(within_ceiling=False)]


class Bench:
    def __init__(self, dry: bool, occupancy: bool | None = None, family: str = "gemm"):
        from formloop.codesign.emulated_model import EmulatedModel
        from formloop.hw.chips import get_chip
        from formloop.library import get_template

        name, self.shapes, self.timing = FAMILIES[family]
        self.dry, self.base, self.family = dry, get_chip("h200"), family
        self.t = get_template(name, dtype="bf16")
        # what SOLVE reads, and what is measured (occupancy None: the GEMM family's occupancy grid, decode's own cost)
        self.model = EmulatedModel(self.t, self.base, occupancy=occupancy)
        self.cache: dict = {}
        self.evaluators: dict = {}
        self.measurements = 0
        self.fallbacks: list[dict] = []  # designs that failed on an emulated chip, and why

    def workload(self, shape) -> dict:
        if self.family == "gemm":
            from formloop.library.gemm_tiling import workload
        else:
            from formloop.library.attention_decode import workload
        return workload(shape, "bf16")

    def ranked(self, w, shape, n: int):
        """The model's n best designs of `shape` on chip `w` (the pick first), with their model times
        (us, codesign.emulated_model: the model relax_walls' SOLVE reads) and the emulated chip."""
        return self.model.ranked(self.workload(shape), w, n), self.model.chip(w)

    def pick(self, w, shape):
        ranked, chip = self.ranked(w, shape, 1)
        return ranked[0][0], ranked[0][1], chip

    def _measure_one(self, w, shape, a, chip) -> tuple[float, str]:
        """(us, '') for a measured design, or (nan, why) when it did not compile, launch or pass."""
        if self.dry:  # the model plays the GPU, perturbed so that validation can miss
            key = repr((w, shape, sorted(a.items())))
            if zlib.crc32(key.encode()) % 7 == 0:  # exercises the fallback path off the GPU
                return math.nan, "simulated compile failure (dry run)"
            return None, ""  # the caller perturbs the model's time
        from formloop.evaluate.emulated import EmulatedEvaluator
        from formloop.measure.timer import TimingPolicy

        if w not in self.evaluators:
            self.evaluators[w] = EmulatedEvaluator(w, policy=TimingPolicy(budget_ms=20.0, min_reps=5, max_calls=60),
                                                   timing=self.timing)
        m = self.evaluators[w].evaluate(self.t, a, self.workload(shape), chip)
        if m.ok and m.latency_us is not None and math.isfinite(m.latency_us) and m.latency_us > 0:
            return m.latency_us, ""
        why = m.failure or (f"check failed: {m.correctness}" if m.correctness is not None else "no finite time")
        return math.nan, str(why)[:300]

    def measure(self, w, shape) -> tuple[float, float, dict]:
        """(model us, measured us, design) of the pick of `shape` on chip `w` (cached). A design that
        fails to compile, launch or pass its check falls back to the model's next-best admitted design
        (each fallback recorded in `self.fallbacks`); nan when FALLBACKS designs all failed."""
        key = (w, shape)
        if key not in self.cache:
            ranked, chip = self.ranked(w, shape, FALLBACKS)
            result = (ranked[0][1], math.nan, ranked[0][0])
            for a, model_us in ranked:
                us, why = self._measure_one(w, shape, a, chip)
                if us is None:  # dry run: the model's time of this design, perturbed
                    us = model_us * (1 + 0.15 * math.sin(zlib.crc32(repr(key).encode()) % 97))
                self.measurements += 1
                if math.isfinite(us):
                    result = (model_us, us, a)
                    break
                self.fallbacks.append({"chip": w.label(), "shape": "x".join(map(str, shape)), "design": a,
                                       "reason": why})
            self.cache[key] = result
        return self.cache[key]

    def objective(self, w, full) -> tuple[float, float]:
        """(model, measured) worst ratio over the shapes against the full chip; the measured one is nan
        unless every measurement it needs is finite."""
        ratios_g = []
        for s in self.shapes:
            _, gu, _ = self.measure(w, s)
            _, fg, _ = self.measure(full, s)
            ratios_g.append(gu / fg if math.isfinite(gu) and math.isfinite(fg) else math.nan)
        return _model_objective(self, w, full), (max(ratios_g) if all(map(math.isfinite, ratios_g)) else math.nan)


def gain(before: float, after: float) -> float | None:
    """before / after between finite measurements, else None (never inf or nan)."""
    return before / after if math.isfinite(before) and math.isfinite(after) and after > 0 else None


def relax(b: Bench, full, ceiling: float) -> tuple[list[dict], dict]:
    """relax_walls from the smallest chip: each purchase with the model's predicted gain (objective
    before / after) and the measured one (between finite measurements only; 'confirmed' when it is on
    the predicted side of 1). A miss (measured drop of the other sign) stops it: no term is refitted."""
    from formloop.codesign.emulated_walls import EmulatedWallsProblem, walls_of
    from formloop.codesign.walls import relax_walls

    library = lib(ceiling)
    names = {"x".join(map(str, s)): s for s in b.shapes}
    problem = EmulatedWallsProblem(b.t, b.base, library, {k: b.workload(s) for k, s in names.items()},
                                   lambda w, sc: b.measure(w, names[sc])[1], model=b.model)
    start = min(library.chips(), key=lambda h: h.area)
    rel = relax_walls(problem, "worst", start, k=2, rounds=16, band=BAND)
    log = []
    for p in rel.purchases:
        before, after = walls_of(p.before), walls_of(p.after)
        bm, bg = problem.model_ratio(p.before), b.objective(before, full)[1]
        am, ag = problem.model_ratio(p.after), b.objective(after, full)[1]
        measured = gain(bg, ag)
        log.append({"buy": p.move, "from": before.label(), "to": after.label(), "area_mm2": p.after.area,
                    "predicted_gain": bm / am, "measured_gain": measured,
                    "relaxation_drop": {"predicted": p.predicted_drop, "evaluated": p.evaluated_drop},
                    "confirmed": None if measured is None else measured > 1,
                    "model_objective": am, "measured_objective": ag if math.isfinite(ag) else None,
                    "mechanism": list(p.mechanism)})
    summary = {"end": walls_of(rel.chip).label(), "model_objective": problem.model_ratio(rel.chip),
               "recalibrations": rel.recalibrations,
               "path": [(step, walls_of(h).label(), L, problem.model_ratio(h), b.objective(walls_of(h), full)[1])
                        for step, h, L, _ in rel.path],
               "measured_objective": rel.evaluated if math.isfinite(rel.evaluated) else None,
               "solve_calls": rel.calls, "bound": rel.bound, "rounds": rel.rounds,
               "reclaims": [(walls_of(a).label(), walls_of(c).label()) for a, c in rel.reclaims], "events": rel.events}
    return log, summary


def _model_objective(b: Bench, w, full) -> float:
    """The model's worst ratio over the shapes: its pick on chip `w` against its pick on the full chip."""
    ratios = []
    for s in b.shapes:
        _, mu, _ = b.pick(w, s)
        _, fu, _ = b.pick(full, s)
        ratios.append(mu / fu)
    return max(ratios)


def best_of(b: Bench, chips, full) -> dict:
    """The chip with the lowest measured objective among `chips` (finite ones only; the rest counted)."""
    scored = [(w.label(), b.objective(w, full)) for w in chips]
    finite = [(label, o) for label, o in scored if math.isfinite(o[1])]
    best = min(finite, key=lambda kv: kv[1][1]) if finite else (None, (math.nan, math.nan))
    return {"chips": len(chips), "unmeasured": len(scored) - len(finite), "best": best[0],
            "objective": best[1][1] if finite else None, "model_objective": best[1][0] if finite else None}


def _fmt(x, spec=".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--ceiling", type=float, default=450.0, help="area ceiling, mm2 (assumed area model)")
    p.add_argument("--family", choices=sorted(FAMILIES), default="gemm")
    p.add_argument("--model", choices=("occupancy", "blind"), default="occupancy",
                   help="gemm only: occupancy = blocks per SM from the walls (codesign.emulated_model); blind = one "
                        "block per SM (the first H200 run's model); attention-decode reads its own cost")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    from formloop.evaluate.emulated import Walls

    t0 = time.time()
    gemm = args.family == "gemm"
    b = Bench(args.dry_run, occupancy=(args.model == "occupancy") if gemm else None, family=args.family)
    full = Walls(132, 227 * 1024, None)
    source = "model (dry run: perturbed model plays the GPU)" if args.dry_run else "emulated (H200)"
    purchases, relaxation = relax(b, full, args.ceiling)
    relax_calls = b.measurements
    admitted = [w for w in grid() if area(w) <= args.ceiling + 1e-9]
    exhaustive = best_of(b, admitted, full)
    rng = random.Random(0)
    half = rng.sample(admitted, max(1, len(admitted) // 2))
    random_half = best_of(b, half, full)
    result = {"source": source, "area_model": "assumed (see the module doc)", "ceiling_mm2": args.ceiling,
              "family": b.t.name, "timing": b.timing,
              "model": (args.model + " (codesign.emulated_model)") if gemm else "the family's own cost (its "
              "programs per SM from shared memory and warps)", "register_wall": REGISTER_WALL[args.family],
              "purchases": purchases, "relaxation": relaxation, "relaxation_measurements": relax_calls,
              "exhaustive": exhaustive, "random_half": random_half, "fallbacks": b.fallbacks,
              "measurements": {f"{w.label()} {'x'.join(map(str, s))}": {
                  "model_us": v[0], "measured_us": v[1] if math.isfinite(v[1]) else None, "design": v[2],
                  **({"blocks_per_sm": b.model.occupancy_of(v[2], b.workload(s), w)} if gemm else {})}
                  for (w, s), v in b.cache.items()},
              "seconds": time.time() - t0}
    with open(os.path.join(args.out, "emulated_walls.json"), "w") as fh:
        json.dump(result, fh, indent=1, default=str, allow_nan=False)
    print(f"wall relaxation of {b.t.name} on emulated chips ({source}, {b.timing} timing); area ceiling "
          f"{args.ceiling} mm2 (assumed area model)")
    print(f"{'buy':>15} {'to':>16} {'mm2':>6} {'pred gain':>9} {'meas gain':>9} {'objective m/g':>14}")
    for r in purchases:
        print(f"{r['buy']:>15} {r['to']:>16} {r['area_mm2']:6.1f} {r['predicted_gain']:9.3f} "
              f"{_fmt(r['measured_gain']):>9} {r['model_objective']:6.3f}/{_fmt(r['measured_objective'])}")
    print("walk (step, chip, model objective, measured objective):")
    for step, chip, _, model_l, meas in relaxation["path"]:
        print(f"  {step:>12} {chip:>16} model {model_l:7.3f}  {source.split(' ')[0]} {_fmt(meas)}")
    print(f"relaxation (codesign.walls.relax_walls): ends at {relaxation['end']} (model objective "
          f"{_fmt(relaxation['model_objective'])}, measured {_fmt(relaxation['measured_objective'])}; "
          f"{relax_calls} emulated measurements, {relaxation['solve_calls']} model solves); last event: "
          f"{relaxation['events'][-1] if relaxation['events'] else '-'}")
    for label, r in (("exhaustive over", exhaustive), ("random, half budget,", random_half)):
        print(f"{label} {r['chips']} chips: {r['best']} objective {_fmt(r['objective'])} ({source}; "
              f"{r['unmeasured']} chips without a finite measurement)")
    print(f"fallbacks: {len(b.fallbacks)} designs failed on an emulated chip and gave way to the next best"
          + "".join(f"\n  {f['chip']} {f['shape']} {tuple(f['design'].values())}: {f['reason'][:120]}"
                    for f in b.fallbacks[:8]))
    print(f"total {result['seconds']:.0f} s (wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
