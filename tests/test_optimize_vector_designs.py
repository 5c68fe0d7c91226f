"""The problem set's single vector ops through `formloop optimize`: at the real (KernelBench) sizes the
elementwise regions take the MILP's flat walk and the row ops designs that pass the register walls; at the
SMALL sizes the interpreter tier keeps the flat layout and the harness accepts the ModelNew (fresh inputs,
poisoned outputs, float64 truth, KernelBench's tolerances; timing off)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.hw.chips import get_chip  # noqa: E402
from formloop.measure.harness import evaluate  # noqa: E402
from formloop.optimize.assemble import assemble  # noqa: E402
from formloop.optimize.attempt import build, problem_file  # noqa: E402
from formloop.optimize.capture import capture  # noqa: E402
from formloop.optimize.recognize import recognize  # noqa: E402
from formloop.sol.problem import load_problem  # noqa: E402

P = Path(__file__).resolve().parents[1] / "problems" / "level1"


@pytest.mark.parametrize("name", ["gelu", "residual_add"])
def test_real_size_elementwise_takes_the_flat_walk(name):
    cap = capture(load_problem(str(P / f"{name}.py"), small=False))
    asm = assemble(cap, recognize(cap), tier="gpu")
    d = asm.regions[0]["design"]
    assert asm.regions[0]["kind"] == "elementwise" and d["solver"] == "milp (HiGHS)"
    assert d["config"]["F"] == 1 and d["config"]["BF"] >= 1024


@pytest.mark.parametrize("name,op", [("row_sum", "sum"), ("log_softmax", "log-softmax")])
def test_real_size_row_ops_pass_the_register_walls(name, op):
    from formloop.library import rowwise
    cap = capture(load_problem(str(P / f"{name}.py"), small=False))
    asm = assemble(cap, recognize(cap), tier="gpu")
    cfg = asm.regions[0]["design"]["config"]
    p = asm.regions[0]
    t = rowwise.make(op, "fp32")
    wl = rowwise.workload(4096, 393216, "fp32") if op == "log-softmax" else rowwise.workload(32768, 32768, "fp32")
    assert not t.check(cfg, wl, get_chip("h200")), (p, cfg)
    live = rowwise.LIVE_LOOP[op]
    assert cfg["W"] * 32 * (live * cfg["BC"] * cfg["RP"] // (32 * cfg["W"]) + 32) <= 65536


def test_row_attempts_spread_the_tile_width_over_the_models_tie_band():
    """row_max at its real size: attempt 0 is the MILP's design; attempts 1-3 are feasible designs of other tile
    widths, each priced within the tie band of the optimum, attempt 1 the farthest width (log2) from the pick.
    Checked against every feasible design the template admits (brute force over the joint menu)."""
    import itertools
    import math

    from formloop.library import rowwise
    from formloop.optimize.vector_regions import TIE_BAND

    cap = capture(load_problem(str(P / "row_max.py"), small=False))
    rec = recognize(cap)
    cfgs = [assemble(cap, rec, tier="gpu", attempt=a).regions[0]["design"]["config"] for a in range(4)]
    t, wl, chip = rowwise.make("max", "fp32"), rowwise.workload(32768, 32768, "fp32"), get_chip("h200")
    assert cfgs[0] == rowwise.solved_design("max", 32768, 32768, "fp32")
    params = t.bind(wl, chip)
    menus = [d.decision.menu for d in (rowwise.BC, rowwise.RP, rowwise.W, rowwise.S)]
    cost = {}
    for v in itertools.product(*menus):
        d = dict(zip("BC RP W S".split(), v))
        if not t.check(d, wl, chip):
            cost[v] = float(t.evaluate_terms(d, params)["cost"])
    best = min(cost.values())
    band_widths = {v[0] for v, c in cost.items() if c <= best * (1 + TIE_BAND)}
    assert len({c["BC"] for c in cfgs}) == 4
    for c in cfgs[1:]:
        assert not t.check(c, wl, chip) and c["BC"] in band_widths
        assert cost[tuple(c[k] for k in "BC RP W S".split())] <= best * (1 + TIE_BAND)
    far = max(abs(math.log2(w) - math.log2(cfgs[0]["BC"])) for w in band_widths)
    assert abs(math.log2(cfgs[1]["BC"]) - math.log2(cfgs[0]["BC"])) == far


@pytest.mark.parametrize("name,chain,shape", [("gelu", "gelu(approx=erf)", (8, 8192)),
                                              ("residual_add", "add(name=other)", (128, 512))])
def test_small_model_new_keeps_the_milp_layout_and_is_accepted(name, chain, shape, tmp_path):
    from formloop.library.elementwise import solved_design
    path = str(P / f"{name}.py")
    b = build(path, small=True, tier="interpreter", attempt=0, out_dir=str(tmp_path))
    assert b["candidate"], b
    src = Path(b["candidate"]).read_text()
    assert f"'F': {solved_design(chain, *shape, 'fp32')['F']}" in src, src[-800:]
    r = evaluate(problem_file(path, True, tmp_path), b["candidate"], sets=1, timing=False, tolerance="kernelbench")
    assert r.correct, r.comparisons


@pytest.mark.parametrize("name", ["batch_norm", "argmax_dim"])
def test_vecops_attempts_take_other_widths_of_the_tie_band(name):
    """vecops regions: attempt 1's kernels (norm: stats and apply; colreduce: the one config) are feasible
    designs of another tile width (BC; colreduce's RP, the run), priced within the tie band of their template's
    optimum; where the band holds no other width, attempt 1 is attempt 0 labelled alike (the engine's repeat)."""
    from formloop.library import vecops
    from formloop.optimize.vector_regions import TIE_BAND
    from formloop.solve.enumerate import ranked_designs

    cap = capture(load_problem(str(P / f"{name}.py"), small=False))
    rec = recognize(cap)
    from formloop.optimize.attempt import kernel_digest

    asm = [assemble(cap, rec, tier="gpu", attempt=a) for a in (0, 1)]
    d0, d1 = (a.regions[0]["design"] for a in asm)
    assert (kernel_digest(asm[0].source) == kernel_digest(asm[1].source)) == (d0 == d1)   # a repeat, by its text
    p = rec.regions[0].params
    keys = ("stats", "apply") if name == "batch_norm" else ("config",)
    assert d0["solver"] == "milp (HiGHS)"
    for key in keys:
        kind = {"stats": "norm-stats", "apply": "norm-apply"}.get(key, "colreduce")
        axis = "RP" if kind == "colreduce" else "BC"
        # the workload the region solved for: the one whose optimum is attempt 0's design
        wl = _vecops_workload(name, key, p)
        f = vecops.make(kind).formulate(wl, get_chip("h200"))
        cost = {tuple(sorted(d.items())): c for d, c in ranked_designs(f, 10_000)}   # every feasible design
        best = min(cost.values())
        assert cost[tuple(sorted(d0[key].items()))] == pytest.approx(best)     # the MILP's pick is optimal
        others = {dict(k)[axis] for k, c in cost.items() if c <= best * (1 + TIE_BAND)} - {d0[key][axis]}
        if others:
            assert d1["solver"].startswith("enumeration") and d1[key][axis] in others, key
            assert cost[tuple(sorted(d1[key].items()))] <= best * (1 + TIE_BAND)
        else:
            assert d1 == d0, key


def _vecops_workload(name, key, p):
    """The region's workload as vecops_regions.choose states it (restated: bytes per kernel)."""
    from formloop.library import vecops

    e = p.get("elem", 4)
    if key == "stats":
        return vecops.workload(p["rows"], p["cols"], p["numel"] * e, elem=e)
    if key == "apply":
        return vecops.workload(p["rows"], p["cols"], 2 * p["numel"] * e, elem=e)
    return vecops.workload(p["rows"], p["cols"], p["numel"] * e + p["rows"] * 8, elem=e)


def test_build_hash_covers_the_source_and_the_library(tmp_path, monkeypatch):
    """attempt.build's source_sha256: the same problem and attempt build the same hash; other kernels in
    formloop.library (the ModelNew text unchanged) or another design give another."""
    from formloop.optimize import attempt as steps

    path = str(P / "row_max.py")
    kw = dict(small=False, tier="gpu", out_dir=str(tmp_path))
    a, b = steps.build(path, attempt=0, **kw), steps.build(path, attempt=0, **kw)
    assert a["source_sha256"] == b["source_sha256"]
    assert steps.build(path, attempt=1, **kw)["source_sha256"] != a["source_sha256"]
    monkeypatch.setattr(steps, "library_digest", lambda: "other kernels")
    c = steps.build(path, attempt=0, **kw)
    assert Path(c["candidate"]).read_text() == Path(a["candidate"]).read_text()
    assert c["source_sha256"] != a["source_sha256"]
    monkeypatch.undo()   # argmax's tie band holds no other run width: attempt 1 builds attempt 0's kernels (the
    am = [steps.build(str(P / "argmax_dim.py"), attempt=k, **kw) for k in (0, 1)]   # header's number aside)
    assert Path(am[0]["candidate"]).read_text() != Path(am[1]["candidate"]).read_text()
    assert am[0]["source_sha256"] == am[1]["source_sha256"]
