"""Admission: prove a template and store it with its certificate; the library's candidates for a
workload; the evaluator a tier setting names. The loop and the `prove`/`add` actions share these."""
from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

import formloop
from formloop import evaluate
from formloop.api.resolve import Candidate, is_user_spec, open_population, settings_from, template_from
from formloop.api.values import plain
from formloop.errors import FormloopError, InvalidInput
from formloop.library import template_factory, template_names
from formloop.library.user import library_origin, source_text
from formloop.population import NearDuplicate, Population
from formloop.population.certify import missing_kinds, obligation_failures
from formloop.settings import Settings
from formloop.verify import prove_template as verify_template
from formloop.verify.outcome import z3_solver_name

TOOLCHAIN = f"formloop {formloop.__version__}; {z3_solver_name()}"
"""What a stored verdict was reached with; a verdict is reused only under the same toolchain."""


def library_candidates(dtype: str) -> list[Candidate]:
    """Every library template with its default options, its dtype option set when it has one."""
    out = []
    for name in template_names():
        factory = template_factory(name)
        kwargs = {"dtype": dtype} if "dtype" in inspect.signature(factory).parameters else {}
        try:
            t = factory(**kwargs)
        except FormloopError:
            continue  # this template does not offer the dtype; it cannot cover the workload
        out.append(Candidate(t, library_origin(name, dict(t.options))))
    return out


def evaluator_for(tier: str):
    """The evaluator for a tier setting: auto (gpu when a CUDA device is present, else model),
    model, or gpu (refused where there is no CUDA device: never silently replaced by the model)."""
    if tier == "auto":
        return evaluate.best_available()
    if tier == "model":
        return evaluate.ModelEvaluator()
    if tier == "gpu":
        if not evaluate.gpu_available():
            raise InvalidInput("tier", tier, "auto or model (no CUDA device is visible here)")
        from formloop.evaluate.gpu import GpuEvaluator  # imports torch: only when a GPU is asked for

        return GpuEvaluator()
    raise InvalidInput("tier", tier, ("auto", "model", "gpu"))


def default_prover() -> Callable[..., Any]:
    return verify_template


def admit(population: Population, c: Candidate, prover: Callable[..., Any], timeout_s: float
          ) -> tuple[str, str, float]:
    """Prove a template and store it with its certificate: (status, note, prove seconds).

    status is proved, refuted (note: the counterexample), unresolved (note: why) or refused
    (note: the near-duplicate it repeats)."""
    start = time.perf_counter()
    cert = prover(c.template, timeout_s=timeout_s)
    seconds = time.perf_counter() - start
    try:
        rec = population.add_template(c.template, origin=c.origin, certificate=cert,
                                      source=source_text(c.template, c.origin), toolchain=TOOLCHAIN)
    except NearDuplicate as exc:
        return "refused", str(exc), seconds
    return rec.status, proof_note(rec.status, cert), seconds


def proof_note(status: str, cert) -> str:
    """One line on why a template is not proved (empty when it is)."""
    if status == "refuted":
        parts = []
        for o in obligation_failures(cert):
            replay = f"; replay: {o.replay}" if o.replay else ""
            parts.append(f"{o.obligation}: witness {dict(o.witness or {})}{replay}")
        return "counterexample: " + " | ".join(parts)
    if status == "unresolved":
        reasons = [f"{o.obligation}: {o.reason}" for o in cert.obligations if o.reason and not o.proved]
        missing = missing_kinds(cert)
        return "unresolved: " + "; ".join(reasons + ([f"no proof of {', '.join(missing)}"] if missing else []))
    return ""


# -- user actions --------------------------------------------------------------------------------

def admit_template(template: str, options: Mapping[str, Any] | None = None, *,
                   settings: Settings | None = None) -> dict:
    """Prove a template (a library name with factory options, or path/to/file.py:NAME) and store it
    with its certificate; it is admitted (drawn by later runs) only when K1-K3 hold."""
    s = settings_from(settings)
    c = template_from(template, options)
    with open_population(s) as pop:
        status, note, seconds = admit(pop, c, default_prover(), s.prove_timeout_s)
        counterexamples = pop.counterexamples(c.template.content_hash)
        store = str(pop.path)
    return plain({"template": c.template.name, "hash": c.template.content_hash, "status": status, "note": note,
                  "prove_seconds": seconds, "counterexamples": counterexamples, "admitted": status == "proved",
                  "origin": c.origin, "store": store, "units": {"prove_seconds": "s (wall, verifier)"}})


def add_template(spec: str, *, settings: Settings | None = None) -> dict:
    """Prove a user template (path/to/file.py:NAME) and admit it to the population when K1-K3 hold."""
    if not isinstance(spec, str) or not is_user_spec(spec):
        raise InvalidInput("spec", spec, "path/to/file.py:NAME")
    return admit_template(spec, settings=settings)
