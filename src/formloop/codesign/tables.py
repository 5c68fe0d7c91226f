"""Run a study's methods and lay out its results: Table 12 (capacity search), Table 11
(software-only vs hardware-only vs joint), and the Figure 6-style plot (quality vs search work)."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from formloop.codesign import baselines as bl
from formloop.codesign.study import Study
from formloop.codesign.walls import relax_walls

RAW_DROP = "wall relaxation, raw drop"      # ablation: moves ranked by latency drop, area ignored
CAPACITY_METHODS = ("fixed hardware", "sequential", "random + exact inner", "wall relaxation", RAW_DROP,
                    "coupled wall", "joint reference")
SEED_KEYS = {"fixed hardware": "fixed", "sequential": "sequential", "random + exact inner": "random",
             "wall relaxation": "wall", "coupled wall": "coupled", "joint reference": "joint"}
TABLE11_METHODS = ("software only", "hardware only", "sequential", "joint reference")


def _row(study: Study, objective: str, start: str, r: bl.MethodResult, **extra) -> dict:
    names = study.problem.library.open_components()
    return {"objective": objective, "start": start, "method": r.method, "ratio": r.ratio, "evaluated": r.evaluated,
            "inner_problems": r.inner_problems, "chip": None if r.chip is None else r.chip.label(names),
            "area_mm2": None if r.chip is None else r.chip.area, "software": r.software,
            "source": study.problem.source, **{k: v for k, v in r.extra.items()}, **extra}


def capacity_rows(study: Study) -> list[dict]:
    """Every method in every (objective, start) cell: the Table 12 layout as a list of rows."""
    p = study.problem
    names = p.library.open_components()
    rows = []
    joint = {}
    for objective in p.objectives:
        milp, enum = bl.joint_milp(p, objective), bl.joint_enumeration(p, objective)
        joint[objective] = (milp, enum)
    for objective in p.objectives:
        for start, per_obj in study.starts.items():
            if objective not in per_obj:
                continue
            h = per_obj[objective]
            label = f"{start} {h.label(names)}"
            rows.append(_row(study, objective, label, bl.fixed_hardware(p, objective, h)))
            seq = bl.sequential(p, objective, h)
            rows.append(_row(study, objective, label, seq))
            runs = [bl.random_search(p, objective, study.random_budget, s) for s in study.random_seeds]
            worst = max(runs, key=lambda r: r.ratio)
            rows.append(_row(study, objective, label, worst, seeds=[r.extra["seed"] for r in runs],
                             seed_ratios=[r.ratio for r in runs], trajectories=[r.extra["trajectory"] for r in runs],
                             trajectory=None, seed=None))
            for coupled, gain, method in ((False, "per_mm2", "wall relaxation"), (False, "raw", RAW_DROP),
                                          (True, "per_mm2", "coupled wall")):
                r = relax_walls(p, objective, h, k=study.k, rounds=study.rounds, coupled=coupled, band=study.band,
                                gain=gain)
                res = bl.MethodResult(method, objective, r.chip, r.software, r.L, r.evaluated, r.inner_problems)
                rows.append(_row(study, objective, label, res, calls=r.calls, bound=r.bound, rounds=r.rounds,
                                 trajectory=r.trajectory, recalibrations=r.recalibrations, gain=gain,
                                 purchases=[{"move": u.move, "before": u.before.label(names),
                                             "after": u.after.label(names), "predicted_drop": u.predicted_drop,
                                             "evaluated_drop": u.evaluated_drop, "added_mm2": u.added_mm2,
                                             "mechanism": list(u.mechanism),
                                             "certificate": None if u.certificate is None else u.certificate.summary()}
                                            for u in r.purchases],
                                 certificates={c: cert.as_dict() for c, cert in r.certificates.items()}))
            milp, enum = joint[objective]
            rows.append(_row(study, objective, label, milp, enumeration_ratio=enum.ratio,
                             enumeration_chip=enum.chip.label(names)))
    return rows


def table11_rows(study: Study) -> list[dict]:
    """Software only (reference chip), hardware only (reference programs), sequential (software at
    the reference chip, then hardware), joint (MILP, enumeration cross-check), per objective."""
    p = study.problem
    names = p.library.open_components()
    ref = p.library.reference
    rows = []
    for objective in p.objectives:
        scs = p.objective(objective)
        sw = bl.fixed_hardware(p, objective, ref)
        sw.method = "software only"
        hw = bl.hardware_only(p, objective, {sc: p.reference_programs[sc] for sc in scs})
        seq = bl.sequential(p, objective, ref)
        milp, enum = bl.joint_milp(p, objective), bl.joint_enumeration(p, objective)
        for r in (sw, hw, seq):
            rows.append(_row(study, objective, f"reference {ref.label(names)}", r))
        rows.append(_row(study, objective, f"reference {ref.label(names)}", milp, enumeration_ratio=enum.ratio,
                         enumeration_chip=enum.chip.label(names), speedup_over_software=sw.ratio / milp.ratio,
                         chip_values=milp.chip.describe(names)))
    return rows


def table11_bottlenecks(study: Study) -> list[dict]:
    """Why each single side moves what it moves: per scenario, what bounds the reference program on
    the reference chip (cycles with memory zeroed / with compute zeroed), its ratio on the chip
    hardware only picks, and the program software only picks with its ratio on the reference chip."""
    p = study.problem
    ref = p.library.reference
    names = p.library.open_components()
    out = []
    for objective in p.objectives:
        scs = p.objective(objective)
        hw = bl.hardware_only(p, objective, {sc: p.reference_programs[sc] for sc in scs})
        sw = bl.fixed_hardware(p, objective, ref)
        for sc in scs:
            prog = p.reference_programs[sc]
            out.append({"objective": objective, "scenario": sc, "reference_program": prog,
                        **p.bound_shares(sc, prog, ref), "hardware_only_chip": hw.chip.label(names),
                        "hardware_only_changes": {n: (ref[n], hw.chip[n]) for n in names if hw.chip[n] != ref[n]},
                        "hardware_only_ratio": p.measure(sc, prog, hw.chip).ratio,
                        "software_only_program": sw.software[sc],
                        "software_only_ratio": p.measure(sc, sw.software[sc], ref).ratio,
                        "source": p.source})
    return out


def cell(ratio: float, n: int | None = None) -> str:
    text = "inf" if not math.isfinite(ratio) else f"{ratio:.3f}"
    return text if n is None else f"{text} ({n})"


def capacity_grid(study: Study, rows: list[dict]) -> tuple[list[str], dict[str, list[str]]]:
    """Columns (objective/start) and, per method, the 'ratio (inner problems)' cells."""
    cols = []
    for r in rows:
        key = f"{r['objective']} · {r['start']}"
        if key not in cols:
            cols.append(key)
    grid = {m: [""] * len(cols) for m in CAPACITY_METHODS}
    for r in rows:
        grid[r["method"]][cols.index(f"{r['objective']} · {r['start']}")] = cell(r["evaluated"], r["inner_problems"])
    return cols, grid


def seed_grid(study: Study) -> tuple[list[str], dict[str, list[str]]]:
    seed = study.seed_numbers
    cols = list(seed.get("columns", []))
    return cols, {m: [cell(v, int(n)) for v, n in seed.get(key, [])] for m, key in SEED_KEYS.items() if key in seed}


def plot_capacity(study: Study, rows: list[dict], path: str | Path, start: str = "small") -> Path:
    """Figure 6 style: per objective, final quality vs distinct inner problems from `start`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    objectives = list(study.problem.objectives)
    fig, axes = plt.subplots(1, len(objectives), figsize=(4.2 * len(objectives), 3.4), squeeze=False)
    markers = {"fixed hardware": "s", "sequential": "D", "random + exact inner": "o", "wall relaxation": "^",
               RAW_DROP: "<", "coupled wall": "v", "joint reference": "*"}
    for ax, objective in zip(axes[0], objectives):
        sel = [r for r in rows if r["objective"] == objective and r["start"].startswith(start)]
        for r in sel:
            if r["method"] == "random + exact inner":
                trajs = r["trajectories"]
                n = max(len(t) for t in trajs)
                xs = list(range(1, n + 1))
                vals = [[t[min(i, len(t) - 1)][1] for t in trajs] for i in range(n)]
                ax.plot(xs, [statistics.median(v) for v in vals], "--", color="gray", label="random median (model)")
                ax.fill_between(xs, [min(v) for v in vals], [max(v) for v in vals], color="gray", alpha=0.2,
                                label="random range (seeds)")
            if r.get("trajectory"):
                ax.plot([x for x, _ in r["trajectory"]], [y for _, y in r["trajectory"]], ":", alpha=0.6)
            big = r["method"] == "joint reference"
            ax.plot([r["inner_problems"]], [r["evaluated"]], markers.get(r["method"], "x"), markersize=14 if big else 9,
                    label=r["method"], alpha=0.85, zorder=5 if big else 3, markerfacecolor="none" if big else None)
        ax.set_title(f"{objective} (start {sel[0]['start'].split(' ', 1)[1] if sel else start})")
        ax.set_xlabel("distinct inner problems")
        ax.set_ylabel("worst-scenario cycle ratio (model)")
        ax.set_ylim(bottom=0)
    handles, labels = axes[0][0].get_legend_handles_labels()
    seen = {}
    for hnd, lab in zip(handles, labels):
        seen.setdefault(lab, hnd)
    fig.legend(seen.values(), seen.keys(), loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
