"""How `make test` runs the suite on two cores: the objects collection leaves alive are frozen out of the
garbage collector, and the files that take longest go out first (two workers, `--dist loadfile
--no-loadscope-reorder`: a file's tests run in one worker, so a module-scoped fixture such as an end-to-end
campaign is built once; the many short files fill in after the long ones, so neither worker is left alone at
the end with a long file). Order and collection only: no test is skipped or changed."""
from __future__ import annotations

# Longest first: the files whose tests took longest in one worker on two cores (--durations, 2026-12-01).
LONGEST_FIRST = ("test_integrity_planted", "test_integrity_problems", "test_optimize_attention_e2e",
                 "test_optimize_ray", "test_optimize_conv", "test_optimize_e2e", "test_qwen3_layer_pdl",
                 "test_api_parity", "test_fp32_precision", "test_proofgraph_reuse", "test_measure_mathmode",
                 "test_hostile_code", "test_attention_benchmark")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))   # stable: the rest keep their order


def pytest_collection_finish(session):
    """Collecting the whole suite imports every test module and what they import (torch, z3, Ray, ...): the
    objects that stay alive for the run would be traversed by every full garbage collection of the run.
    Frozen, they are left out. Measured on two cores: the two integrity test files ran in 378 s after
    collecting the whole suite and 59 s with the freeze (112 s collected alone); the suite 975 s -> 682 s, and
    573 s with the files in this order."""
    import gc

    gc.freeze()
