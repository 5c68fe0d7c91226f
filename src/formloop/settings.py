"""Typed settings, read from the environment once per call of `load_settings`.

Each field names its environment variable; a value that does not parse is refused with the
variable's name and what it accepts (never silently replaced by the default)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

from formloop.errors import InvalidInput

DEFAULT_STORE = Path(".formloop") / "population.db"
TIERS = ("auto", "model", "gpu")  # the evaluator tiers formloop.evaluate provides


@dataclass(frozen=True)
class Settings:
    """store_path: the population database (FORMLOOP_STORE).
    solver_time_limit_s: wall limit for one MILP solve (FORMLOOP_SOLVER_TIME_LIMIT).
    prove_timeout_s: limit handed to the verifier per template (FORMLOOP_PROVE_TIMEOUT).
    busy_timeout_ms: how long a writer waits for a lock held by another process (FORMLOOP_BUSY_TIMEOUT_MS).
    tier: evaluation tier; 'auto' takes the best one available (FORMLOOP_TIER)."""

    store_path: Path = DEFAULT_STORE
    solver_time_limit_s: float = 60.0
    prove_timeout_s: float = 120.0
    busy_timeout_ms: int = 30_000
    tier: str = "auto"

    def with_overrides(self, **values) -> "Settings":
        """A copy with the given fields replaced (None leaves a field as it is)."""
        known = {f.name for f in fields(self)}
        unknown = set(values) - known
        if unknown:
            raise InvalidInput("setting", sorted(unknown), sorted(known))
        clean = {k: v for k, v in values.items() if v is not None}
        if "store_path" in clean:
            clean["store_path"] = Path(clean["store_path"])
        out = replace(self, **clean)
        _validate(out)
        return out


ENV = {
    "store_path": "FORMLOOP_STORE",
    "solver_time_limit_s": "FORMLOOP_SOLVER_TIME_LIMIT",
    "prove_timeout_s": "FORMLOOP_PROVE_TIMEOUT",
    "busy_timeout_ms": "FORMLOOP_BUSY_TIMEOUT_MS",
    "tier": "FORMLOOP_TIER",
}


def _positive(var: str, text: str, kind: type) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        raise InvalidInput(var, text, f"a positive {'whole number' if kind is int else 'number'}") from None
    if not value > 0:
        raise InvalidInput(var, text, f"a positive {'whole number' if kind is int else 'number'}")
    return value


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from `env` (default: the process environment) over the defaults."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    if env.get(ENV["store_path"]):
        values["store_path"] = Path(env[ENV["store_path"]])
    for name, kind in (("solver_time_limit_s", float), ("prove_timeout_s", float), ("busy_timeout_ms", int)):
        if env.get(ENV[name]):
            values[name] = _positive(ENV[name], env[ENV[name]], kind)
    if env.get(ENV["tier"]):
        values["tier"] = env[ENV["tier"]]
    out = Settings(**values)
    _validate(out)
    return out


def _validate(s: Settings) -> None:
    if s.tier not in TIERS:
        raise InvalidInput(f"tier ({ENV['tier']})", s.tier, TIERS)
    for name in ("solver_time_limit_s", "prove_timeout_s", "busy_timeout_ms"):
        if not getattr(s, name) > 0:
            raise InvalidInput(f"{name} ({ENV[name]})", getattr(s, name), "a positive number")
