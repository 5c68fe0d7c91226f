"""Proofs that follow the chip: wall relaxation buys a chip only where the template is proved.

The interface is a callable `(template, chip) -> ChipCertificate`. What runs today,
`FixedChipProver`, proves each chip before it is scored: K1 and K3 are re-proved with every chip
parameter fixed to that chip's values (the constraints read the chip: gemm-tiling's C1 reads Ms,
C2 reads R_acc), and the template's other obligations (index cover, slot schedules) come from its
family certificate (`prove_template`, once per template), which fixes the chip to the template's
proof-plan chip. That is sound for the chip walls relaxation moves only while those other
obligations do not read the moved parameters; for gemm-tiling they do not (index obligations read
tile sizes and extents; the schedules are every (S, P, beta) that C3 admits, the same set at every
chip of the illustrative library, which tests/test_codesign_gemm_walls.py checks). A prover over
chip ranges (K1/K3 with the chip parameters symbolic within the library's menus) fits the same
interface and answers every chip inside its ranges from one certificate.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from numbers import Real

from formloop.hw.chips import Chip
from formloop.template import Template
from formloop.verify import Certificate, ObligationResult, Verdict, check_k1, check_k3, overall, plan_of, prove_template

CHIP_OBLIGATIONS = ("K1", "K3")


@dataclass(frozen=True)
class ChipCertificate:
    """Whether a template's obligations hold at one chip, and how that was established."""

    chip: str
    verdict: Verdict | None          # None: the problem has no template obligations (a program menu)
    method: str
    obligations: tuple[ObligationResult, ...] = ()
    params: Mapping[str, Real] = field(default_factory=dict)

    @property
    def admits(self) -> bool:
        """True when relaxation may buy the chip: proved, or nothing to prove."""
        return self.verdict is None or self.verdict is Verdict.PROVED

    def summary(self) -> str:
        if self.verdict is None:
            return f"{self.chip}: {self.method}"
        bad = [r for r in self.obligations if not r.proved]
        what = "; ".join(f"{r.obligation} {r.verdict.value}" + (f" at {dict(r.witness)}" if r.witness else "")
                         for r in bad[:3])
        return (f"{self.chip}: {self.verdict.value} ({len(self.obligations)} obligations; {self.method})"
                + (f": {what}" if what else ""))

    def as_dict(self) -> dict:
        return {"chip": self.chip, "verdict": None if self.verdict is None else self.verdict.value,
                "method": self.method, "params": dict(self.params),
                "obligations": {r.obligation: r.verdict.value for r in self.obligations if r.obligation in
                                CHIP_OBLIGATIONS},
                "count": len(self.obligations)}


ChipProver = Callable[[Template, Chip], ChipCertificate]


def not_applicable(chip: str) -> ChipCertificate:
    return ChipCertificate(chip, None, "no template obligations (program-menu problem)")


class FixedChipProver:
    """K1/K3 at each chip's parameters plus the template's family certificate (see the module doc).
    Results are cached by template content and chip parameter values."""

    def __init__(self, *, timeout_s: float = 10.0):
        self.timeout_s = timeout_s
        self._family: dict[str, Certificate] = {}
        self._chips: dict[tuple, ChipCertificate] = {}

    def family(self, template: Template) -> Certificate:
        if template.content_hash not in self._family:
            self._family[template.content_hash] = prove_template(template, timeout_s=self.timeout_s)
        return self._family[template.content_hash]

    def __call__(self, template: Template, chip: Chip) -> ChipCertificate:
        params = dict(template.bind_chip(chip)) if template.bind_chip is not None else {}
        key = (template.content_hash, tuple(sorted(params.items())))
        if key not in self._chips:
            fixed = {**plan_of(template).fixed, **params}
            at_chip = (check_k1(template, fixed=fixed, timeout_s=self.timeout_s),
                       check_k3(template, fixed=fixed, timeout_s=self.timeout_s))
            rest = tuple(r for r in self.family(template).obligations if r.obligation not in CHIP_OBLIGATIONS)
            results = at_chip + rest
            self._chips[key] = ChipCertificate(
                chip.name, overall(results),
                f"fixed chip: K1, K3 at the chip's parameters; {len(rest)} chip-independent obligations from the "
                f"family certificate", results, params)
        return self._chips[key]
