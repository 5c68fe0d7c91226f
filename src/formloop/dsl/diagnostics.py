"""Diagnostics of a spec: each names where (line, column), which field, the value written and the
values allowed there. A spec with any diagnostic is refused before anything is compiled."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from formloop.errors import InvalidInput


@dataclass(frozen=True)
class Diagnostic:
    line: int
    column: int
    field: str
    value: object
    allowed: str
    message: str = ""

    def text(self, source: str = "<spec>") -> str:
        why = f" ({self.message})" if self.message else ""
        return f"{source}:{self.line}:{self.column}: {self.field} = {self.value!s}{why}; allowed: {self.allowed}"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["value"] = self.value if isinstance(self.value, (int, float, str, type(None))) else str(self.value)
        return d


class SpecError(InvalidInput):
    """A spec that breaks a rule; `diagnostics` lists every broken rule found (sorted by place)."""

    def __init__(self, source: str, diagnostics: Iterable[Diagnostic]):
        self.source = source
        self.diagnostics = tuple(sorted(diagnostics, key=lambda d: (d.line, d.column, d.field)))
        first = self.diagnostics[0]
        more = len(self.diagnostics) - 1
        super().__init__(first.field, first.value, first.allowed,
                         fix=f"{source}:{first.line}:{first.column}" + (f"; {first.message}" if first.message else "")
                         + (f"; and {more} more" if more else ""))

    def lines(self) -> list[str]:
        return [d.text(self.source) for d in self.diagnostics]


class Collector:
    """Gathers diagnostics while a spec is read and checked; `raise_if_any` refuses the spec."""

    def __init__(self, source: str):
        self.source = source
        self.items: list[Diagnostic] = []

    def add(self, pos, field: str, value: object, allowed, message: str = "") -> None:
        line, column = pos if pos is not None else (1, 1)
        allowed = allowed if isinstance(allowed, str) else ", ".join(str(a) for a in allowed)
        self.items.append(Diagnostic(line, column, field, value, allowed, message))

    def from_invalid(self, pos, exc: InvalidInput, field: str | None = None) -> None:
        self.add(pos, field or exc.field, exc.value, exc.allowed, exc.fix or "")

    def raise_if_any(self) -> None:
        if self.items:
            raise SpecError(self.source, self.items)
