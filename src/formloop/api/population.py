"""The population as queries: stored templates (with proofs), designs and measurements.

Reads never create a missing store: they answer as an empty one would. Latencies are seconds as
measured on the row's tier and device; predictions are in the template's unit (model)."""
from __future__ import annotations

from formloop.api.resolve import read_population, settings_from
from formloop.api.values import plain
from formloop.errors import InvalidInput
from formloop.population.maintenance import backup_store, check_store, export_store
from formloop.settings import Settings

QUERY_KINDS = ("templates", "template", "designs", "measurements")
STATUSES = ("proved", "refuted", "unresolved")


def population_query(kind: str = "templates", *, chip: str | None = None, workload: str | None = None,
                     template: str | None = None, status: str | None = None, tier: str | None = None,
                     settings: Settings | None = None) -> dict:
    """Query the population: templates (by name, status), one template (hash or prefix, with its
    certificates, counterexamples and design count), designs or measurements (by chip, workload,
    template, tier)."""
    if kind not in QUERY_KINDS:
        raise InvalidInput("kind", kind, QUERY_KINDS)
    if status is not None and status not in STATUSES:
        raise InvalidInput("status", status, STATUSES)
    pop, path = read_population(settings)
    with pop:
        if kind == "templates":
            rows = [r.as_dict() for r in pop.templates(name=template, status=status)]
        elif kind == "template":
            if not template:
                raise InvalidInput("template", template, "a stored template hash or prefix")
            rec = pop.template(template)
            rows = [{**rec.as_dict(), "certificates": pop.certificates(rec.hash),
                     "counterexamples": pop.counterexamples(rec.hash), "designs": len(pop.designs(template=rec.hash))}]
        elif kind == "designs":
            rows = pop.designs(chip=chip, workload=workload, template=template)
        else:
            rows = pop.measurements(chip=chip, workload=workload, template=template, tier=tier)
        schema = pop.schema_version
    return plain({"kind": kind, "store": path, "schema_version": schema, "count": len(rows), "rows": rows,
                  "units": {"latency_s": "s (tier column)", "predicted": "template unit (model)",
                            "created_at": "s since the epoch (UTC)"}})


def _store(settings: Settings | None) -> str:
    return str(settings_from(settings).store_path)


def population_check(*, full: bool = True, settings: Settings | None = None) -> dict:
    """The store's integrity report, written nowhere and never writing: header, tables and schema,
    SQLite's integrity_check (quick_check with full=False), orphaned rows, designs without
    measurements, stale proof claims. `ok` is false when any problem was found; a missing store is
    StoreMissing (nothing is created)."""
    return plain(check_store(_store(settings), full=full).as_dict())


def population_backup(dest: str, *, settings: Settings | None = None) -> dict:
    """A consistent copy of the store at `dest` (a new file) by SQLite's backup API, checked after
    copying; a damaged store is refused (a copy of damage is no backup)."""
    return plain(backup_store(_store(settings), dest))


def population_export(dest: str | None = None, *, settings: Settings | None = None) -> dict:
    """Every readable row of every table as JSON (written to `dest`, a new file, when given); rows
    that cannot be read are listed under `unreadable`."""
    return plain(export_store(_store(settings), dest))
