"""Repository gates, built from the source alone (no imports): module size, line length, the layer
order of the whole package (no upward import, no import cycle). docs/architecture.md explains them."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_MODULE_LINES = 400
MAX_LINE = 120

# Each package may import from its own layer and earlier ones (docs/architecture.md).
LAYERS = [
    ("formloop", "formloop.errors", "formloop.settings", "formloop.dtypes", "formloop.storefile"),
    ("formloop.expr",),
    ("formloop.template", "formloop.workload"),
    ("formloop.solve", "formloop.verify", "formloop.hw", "formloop.sol"),
    ("formloop.measure",),
    ("formloop.evaluate",),
    ("formloop.library",),
    ("formloop.codesign", "formloop.campaign", "formloop.dsl"),
    ("formloop.population",),
    ("formloop.optimize",),
    ("formloop.api",),
    ("formloop.cli", "formloop.agent"),
]


def _name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


PATHS = {_name(p): p for p in sorted((SRC / "formloop").rglob("*.py"))}
TREES = {m: ast.parse(p.read_text(), str(p)) for m, p in PATHS.items()}


def layer(module: str) -> int:
    """The layer of the longest prefix that names `module` (formloop.sol.ops is in formloop.sol's)."""
    best = max(((len(p), i) for i, names in enumerate(LAYERS) for p in names
                if module == p or module.startswith(p + ".")), default=None)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS and docs/architecture.md")
    return best[1]


def imported(tree: ast.Module, *, top_only: bool) -> set[str]:
    """formloop modules a tree imports; `from pkg import sub` names the submodule, not the package."""
    out: set[str] = set()
    for node in (tree.body if top_only else ast.walk(tree)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(PATHS)
            out |= subs if subs and all(f"{node.module}.{a.name}" in PATHS for a in node.names) else {node.module} | subs
    return {m for m in out if m in PATHS}


@pytest.mark.parametrize("module", sorted(PATHS))
def test_module_is_small_and_lines_are_short(module):
    lines = PATHS[module].read_text().splitlines()
    assert len(lines) <= MAX_MODULE_LINES, f"{module}: {len(lines)} lines (split it by concept)"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > MAX_LINE]
    assert not long, f"{module}: lines over {MAX_LINE} characters at {long}"


@pytest.mark.parametrize("module", sorted(PATHS))
def test_module_imports_only_its_layer_and_earlier(module):
    own = layer(module)
    upward = sorted(m for m in imported(TREES[module], top_only=False) if layer(m) > own)
    assert not upward, f"{module} (layer {own}) imports later layers: {upward}"


def test_no_import_cycle():
    graph = {m: imported(t, top_only=True) - {m} for m, t in TREES.items()}
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(path[path.index(n):] + [n]))
            elif not state.get(n):
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if not state.get(m):
            visit(m, [m])
    assert not cycles, cycles


def test_the_gates_can_fail():
    """The import reader and the cycle search see what they must (so a passing gate means something)."""
    tree = ast.parse("from formloop.api import loop\nimport formloop.cli\n")
    assert imported(tree, top_only=True) == {"formloop.api.loop", "formloop.cli"}
    assert layer("formloop.cli.common") > layer("formloop.api.loop") > layer("formloop.expr.nodes")
