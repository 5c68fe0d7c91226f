"""Every CLI argument's declared range and every path's declared kind, in one place.

Each validator is a typer callback (numbers: a typer `parser`, so that it sees the text as typed)
and runs while the command line is parsed, before the command body, so a violation writes nothing.
A violation prints one line naming the argument and what is allowed
(`error: invalid --seed: -1; allowed: an integer 0 ... 4294967295 in ASCII digits (2^32-1)`), exit 2.
The bounds are stated in the help of each option (`help=SEED_HELP` and the like), from the same
constants the validators use.

Ranges:     extents 1 ... 2^31-1 (formloop.workload, the one shape parser), seeds 0 ... 2^32-1,
            warps 1 ... MAX_WARPS and phases 1 ... MAX_PHASES (what the schedule checker finishes in
            about a minute), solver timeouts 0 < t <= 3600 s, run timeouts 0 < t <= 86400 s.
Path kinds: an existing file (optionally UTF-8 text, optionally with a given suffix), a new file
            (its directory exists, it is not a directory; an existing file is replaced), a directory
            (existing, or new under an existing parent)."""
from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer

from formloop.errors import FormloopError, InvalidInput

MAX_SEED = 2**32 - 1
MAX_WARPS = 8
MAX_PHASES = 16
MAX_SOLVER_TIMEOUT_S = 3600.0
MAX_RUN_TIMEOUT_S = 86400.0
TEXT_PROBE_BYTES = 1 << 20
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)

SEED_RANGE = f"0 ... {MAX_SEED} (2^32-1)"
WARPS_RANGE = f"1 ... {MAX_WARPS}"
PHASES_RANGE = f"1 ... {MAX_PHASES}"
SOLVER_TIMEOUT_RANGE = f"0 < t <= {MAX_SOLVER_TIMEOUT_S:g}"


def fail(exc: FormloopError) -> NoReturn:
    """The one-line error and exit status 2 (the format `common.friendly` prints)."""
    from formloop.cli.common import err_console

    err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True, markup=True)
    raise typer.Exit(2)


def _checked(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def callback(value: Any) -> Any:
        if value is None:
            return None
        try:
            if isinstance(value, (list, tuple)):
                return [check(v) for v in value]
            return check(value)
        except FormloopError as exc:
            fail(exc)
    return callback


# -- numbers ----------------------------------------------------------------------------------

def int_range(field: str, lo: int, hi: int, note: str = "") -> Callable[[Any], Any]:
    """An integer lo ... hi (both included) in ASCII digits. A typer `parser=`: it sees the text as
    typed, so '４０９６' and '4_096', which int() would take, are refused."""
    allowed = f"an integer {lo} ... {hi} in ASCII digits" + (f" ({note})" if note else "")

    def check(v: Any) -> int:
        if isinstance(v, str):
            v = int(v.strip()) if _INT.fullmatch(v.strip()) else v
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise InvalidInput(field, v, allowed)
        return v
    return _checked(check)


def float_range(field: str, lo: float, hi: float, *, lo_open: bool = True, hi_open: bool = False,
                unit: str = "") -> Callable[[Any], Any]:
    """A finite number in (lo, hi] by default (`lo_open`/`hi_open` say which ends are excluded),
    written in ASCII (a typer `parser=`, like `int_range`)."""
    allowed = f"a finite number {lo:g} {'<' if lo_open else '<='} x {'<' if hi_open else '<='} {hi:g}" + \
        (f" ({unit})" if unit else "")

    def check(v: Any) -> float:
        if isinstance(v, str):
            v = float(v.strip()) if _FLOAT.fullmatch(v.strip()) else v
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
        if not ok:
            raise InvalidInput(field, v, allowed)
        return v
    return _checked(check)


def choice(field: str, values: Sequence[str]) -> Callable[[Any], Any]:
    """One of `values` exactly."""
    def check(v: Any) -> str:
        if v not in values:
            raise InvalidInput(field, v, values)
        return v
    return _checked(check)


def number_list(field: str, *, lo: float, hi: float, integer: bool = False, off: bool = True) -> Callable:
    """A non-empty comma-separated list of numbers lo ... hi (and 'off' where `off`)."""
    kind = "integers" if integer else "finite numbers"
    allowed = f"comma-separated {kind} {lo:g} ... {hi:g}" + (" or 'off'" if off else "") + ", at least one"

    def check(v: Any) -> str:
        parts = [p.strip() for p in str(v).split(",")]
        if not parts or any(not p for p in parts):
            raise InvalidInput(field, v, allowed)
        for p in parts:
            if off and p == "off":
                continue
            try:
                x = int(p) if integer and p.isascii() else float(p) if p.isascii() else None
            except ValueError:
                x = None
            if x is None or not math.isfinite(x) or not lo <= x <= hi:
                raise InvalidInput(field, v, allowed)
        return v
    return _checked(check)


# -- paths ------------------------------------------------------------------------------------

def existing_file(field: str, *, suffix: str | None = None, text: bool = False) -> Callable[[Any], Any]:
    """An existing regular file (with `suffix`; UTF-8 text where `text`)."""
    what = "an existing " + (f"{suffix} " if suffix else "") + ("UTF-8 text " if text else "") + "file"

    def check(v: Any) -> Any:
        p = Path(str(v)).expanduser()
        if not p.is_file():
            raise InvalidInput(field, str(v), what + (" (this is a directory)" if p.is_dir() else ""))
        if suffix and p.suffix != suffix:
            raise InvalidInput(field, str(v), what)
        if not os.access(p, os.R_OK):
            raise InvalidInput(field, str(v), what + " readable by this user")
        if text:
            with p.open("rb") as f:
                head = f.read(TEXT_PROBE_BYTES)
            try:
                head.decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.start < len(head) - 4:  # not just a character cut at the probe's end
                    raise InvalidInput(field, str(v), what + f" (byte {exc.start} is not UTF-8)") from None
            if b"\x00" in head:
                raise InvalidInput(field, str(v), what + " (it holds NUL bytes: a binary file)")
        return v
    return _checked(check)


def calibration_file(field: str = "--calibration") -> Callable[[Any], Any]:
    """'prior' (ignore the store's calibration) or an existing UTF-8 calibration JSON."""
    as_file = existing_file(field, text=True)
    return lambda v: v if v in (None, "prior") else as_file(v)


def new_file(field: str, *, replace: bool = True) -> Callable[[Any], Any]:
    """A file to write: not a directory, its directory exists and is writable; an existing file is
    replaced where `replace`, else refused."""
    what = "a file path whose directory exists and is writable (not a directory)" + \
        ("" if replace else "; no file there yet (nothing is overwritten)")

    def check(v: Any) -> Any:
        p = Path(str(v)).expanduser()
        if not str(v).strip() or p.is_dir():
            raise InvalidInput(field, str(v), what)
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise InvalidInput(field, str(v), what)
        if not replace and (p.exists() or p.is_symlink()):
            raise InvalidInput(field, str(v), what)
        if p.exists() and (not p.is_file() or not os.access(p, os.W_OK)):
            raise InvalidInput(field, str(v), what + "; an existing entry must be a writable regular file")
        return v
    return _checked(check)


def directory(field: str, *, may_create: bool = True) -> Callable[[Any], Any]:
    """A directory: existing, or (where `may_create`) new under an existing writable parent."""
    what = "a directory" + (" (existing, or new under an existing writable directory)" if may_create else
                            " that exists")

    def check(v: Any) -> Any:
        p = Path(str(v)).expanduser()
        if not str(v).strip():
            raise InvalidInput(field, str(v), what)
        if p.is_dir():
            return v
        if p.exists() or not may_create or not p.parent.is_dir() or not os.access(p.parent, os.W_OK | os.X_OK):
            raise InvalidInput(field, str(v), what)
        return v
    return _checked(check)


# -- ready-made callbacks and their help text -------------------------------------------------

seed = int_range("--seed", 0, MAX_SEED, "2^32-1")
SEED_HELP = f"seed, {SEED_RANGE}"
warps = int_range("--warps", 1, MAX_WARPS, "what the schedule checker finishes in about a minute")
phases = int_range("--phases", 1, MAX_PHASES, "what the schedule checker finishes in about a minute")
solver_timeout = float_range("--timeout", 0, MAX_SOLVER_TIMEOUT_S, unit="seconds per solver query")
run_timeout = float_range("--timeout", 0, MAX_RUN_TIMEOUT_S, unit="seconds of wall clock")
clock_mhz = float_range("--clock-mhz", 0, 10000, unit="MHz")
