"""What a certificate entitles a template to: the population's admission rule.

A template is `proved` only if its certificate is for this very template (same content hash) and
proves each of K1, K2 and K3; a counterexample to any obligation makes it `refuted`; anything else
(a timeout, a missing kind) leaves it `unresolved`. Unresolved is never read as proved.

The verifier names its K1 and K3 obligations 'K1' and 'K3'; every other obligation comes from the
template's own proof plan (index, schedule, coverage obligations: that Pre suffices), which is K2.
A certificate with no K2 obligation proves nothing about the program and does not admit."""
from __future__ import annotations

from typing import Any

from formloop.errors import InvalidInput
from formloop.verify.outcome import ObligationResult, Verdict

KINDS = ("K1", "K2", "K3")


def kind_of(obligation: ObligationResult) -> str:
    """K1 or K3 for the verifier's contract obligations; K2 for the template's own."""
    name = obligation.obligation
    for k in ("K1", "K3"):
        if name == k or name.startswith(f"{k}."):
            return k
    return "K2"


def certificate_status(certificate: Any, template_hash: str) -> str:
    """'proved', 'refuted' or 'unresolved' for a template with this certificate."""
    if certificate is None:
        raise InvalidInput("certificate", None, "a certificate from formloop.verify.prove_template",
                           fix="a template enters the population only with its proof attempt")
    cert_hash = getattr(certificate, "template_hash", None)
    if cert_hash is not None and cert_hash != template_hash:
        raise InvalidInput("certificate template hash", cert_hash, f"{template_hash} (the template being stored)")
    obligations = list(certificate.obligations)
    if any(o.verdict is Verdict.COUNTEREXAMPLE for o in obligations):
        return "refuted"
    proved_kinds = {kind_of(o) for o in obligations if o.verdict is Verdict.PROVED}
    every_proved = obligations and all(o.verdict is Verdict.PROVED for o in obligations)
    if every_proved and set(KINDS) <= proved_kinds and _verdict(certificate) is Verdict.PROVED:
        return "proved"
    return "unresolved"


# (stored template status, newest certificate verdict) pairs that settle a template for a toolchain:
# the verifier is not called again. An unresolved attempt settles nothing.
SETTLED = (("proved", "proved"), ("refuted", "counterexample"))


def is_settled(status: str | None, verdict: str | None) -> bool:
    return (status, verdict) in SETTLED


def missing_kinds(certificate: Any) -> list[str]:
    proved = {kind_of(o) for o in certificate.obligations if o.verdict is Verdict.PROVED}
    return [k for k in KINDS if k not in proved]


def obligation_failures(certificate: Any) -> list[ObligationResult]:
    return [o for o in certificate.obligations if o.verdict is Verdict.COUNTEREXAMPLE]


def _verdict(certificate: Any) -> Verdict:
    v = certificate.verdict
    return v if isinstance(v, Verdict) else Verdict(str(v))
