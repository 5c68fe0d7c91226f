"""Attempt logs: one JSON object per line, replayed offline by the scheduler and the metrics.

An attempt line:

    {"problem": "gemm_4096", "attempt": 3, "runtime_s": 0.00041, "tokens": 5200,
     "status": "correct", "verdict": "clean", "ref_runtime_s": 0.0009, "sol_runtime_s": 0.00018}

`status` is correct | incorrect | error (`runtime_s` may be null unless correct); `verdict` is the
integrity verdict clean | minor | gaming | torch-only. `ref_runtime_s` (the PyTorch reference) and
`sol_runtime_s` (the most generous speed-of-light floor, e.g. FP16 tensor cores) are per problem:
give them on every attempt line or once on a line {"type": "problem", "problem": ..., ...}.

An attempt is *accepted* when it is correct; integrity-*filtered* acceptance also needs a clean or
minor verdict and a runtime not more than 10% below the SOL floor (the SOL-ceiling detector)."""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formloop.errors import InvalidInput
from formloop.measure.integrity import ACCEPTED, SOL_CEILING_MARGIN, IntegrityVerdict, parse_verdict

STATUSES = ("correct", "incorrect", "error")


@dataclass(frozen=True)
class Attempt:
    attempt: int
    runtime_s: float | None
    tokens: int
    status: str
    verdict: IntegrityVerdict

    def accepted(self, problem: "ProblemLog", filtered: bool = True) -> bool:
        if self.status != "correct" or self.runtime_s is None:
            return False
        if not filtered:
            return True
        return self.verdict in ACCEPTED and not problem.below_ceiling(self.runtime_s)

    def exclusion(self, problem: "ProblemLog") -> str | None:
        """Why integrity filtering drops a correct attempt (None when it keeps it)."""
        if self.status != "correct" or self.runtime_s is None:
            return None
        if problem.below_ceiling(self.runtime_s):
            return "sol-ceiling"
        if self.verdict not in ACCEPTED:
            return self.verdict.value
        return None


@dataclass
class ProblemLog:
    name: str
    ref_runtime_s: float
    sol_runtime_s: float
    attempts: list[Attempt] = field(default_factory=list)

    def below_ceiling(self, runtime_s: float) -> bool:
        return runtime_s < (1.0 - SOL_CEILING_MARGIN) * self.sol_runtime_s

    @property
    def tokens(self) -> int:
        return sum(a.tokens for a in self.attempts)


@dataclass
class AttemptLog:
    problems: dict[str, ProblemLog]
    source: str = ""

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.problems.values())

    @property
    def max_attempts(self) -> int:
        return max((len(p.attempts) for p in self.problems.values()), default=0)


def _number(rec: dict, key: str, where: str, *, nullable: bool = False, integer: bool = False) -> Any:
    v = rec.get(key)
    if v is None and nullable:
        return None
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool) or v < 0 or (not integer and v == 0):
        allowed = "an integer >= 0" if integer else ("positive seconds" + (" or null" if nullable else ""))
        raise InvalidInput(f"{where} field {key}", v, allowed)
    return int(v) if integer else float(v)


def parse_log(lines: Iterable[str | dict], source: str = "<log>") -> AttemptLog:
    consts: dict[str, tuple[float, float]] = {}
    raw: dict[str, list[Attempt]] = {}
    for n, line in enumerate(lines, 1):
        if isinstance(line, str):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"{source} line {n}", line[:60], "one JSON object per line", fix=exc.msg) from None
        else:
            rec = line
        where = f"{source} line {n}"
        if not isinstance(rec, dict) or not isinstance(rec.get("problem"), str):
            raise InvalidInput(f"{where} field problem", rec.get("problem") if isinstance(rec, dict) else rec,
                               "a problem name (string)")
        name = rec["problem"]
        if "ref_runtime_s" in rec or "sol_runtime_s" in rec:
            pair = (_number(rec, "ref_runtime_s", where), _number(rec, "sol_runtime_s", where))
            if consts.setdefault(name, pair) != pair:
                raise InvalidInput(f"{where} ref/sol runtimes of {name}", pair,
                                   f"the values given before: {consts[name]}")
        if rec.get("type") == "problem":
            continue
        status = rec.get("status")
        if status not in STATUSES:
            raise InvalidInput(f"{where} field status", status, STATUSES)
        attempt = Attempt(_number(rec, "attempt", where, integer=True),
                          _number(rec, "runtime_s", where, nullable=status != "correct"),
                          _number(rec, "tokens", where, integer=True), status,
                          parse_verdict(rec.get("verdict", "clean")))
        raw.setdefault(name, []).append(attempt)
    problems = {}
    for name, attempts in raw.items():
        if name not in consts:
            raise InvalidInput(f"{source} problem {name}", "no ref_runtime_s/sol_runtime_s",
                               "both, on a line of that problem")
        attempts.sort(key=lambda a: a.attempt)
        dup = [a.attempt for a, b in zip(attempts, attempts[1:]) if a.attempt == b.attempt]
        if dup:
            raise InvalidInput(f"{source} problem {name} attempt", dup[0], "each attempt number once")
        problems[name] = ProblemLog(name, *consts[name], attempts)
    if not problems:
        raise InvalidInput(f"{source}", "no attempts", "at least one attempt line")
    return AttemptLog(problems, source)


def load_log(path: str | Path) -> AttemptLog:
    p = Path(path)
    if not p.is_file():
        raise InvalidInput("log path", str(path), "an existing JSONL file")
    try:
        with p.open(encoding="utf-8") as f:
            return parse_log(f, source=p.name)
    except UnicodeDecodeError as exc:
        raise InvalidInput("log path", str(path), f"a UTF-8 JSONL file (byte {exc.start} is not UTF-8)") from None


def dump_log(records: Iterable[dict], path: str | Path) -> None:
    with Path(path).open("w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
