"""Import rules of the core layers (expr, template, solve, verify, library), read from the source:
z3 only in the Z3 lowering and verify/, imports only from earlier layers, no import cycles, no
imports inside functions except those guarding triton/torch."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
CORE = ("formloop.expr", "formloop.template", "formloop.solve", "formloop.verify", "formloop.library")
LAYERS = [  # each package may import from its own layer and earlier ones
    ("formloop.errors", "formloop.settings", "formloop.dtypes", "formloop.storefile"),
    ("formloop.expr",),
    ("formloop.template", "formloop.workload"),
    ("formloop.solve", "formloop.verify", "formloop.hw", "formloop.sol"),
    ("formloop.measure",),
    ("formloop.evaluate",),
    ("formloop.library",),
]
Z3_HOMES = ("formloop.expr.to_z3", "formloop.verify")
GUARDED = ("triton", "torch", "formloop.library.gemm_tiling_kernel", "formloop.library.gemm_tiling_instance",
           "formloop.library.gemm_epilogue_kernel", "formloop.library.attention_decode_kernel",
           "formloop.library.attention_prefill_kernel", "formloop.library.rowwise_kernel",
           "formloop.library.elementwise_kernel", "formloop.library.qk_rope_kernel",
           "formloop.library.qwen3_layer_kernels", "formloop.library.attention_fp32_kernel",
           "formloop.library.gemm_tiling_sched_kernel", "formloop.library.fused_gemm", "formloop.library.fused_vector")
GUARDED = (*GUARDED, "formloop.library.rope_kernel", "formloop.library.tf32_split",
           "formloop.library.gemm_epilogue_launch")
# each imports triton and torch at module level


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted((SRC / "formloop").rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        out[name] = ast.parse(path.read_text(), str(path))
    return out


MODULES = _modules()


def _imports(tree: ast.Module, *, top_only: bool):
    nodes = tree.body if top_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)


def _in(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _layer(name: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if _in(name, layer)), None)


def test_z3_is_imported_only_by_the_lowering_and_verify():
    bad = {m for m, tree in MODULES.items() if _in(m, CORE) and not _in(m, Z3_HOMES)
           and any(_in(i, ("z3",)) for i in _imports(tree, top_only=False))}
    assert not bad


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _in(m, CORE)))
def test_core_modules_import_only_earlier_layers(module):
    own = _layer(module)
    later = {i for i in _imports(MODULES[module], top_only=False)
             if i.startswith("formloop.") and i in MODULES and (_layer(i) is None or _layer(i) > own)}
    assert not later, f"{module} imports later layers {sorted(later)}"


def test_no_import_cycle_through_the_core():
    graph = {m: {i for i in _imports(t, top_only=True) if i in MODULES and i != m} for m, t in MODULES.items()}
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                if any(_in(x, CORE) for x in cycle):
                    raise AssertionError(" -> ".join(cycle))
            elif not state.get(n):
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if not state.get(m):
            visit(m, [m])


def test_no_core_module_below_the_library_loads_modules_by_name():
    # importlib would hide an upward dependency (verify once loaded formloop.library this way)
    below = [m for m in MODULES if _in(m, CORE) and not _in(m, ("formloop.library",))]
    assert not [m for m in below if "importlib" in set(_imports(MODULES[m], top_only=False))]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _in(m, CORE)))
def test_core_modules_import_inside_functions_only_to_guard_heavy_dependencies(module):
    inner = []
    for node in ast.walk(MODULES[module]):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    names = [a.name for a in sub.names] if isinstance(sub, ast.Import) else [sub.module or ""]
                    inner += [n for n in names if not _in(n, GUARDED)]
    assert not inner, f"{module} imports {inner} inside functions"
