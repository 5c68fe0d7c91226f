"""The template library and one template's contract, as data."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from formloop.api.resolve import read_population, template_from
from formloop.api.values import plain
from formloop.library import get_template, template_names
from formloop.settings import Settings


def list_templates(*, settings: Settings | None = None) -> dict:
    """The library's templates (default options) and the population's stored templates with their
    proof status (a missing store lists none and is not created)."""
    library = []
    for name in template_names():
        t = get_template(name)
        library.append({"name": name, "hash": t.content_hash, "descriptor": dict(t.descriptor),
                        "decisions": list(t.decision_names), "constraints": [c.name for c in t.constraints],
                        "preconditions": [c.name for c in t.preconditions]})
    pop, path = read_population(settings)
    with pop:
        stored = [r.as_dict() for r in pop.templates()]
    return plain({"library": library, "population": stored, "store": path})


def show_template(template: str, options: Mapping[str, Any] | None = None) -> dict:
    """One template's contract: decisions with menus, parameters, rules, cost, descriptor, hash."""
    t = template_from(template, options).template
    return plain({"name": t.name, "hash": t.content_hash, "doc": t.doc, "unit": t.unit, "options": dict(t.options),
                  "decisions": [{"name": d.name, "menu": list(d.decision.menu), "side": d.decision.side,
                                 "doc": d.decision.doc} for d in t.decisions],
                  "params": [{"name": p.name, "kind": p.payload.kind, "doc": p.payload.doc} for p in t.params],
                  "scope": [c.name for c in t.scope], "constraints": [c.name for c in t.constraints],
                  "preconditions": [c.name for c in t.preconditions],
                  "descriptor": dict(t.descriptor), "contract": t.canonical_text()})
