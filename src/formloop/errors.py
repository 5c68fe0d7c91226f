"""Error types. Every formloop error derives from `FormloopError` and from the builtin it refines,
so callers can catch either. Errors carry the offending field, the allowed values and a fix."""
from __future__ import annotations

from collections.abc import Iterable


class FormloopError(Exception):
    """Root of formloop's errors."""

    def __init__(self, message: str, *, fix: str | None = None):
        self.fix = fix
        super().__init__(message if fix is None else f"{message} ({fix})")


class InvalidInput(FormloopError, ValueError):
    """A user-supplied value is outside what is allowed; `field` names it, `allowed` says what is."""

    def __init__(self, field: str, value: object, allowed: str | Iterable[object], *, fix: str | None = None):
        self.field, self.value = field, value
        self.allowed = allowed if isinstance(allowed, str) else ", ".join(str(a) for a in allowed)
        super().__init__(f"invalid {field}: {value!r}; allowed: {self.allowed}", fix=fix)


class UnknownName(InvalidInput, KeyError):
    """A lookup by name (template, chip, contract, fault, ...) found nothing."""

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return self.args[0]


class UnsupportedOp(FormloopError, NotImplementedError):
    """A back end cannot lower an expression node; never replaced by a silent fallback."""

    def __init__(self, op: str, backend: str, node: object, *, fix: str | None = None):
        self.op, self.backend, self.node = op, backend, node
        super().__init__(f"{backend} cannot lower '{op}' in {node}", fix=fix)


class NotTabulable(FormloopError, ValueError):
    """A nonlinear term reads too many decisions to be tabulated over their joint menu."""

    def __init__(self, term: object, decisions: Iterable[str], size: int, limit: int):
        self.term, self.decisions, self.size, self.limit = term, tuple(decisions), size, limit
        super().__init__(
            f"term {term} reads {', '.join(self.decisions)} with a joint menu of {size} points (limit {limit})",
            fix="split the term into a sum of terms that each read fewer decisions, or shorten the menus",
        )


class Infeasible(FormloopError, ValueError):
    """A formulation admits no design; `reasons` names the template constraints that conflict."""

    def __init__(self, template: str, reasons: Iterable[str]):
        self.template, self.reasons = template, tuple(reasons)
        super().__init__(f"template {template} has no feasible design: {'; '.join(self.reasons)}")


class SolverFailure(FormloopError, RuntimeError):
    """A solver returned a status that is neither optimal nor infeasible."""


class StructureError(FormloopError, TypeError):
    """A template is malformed: a missing field, a decision without a menu, an undeclared name."""
