"""What the MCP server puts around every tool call: configured roots, a child process, a time limit,
strict JSON.

1. Roots. A tool argument that names a file formloop would run or read as a study (a template
   `path.py:NAME`, a problem file, a study TOML, a spec file) must lie under one of the configured
   roots: the project's `examples/` and `studies/` folders and the directories listed in
   FORMLOOP_TEMPLATE_ROOTS (separated by the OS path separator, e.g. `:` on Linux). A proof store
   (prove_chain's `store`) may also lie in the directory of the server's population store.
   Anything else is refused with `OutsideRoots`, before any file is opened. Symlinks are resolved
   first, so a link inside a root to a file outside is refused too.
2. A child process. The tool runs in a child (formloop.measure.sandbox) under FORMLOOP_TOOL_TIMEOUT
   seconds (default 600): sys.exit, os._exit, KeyboardInterrupt, signals, endless loops and any other
   BaseException in a tool become a structured error `ToolCrashed`, `ToolTimedOut` or `ToolExited`
   naming the verdict; the server process never runs tool code itself and survives every call.
   What the child prints goes to stderr, never into the stdio protocol.
3. Strict JSON. The answer is checked with `json.dumps(allow_nan=False)`; a non-finite float that
   slipped through becomes null with its text under `non_finite` (formloop.api.values.plain)."""
from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from formloop.api.values import plain
from formloop.errors import FormloopError, InvalidInput
from formloop.measure import sandbox
from formloop.settings import Settings

PROJECT = Path(__file__).resolve().parents[3]
PROJECT_ROOTS = (PROJECT / "examples", PROJECT / "studies")
ROOTS_ENV = "FORMLOOP_TEMPLATE_ROOTS"
TIMEOUT_ENV = "FORMLOOP_TOOL_TIMEOUT"
DEFAULT_TOOL_TIMEOUT_S = 600.0
# argument name -> (what it is, suffixes allowed); a template argument is checked only as PATH.py:NAME
PATH_ARGS = {"template": ("template file", (".py",)), "spec": ("template file", (".py",)),
             "problem": ("problem file", (".py",)), "study": ("study file", (".toml",)),
             "path": ("spec file", None), "store": ("proof store", None)}
VERDICT_ERRORS = {"crashed": "ToolCrashed", "timed-out": "ToolTimedOut", "exited": "ToolExited"}


class OutsideRoots(InvalidInput):
    """A file argument outside the server's configured roots."""


def roots(env: dict[str, str] | None = None) -> tuple[Path, ...]:
    """Where template, problem, study and spec files may come from."""
    env = os.environ if env is None else env
    extra = [Path(p).expanduser() for p in env.get(ROOTS_ENV, "").split(os.pathsep) if p.strip()]
    return tuple(p.resolve() for p in (*PROJECT_ROOTS, *extra))


def store_roots(settings: Settings, env: dict[str, str] | None = None) -> tuple[Path, ...]:
    """Where a proof store may lie: the roots and the directory of the server's population store."""
    return (*roots(env), Path(settings.store_path).expanduser().resolve().parent)


def tool_timeout(env: dict[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    text = env.get(TIMEOUT_ENV, "")
    if not text:
        return DEFAULT_TOOL_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value <= 86400):
        raise InvalidInput(TIMEOUT_ENV, text, "seconds, 0 < t <= 86400")
    return value


def check_paths(kwargs: dict[str, Any], allowed: tuple[Path, ...], stores: tuple[Path, ...] = ()) -> None:
    """Refuse every file argument outside `allowed` (a proof store: outside `stores`) with OutsideRoots,
    before anything is opened."""
    for name, (what, suffixes) in PATH_ARGS.items():
        within = stores if name == "store" else allowed
        value = kwargs.get(name)
        if not isinstance(value, str) or not value:
            continue
        text = value
        if name in ("template", "spec"):
            head, sep, tail = value.rpartition(":")
            if not (sep and head.endswith(".py") and tail.isidentifier()):
                continue  # a library template name, not a file
            text = head
        path = Path(text).expanduser()
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            raise OutsideRoots(name, value, "a path that resolves") from None
        if suffixes and real.suffix not in suffixes:
            raise OutsideRoots(name, value, f"a {what} ({', '.join(suffixes)}) under the server's roots")
        if not any(real == r or r in real.parents for r in within):
            raise OutsideRoots(name, value, f"a {what} under the server's roots: {', '.join(map(str, within))} "
                                            f"(add directories with {ROOTS_ENV})")


def call_tool(settings: Settings, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What runs in the child: the tool, its errors as structured results."""
    from formloop.agent.server import Tools, structured

    return structured(getattr(Tools(settings), name))(**kwargs)


def strict(result: Any) -> dict[str, Any]:
    """`result` as a strict-JSON object (non-finite floats -> null with a note)."""
    if not isinstance(result, dict):
        result = {"ok": False, "error": {"type": "InternalError", "message": f"a tool returned "
                                         f"{type(result).__name__}, not an object", "field": None, "allowed": None,
                                         "fix": None}}
    try:
        json.dumps(result, allow_nan=False)
        return result
    except (ValueError, TypeError):
        return plain(result)


def error(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "error": {"type": kind, "message": message, "field": None, "allowed": None, "fix": None,
                                   **extra}}


def guarded(settings: Settings, name: str, method: Callable[..., dict]) -> Callable[..., dict]:
    """The server's form of tool `name`: roots checked here, the tool run in a child, strict JSON."""
    sig = inspect.signature(method)
    allowed, stores = roots(), store_roots(settings)
    limit = tool_timeout()

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            bound = sig.bind(*args, **kwargs)
            call = dict(bound.arguments)
            check_paths(call, allowed, stores)
            outcome = sandbox.run_in_child(call_tool, settings, name, call,
                                           limits=sandbox.Limits(wall_s=limit))
        except FormloopError as exc:
            return strict({"ok": False, "error": {"type": type(exc).__name__, "message": str(exc),
                                                  "field": getattr(exc, "field", None),
                                                  "allowed": getattr(exc, "allowed", None), "fix": exc.fix}})
        except TypeError as exc:  # arguments that do not fit the tool's signature
            return error("InvalidInput", f"arguments of {name}: {exc}")
        except BaseException as exc:  # noqa: BLE001 - the server outlives anything a call raises
            return error("InternalError", f"{type(exc).__name__}: {str(exc)[:300]}")
        if outcome.ok:
            return strict(outcome.value)
        kind = VERDICT_ERRORS.get(outcome.status.value, "ToolFailed")
        return error(kind, f"tool {name} {outcome.status.value}: {outcome.message}", verdict=outcome.status.value,
                     step=outcome.step, exitcode=outcome.exitcode, seconds=round(outcome.seconds, 3))
    wrapper.__signature__ = sig.replace(return_annotation=dict[str, Any])
    return wrapper
