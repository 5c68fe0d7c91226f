"""Value structure that fake tensors cannot carry: which elements of a tensor are known constants.

Automatic SOL runs the reference on fake tensors, which have shapes but no values. Causal attention
written by hand (`scores.masked_fill(tril(ones) == 0, -inf)`, `scores + triu(full(-inf), 1)`,
`where(mask, scores, -inf)`) is recognized from how its mask was built, not from the mask's data:
a `Pattern` records, over a tensor's last two dimensions (i, j), a triangular `Region` and the value
inside and outside it, each a number or None (unknown). Elements with a known value need no work:
a kernel can produce them from indices. This module holds the patterns and their algebra only;
`formloop.sol.trace` attaches them to tensors as operators run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Region:
    """{(i, j) : j - i <= diag} when `lower`, else {(i, j) : j - i >= diag}."""

    lower: bool
    diag: int

    def complement(self) -> Region:
        return Region(not self.lower, self.diag + 1) if self.lower else Region(True, self.diag - 1)

    def shifted(self, rows: int = 0, cols: int = 0) -> Region:
        """The region seen from a slice starting at row `rows` and column `cols` (j - i moves)."""
        return Region(self.lower, self.diag + rows - cols)

    def transposed(self) -> Region:
        return Region(not self.lower, -self.diag)

    def count(self, rows: int, cols: int) -> int:
        """How many (i, j) of a rows x cols matrix lie in the region (closed form)."""
        if self.lower:                  # row i keeps j in [0, min(cols - 1, i + diag)]
            return _clamped_sum(self.diag + 1, rows, cols)
        return rows * cols - _clamped_sum(self.diag, rows, cols)   # row i keeps j >= i + diag


def _clamped_sum(a: int, rows: int, cols: int) -> int:
    """sum over i in [0, rows) of min(max(i + a, 0), cols)."""
    low = min(max(1 - a, 0), rows)                 # rows with i + a <= 0 contribute 0
    high = max(0, rows - max(cols - a, low))        # rows with i + a >= cols contribute cols
    mid_end = rows - high                           # rows low .. mid_end - 1 contribute i + a
    mid = (mid_end - low) * (low + mid_end - 1 + 2 * a) // 2 if mid_end > low else 0
    return mid + high * cols


@dataclass(frozen=True)
class Pattern:
    """Values over the last two dimensions: `inside` on `region`, `outside` elsewhere (None: unknown).
    `region` None means the whole tensor holds `inside` (a constant)."""

    region: Region | None
    inside: float | None
    outside: float | None = None

    @staticmethod
    def constant(value) -> Pattern:
        return Pattern(None, _number(value), _number(value))

    @property
    def known(self) -> bool:
        return self.inside is not None and (self.region is None or self.outside is not None)

    def cast(self, to_bool: bool) -> Pattern:
        f = (lambda v: None if v is None else float(bool(v))) if to_bool else (lambda v: v)
        return replace(self, inside=f(self.inside), outside=f(self.outside))

    def map(self, fn) -> Pattern | None:
        out = Pattern(self.region, _apply(fn, self.inside), _apply(fn, self.outside))
        return None if out.inside is None and out.outside is None else out

    def value_on(self, region: Region | None, inside: bool) -> float | None:
        """This tensor's value on `region` (inside) or its complement, where that is one constant."""
        if self.region is None:
            return self.inside
        if region == self.region:
            return self.inside if inside else self.outside
        if region is not None and region == self.region.complement():
            return self.outside if inside else self.inside
        return None

    def share(self, rows: int, cols: int, test) -> float:
        """Share of a rows x cols matrix whose value satisfies `test` (called with None if unknown)."""
        if self.region is None:
            return 1.0 if test(self.inside) else 0.0
        total = rows * cols
        if total == 0:
            return 0.0
        inside = self.region.count(rows, cols)
        return ((inside if test(self.inside) else 0) + (total - inside if test(self.outside) else 0)) / total

    def unknown_fraction(self, rows: int, cols: int) -> float:
        """Share of the elements whose value is not a known constant (the ones that need work)."""
        return self.share(rows, cols, lambda v: v is None)


def _number(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _apply(fn, v):
    if v is None:
        return None
    try:
        out = fn(v)
    except (ArithmeticError, ValueError):
        return None
    return None if out is None or (isinstance(out, float) and math.isnan(out)) else float(out)


def truthy_region(mask: Pattern) -> tuple[Region | None, bool] | None:
    """(region, inside) such that the mask is nonzero exactly there, if the mask says so."""
    if mask.region is None or mask.inside is None or mask.outside is None:
        return None
    if bool(mask.inside) == bool(mask.outside):
        return None
    return (mask.region, True) if mask.inside else (mask.region, False)


def select(mask: Pattern | None, if_true: Pattern | None, if_false: Pattern | None) -> Pattern | None:
    """where(mask, if_true, if_false) / masked_fill(if_false, mask, if_true) over a triangular mask."""
    found = None if mask is None else truthy_region(mask)
    if found is None:
        return None
    region, on_inside = found

    def value(p: Pattern | None, inside: bool):
        return None if p is None else p.value_on(region, inside)

    inside = value(if_true, True) if on_inside else value(if_false, True)
    outside = value(if_false, False) if on_inside else value(if_true, False)
    return None if inside is None and outside is None else Pattern(region, inside, outside)


def combine(a: Pattern | None, b: Pattern | None, op: str) -> Pattern | None:
    """Elementwise `op` (add, sub, mul, div) of two tensors or a tensor and a scalar pattern.
    Unknown values are taken as finite data, so -inf + x = -inf and 0 * x = 0."""
    if a is None and b is None:
        return None
    region = next((p.region for p in (a, b) if p is not None and p.region is not None), None)
    for p in (a, b):
        if p is not None and p.region is not None and p.region != region:
            return None

    def side(inside: bool):
        x = None if a is None else a.value_on(region, inside)
        y = None if b is None else b.value_on(region, inside)
        return _binary(x, y, op)

    out = Pattern(region, side(True), side(False) if region is not None else side(True))
    return None if out.inside is None and out.outside is None else out


def _binary(x, y, op: str):
    if x is not None and y is not None:
        try:
            return {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y if y else None}[op]
        except (ArithmeticError, ValueError):
            return None
    known = x if x is not None else y
    if known is None:
        return None
    if op in ("add", "sub") and math.isinf(known):
        return known if (op == "add" or x is not None) else -known
    if op == "mul" and known == 0:
        return 0.0
    if op == "div" and x == 0:
        return 0.0        # 0 / data = 0; the sign of inf / data is the data's, so unknown
    return None
