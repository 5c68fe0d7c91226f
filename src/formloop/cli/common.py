"""Shared CLI plumbing: one-line errors with exit status 2, shape parsing, JSON output."""
from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable

import typer
from rich.console import Console

from formloop.errors import FormloopError, InvalidInput

console = Console()
err_console = Console(stderr=True)


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


def parse_shape(text: str, names: tuple[str, ...] = ("M", "N", "K")) -> tuple[int, ...]:
    """'M,N,K' as positive integers; anything else names the field and what is allowed."""
    parts = [p.strip() for p in text.split(",")]
    allowed = f"{len(names)} positive integers separated by commas ({','.join(names)})"
    if len(parts) != len(names):
        raise InvalidInput("shape", text, allowed)
    out = []
    for name, p in zip(names, parts):
        try:
            value = int(p)
        except ValueError:
            raise InvalidInput(f"shape {name}", p, allowed) from None
        if value < 1:
            raise InvalidInput(f"shape {name}", value, "a positive integer (>= 1)")
        out.append(value)
    return tuple(out)


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=_default) + "\n")


def _default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if hasattr(o, "value"):
        return o.value
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
