"""Every shipped problem, with its own reference run as the candidate: the harness finds it correct,
every dynamic probe stays silent (no false positives across attention, conv, norms, a decoder layer),
and the static detector calls it what it is: PyTorch only."""
from pathlib import Path

import pytest

from formloop.measure.probes import check_integrity
from formloop.measure.integrity import IntegrityVerdict
from formloop.sol.problem import load_problem

PROBLEMS = sorted((Path(__file__).parents[1] / "problems").rglob("*.py"))   # level folders (problems/README.md)


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.stem)
def test_reference_as_candidate_is_torch_only_and_nothing_else(path):
    problem = load_problem(path, small=True)      # the CPU-test sizes: full sizes are for the GPU
    report = check_integrity(problem, problem.Model, seed=13)
    assert report.correct
    assert [c.obligation for c in report.flags()] == ["torch-only"], [(c.obligation, c.reason) for c in report.flags()]
    assert report.verdict is IntegrityVerdict.TORCH_ONLY and not report.accepted


def test_there_are_shipped_problems():
    assert len(PROBLEMS) >= 20
