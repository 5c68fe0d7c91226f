"""Typed, environment-backed settings: defaults, parsing, and refusals that name the variable."""
from __future__ import annotations

from pathlib import Path

import pytest

from formloop.errors import InvalidInput
from formloop.settings import DEFAULT_STORE, load_settings


def test_defaults():
    s = load_settings({})
    assert s.store_path == DEFAULT_STORE == Path(".formloop/population.db")
    assert s.tier == "auto" and s.solver_time_limit_s > 0 and s.prove_timeout_s > 0


def test_environment_values_are_typed():
    s = load_settings({"FORMLOOP_STORE": "/tmp/x.db", "FORMLOOP_SOLVER_TIME_LIMIT": "2.5",
                       "FORMLOOP_PROVE_TIMEOUT": "7", "FORMLOOP_BUSY_TIMEOUT_MS": "100", "FORMLOOP_TIER": "model"})
    assert (s.store_path, s.solver_time_limit_s, s.prove_timeout_s, s.busy_timeout_ms, s.tier) == (
        Path("/tmp/x.db"), 2.5, 7.0, 100, "model")
    assert s.with_overrides(store_path="/tmp/y.db", tier=None).store_path == Path("/tmp/y.db")


@pytest.mark.parametrize("env, name", [
    ({"FORMLOOP_SOLVER_TIME_LIMIT": "soon"}, "FORMLOOP_SOLVER_TIME_LIMIT"),
    ({"FORMLOOP_PROVE_TIMEOUT": "-1"}, "FORMLOOP_PROVE_TIMEOUT"),
    ({"FORMLOOP_BUSY_TIMEOUT_MS": "1.5"}, "FORMLOOP_BUSY_TIMEOUT_MS"),
    ({"FORMLOOP_TIER": "fastest"}, "FORMLOOP_TIER"),
])
def test_bad_values_name_their_variable(env, name):
    with pytest.raises(InvalidInput, match=name):
        load_settings(env)


def test_unknown_override_is_refused():
    with pytest.raises(InvalidInput, match="setting"):
        load_settings({}).with_overrides(colour="blue")
