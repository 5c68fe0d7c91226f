"""The population: an SQLite store of templates, proofs, designs and measurements (see store.py)."""
from formloop.population.certify import certificate_status, missing_kinds
from formloop.population.schema import SCHEMA_VERSION, migrate
from formloop.population.store import NearDuplicate, Population, TemplateRecord, near_duplicate, scope_miss

__all__ = ["NearDuplicate", "Population", "SCHEMA_VERSION", "TemplateRecord", "certificate_status", "migrate",
           "missing_kinds", "near_duplicate", "scope_miss"]
