"""The population: an SQLite store of templates, proofs, designs and measurements (see store.py)."""
from formloop.population.certify import certificate_status, is_settled, missing_kinds
from formloop.population.claims import ProofClaim
from formloop.population.schema import SCHEMA_VERSION, SchemaError, migrate
from formloop.population.store import (MeasurementFact, NearDuplicate, Population, TemplateRecord, near_duplicate,
                                       scope_miss)
from formloop.storefile import (StoreBusy, StoreConstraint, StoreDamaged, StoreError, StoreMissing, StoreReadOnly,
                                StoreUnavailable)

__all__ = ["MeasurementFact", "NearDuplicate", "Population", "ProofClaim", "SCHEMA_VERSION", "SchemaError",
           "StoreBusy", "StoreConstraint", "StoreDamaged", "StoreError", "StoreMissing", "StoreReadOnly",
           "StoreUnavailable", "TemplateRecord", "certificate_status", "is_settled", "migrate", "missing_kinds",
           "near_duplicate", "scope_miss"]
