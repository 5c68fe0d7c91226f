"""`formloop optimize`'s vecops regions end to end at the problems' SMALL sizes in the Triton interpreter:
each problem captured, recognized, its region given an instance, the ModelNew assembled and written
(attempt.build), then judged by the harness (formloop.measure.harness.evaluate: fresh inputs, poisoned
outputs, the float64 truth, KernelBench's tolerances; timing off, the interpreter's times mean nothing)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
os.environ.setdefault("TRITON_INTERPRET", "1")

from formloop.measure.harness import evaluate  # noqa: E402
from formloop.optimize.attempt import bootstrap, build, problem_file  # noqa: E402

P = Path(__file__).resolve().parents[1] / "problems" / "level1"
CASES = {"group_norm": ("vecops-norm", "module_norm("), "instance_norm": ("vecops-norm", "module_norm("),
         "batch_norm": ("vecops-norm", "module_norm("), "cumsum": ("vecops-scan", "row_scan("),
         "argmax_dim": ("vecops-colreduce", "col_argreduce('argmax'"),
         "cross_entropy": ("vecops-xent", "cross_entropy("), "max_pool2d": ("vecops-gather", "max_pool2d("),
         "unfold_patches": ("vecops-gather", "unfold2d(")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_problem_gets_a_vecops_region_that_the_harness_accepts(name, tmp_path):
    kind, call = CASES[name]
    path = str(P / f"{name}.py")
    boot = bootstrap(path, small=True, chip="h200")
    assert boot["status"] == "ready", boot["reason"]
    assert [r["kind"] for r in boot["recognition"]["regions"]] == [kind]
    b = build(path, small=True, tier="interpreter", attempt=0, out_dir=str(tmp_path))
    assert b["candidate"], b
    src = Path(b["candidate"]).read_text()
    assert call in src
    r = evaluate(problem_file(path, True, tmp_path), b["candidate"], sets=1, timing=False, tolerance="kernelbench")
    assert r.correct, r.comparisons


def test_gpu_designs_are_the_milp_s():
    """At the real (KernelBench) size the instance is the template's MILP design, not the interpreter tile."""
    from formloop.library.vecops import solved_design
    from formloop.optimize.assemble import assemble
    from formloop.optimize.capture import capture
    from formloop.optimize.recognize import recognize
    from formloop.sol.problem import load_problem

    cap = capture(load_problem(str(P / "instance_norm.py"), small=False))
    asm = assemble(cap, recognize(cap), tier="gpu")
    d = asm.regions[0]["design"]
    assert d["solver"] == "milp (HiGHS)"
    n, c, hw = 112, 64, 512 * 512
    assert d["stats"] == solved_design("norm-stats", n * c, hw, n * c * hw * 4)
    assert d["apply"] == solved_design("norm-apply", n * c, hw, 2 * n * c * hw * 4)


def test_a_norm_region_feeds_a_later_region(tmp_path):
    """BatchNorm2d -> relu -> scale: the norm's call is the node the elementwise region reads (a conv in
    front, as in level2/conv_bn_relu, is a conv region that takes the norm into its own chain)."""
    path = str(Path(__file__).resolve().parent / "fixtures" / "optimize" / "bn_relu.py")
    b = build(path, small=True, tier="interpreter", attempt=0, out_dir=str(tmp_path))
    assert b["candidate"], b
    kinds = [r["kind"] for r in b["regions"]]
    assert "vecops-norm" in kinds and "elementwise" in kinds
    r = evaluate(problem_file(path, True, tmp_path), b["candidate"], sets=1, timing=False, tolerance="kernelbench")
    assert r.correct, r.comparisons
