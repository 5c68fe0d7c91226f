"""Results as strict JSON: what every api function returns and both faces print unchanged.

`plain` turns dataclasses, enums, numpy scalars, tuples and paths into JSON values. JSON has no
infinity and no NaN, so a non-finite float becomes null and the result says where and what it was
under `non_finite` (path -> "inf" | "-inf" | "nan"): an infinite latency is a failed instance, an
infinite gap a solve without a bound, and neither may silently read as a number."""
from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from pathlib import PurePath
from typing import Any

NON_FINITE = "non_finite"


def plain(result: Mapping[str, Any]) -> dict[str, Any]:
    """`result` as strict JSON values, with `non_finite` added when a float had to become null."""
    found: dict[str, str] = {}
    out = _walk(dict(result), "", found)
    if found:
        out[NON_FINITE] = {**out.get(NON_FINITE, {}), **found}
    return out


def _walk(obj: Any, path: str, found: dict[str, str]) -> Any:
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        found[path or "."] = "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
        return None
    if isinstance(obj, enum.Enum):
        return _walk(obj.value, path, found)
    if isinstance(obj, PurePath):
        return str(obj)
    if is_dataclass(obj) and not isinstance(obj, type):
        obj = obj.as_dict() if hasattr(obj, "as_dict") else asdict(obj)
    if isinstance(obj, Mapping):
        return {str(k): _walk(v, f"{path}.{k}" if path else str(k), found) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=str) if isinstance(obj, (set, frozenset)) else obj
        return [_walk(v, f"{path}[{i}]", found) for i, v in enumerate(items)]
    if hasattr(obj, "item"):  # numpy scalars
        return _walk(obj.item(), path, found)
    return str(obj)


def with_non_finite(result: Mapping[str, Any]) -> dict[str, Any]:
    """A `plain` result with its non-finite floats put back (for renderers that print 'inf')."""
    out = _copy(result)
    for path, text in dict(result.get(NON_FINITE) or {}).items():
        _assign(out, path, float(text))
    return out


def _copy(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


def _assign(root: Any, path: str, value: float) -> None:
    steps = [int(p[:-1]) if p.endswith("]") else p for p in path.replace("[", ".").split(".") if p]
    node = root
    for step in steps[:-1]:
        node = node[step]
    if steps:
        node[steps[-1]] = value
