"""Shared CLI plumbing: one-line errors with exit status 2, strict JSON output, option lists."""
from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Sequence

import typer
from rich.console import Console

from formloop.errors import FormloopError, InvalidInput
from formloop.workload import EXTENTS

console = Console()
err_console = Console(stderr=True)
SHAPE_HELP = f"extents M,N,K or named (M=..,N=..,K=..); {EXTENTS}"


def friendly(fn: Callable) -> Callable:
    """Turn formloop's errors into one clear line on stderr and exit status 2 (no traceback)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FormloopError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
    return wrapper


def print_json(obj) -> None:
    """An api result as strict JSON (api results carry no inf/nan: they are null with a note)."""
    sys.stdout.write(json.dumps(obj, indent=2, allow_nan=False) + "\n")


def parse_options(pairs: Sequence[str] | None) -> dict[str, str]:
    """Repeated --option NAME=VALUE into a dict (a name given twice is refused)."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or name.strip() in out:
            raise InvalidInput("--option", pair, "NAME=VALUE, each name once, e.g. pre=weak")
        out[name.strip()] = value.strip()
    return out


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)
