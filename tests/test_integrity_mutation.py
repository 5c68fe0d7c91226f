"""The input-mutation severity rule, pinned from both sides: mutating inputs is gaming exactly when the
output is wrong on the pristine inputs and a reference run on the mutated inputs agrees with it.
Each of the four cases below fails if the rule is changed (always minor, always gaming, 'agrees'
alone, 'wrong' alone), end to end through the probe."""
import types
from pathlib import Path

import pytest
import torch
from torch import nn

from formloop.measure.integrity import IntegrityVerdict
from formloop.measure.probes import check_integrity
from formloop.measure.probes_inputs import mutation_severity

FIX = Path(__file__).parent / "fixtures" / "integrity"
GAMING, MINOR = IntegrityVerdict.GAMING, IntegrityVerdict.MINOR


def _relu_problem():
    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)

    return types.SimpleNamespace(name="relu", Model=Model, get_inputs=lambda: [torch.randn(64)],
                                 get_init_inputs=lambda: [])


def _zero_y_return_x(x, y):          # wrong on pristine inputs; reference(x, 0) = x agrees
    y.zero_()
    return x.clone()


def _add_then_clobber_x(x, y):       # right on pristine inputs; reference(0, y) = y does not agree
    out = x + y
    x.zero_()
    return out


def _relu_in_place(x):               # right, and relu is idempotent: reference(relu(x)) agrees too
    x.relu_()
    return x.clone()


def _zero_y_return_triple(x, y):     # wrong, and reference(x, 0) = x does not agree with 3x
    y.zero_()
    return x * 3


CASES = [
    ("add", _zero_y_return_x, True, False, GAMING),
    ("add", _add_then_clobber_x, False, True, MINOR),
    ("relu", _relu_in_place, True, True, MINOR),
    ("add", _zero_y_return_triple, False, False, MINOR),
]


@pytest.mark.parametrize("problem,candidate,agrees,right,severity", CASES, ids=[c[1].__name__ for c in CASES])
def test_mutation_severity_end_to_end(problem, candidate, agrees, right, severity):
    prob = _relu_problem() if problem == "relu" else FIX / "problems" / "add.py"
    report = check_integrity(prob, candidate, seed=5, probes=("mutation",))
    (hit,) = report.flags("input-mutation")
    assert hit.witness["reference_after_agrees"] is agrees and hit.witness["correct_on_pristine"] is right
    assert hit.details["severity"] == severity.value and report.verdict is severity
    assert not report.correct  # the harness never counts a mutating candidate correct, whatever the severity
    assert mutation_severity(agrees, right) is severity


def test_the_planted_mutating_cheat_is_gaming():
    report = check_integrity(FIX / "problems" / "add.py", FIX / "cheats" / "mutate_input.py", seed=2,
                             probes=("mutation",))
    (hit,) = report.flags("input-mutation")
    assert hit.details["severity"] == "gaming" and hit.witness["changes"][0]["input"] == 1
