"""Recognize: split a captured graph into regions formloop's library implements, and say why the
rest stays PyTorch.

A region implementer (`Implementer`) looks at one anchor node and, when it can implement the
computation starting there, returns a `Region`: the nodes it replaces (the last one's value is the
region's output), the graph values it reads, and what its template needs to choose an instance
(`params`). Implementers are tried in registry order (`register`); the GEMM + epilogue implementer
(formloop.optimize.gemm_region) is built in, row-wise and elementwise templates plug in the same
way. A node no implementer takes is a fallback with its reason; layout-only nodes (views,
reshapes, getattr, size) are neither: they cost no kernel and stay as they are."""
from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import fx

from formloop.optimize.capture import Captured

LAYOUT_METHODS = frozenset("""view reshape size contiguous transpose permute unsqueeze squeeze expand flatten
t dim chunk split to float type_as""".split())
LAYOUT_FUNCTIONS = frozenset({"getattr", "getitem", "reshape", "flatten", "transpose", "permute", "unsqueeze",
                              "squeeze", "chunk", "split", "t", "cat", "stack"})


@dataclass
class Region:
    """A piece of the graph one kernel computes."""

    kind: str                                   # e.g. 'gemm-epilogue'
    implementer: str
    nodes: list[fx.Node]                        # replaced, in graph order; the last is the output
    params: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def output(self) -> fx.Node:
        return self.nodes[-1]

    def swap_in(self, call: fx.Node, graph: fx.Graph) -> fx.Node:
        """`call` (inserted before the output) takes the output's uses; the region's nodes are erased."""
        self.output.replace_all_uses_with(call)
        for n in reversed(self.nodes):
            graph.erase_node(n)
        return call

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "implementer": self.implementer, "nodes": [n.name for n in self.nodes],
                "params": {k: v for k, v in self.params.items() if isinstance(v, (str, int, float, bool, list))},
                "notes": list(self.notes)}


@dataclass(frozen=True)
class Implementer:
    """`match(node, captured, taken)` returns a Region starting at `node` or None; `emit(region,
    design, graph)` inserts the replacement and returns its node; `choose(region, tier, chip,
    attempt)` returns the instance (a JSON-able dict) or raises with the reason it cannot."""

    name: str
    kind: str
    match: Callable[[fx.Node, Captured, set], Region | None]
    choose: Callable[..., dict]
    emit: Callable[[Region, dict, fx.Graph], fx.Node]
    imports: tuple[str, ...] = ()               # lines the ModelNew needs for the emitted calls


_REGISTRY: list[Implementer] = []


class Refused(Exception):
    """A matcher's named refusal: the node is part of a pattern the implementer knows, but a check failed
    (the message says which); recorded as the implementer's reason, not as a matcher bug."""


def register(impl: Implementer, before: str | None = None) -> Implementer:
    """Add (or replace, by name) a region implementer; `before` puts it ahead of that implementer."""
    _REGISTRY[:] = [i for i in _REGISTRY if i.name != impl.name] + [impl]
    names = [i.name for i in _REGISTRY]
    if before is not None and before in names:
        _REGISTRY.remove(impl)
        _REGISTRY.insert(names.index(before), impl)
    return impl


def implementers() -> list[Implementer]:
    from formloop.optimize import gemm_region, vector_regions  # noqa: F401 - register the built-in implementers
    from formloop.optimize import vecops_regions  # noqa: F401 - norms, scan, arg-reductions, gathers, cross-entropy
    from formloop.optimize import attention_region  # noqa: F401 - SDPA and written-out attention (fp32)
    from formloop.optimize import attention16_region  # noqa: F401 - the same at bf16/fp16 storage
    from formloop.optimize import conv_region  # noqa: F401 - the conv2d + epilogue implementer
    from formloop.optimize import rope_region  # noqa: F401 - rotate-half RoPE (ahead of elementwise)

    return list(_REGISTRY)


def op_label(node: fx.Node, gm: fx.GraphModule) -> str:
    if node.op == "call_module":
        return f"module {type(gm.get_submodule(node.target)).__name__}"
    if node.op == "call_method":
        return f"method {node.target}"
    t = node.target
    return f"function {getattr(t, '__module__', '') or ''}.{getattr(t, '__name__', str(t))}".replace(" .", " ")


def is_layout(node: fx.Node) -> bool:
    if node.op in ("placeholder", "output", "get_attr"):
        return True
    if node.op == "call_method":
        return node.target in LAYOUT_METHODS
    if node.op == "call_function":
        return getattr(node.target, "__name__", "") in LAYOUT_FUNCTIONS or node.target is operator.getitem
    return False


@dataclass
class Recognition:
    regions: list[Region]
    fallbacks: list[dict[str, str]]             # node, op, reason
    compute_nodes: int

    @property
    def covered_nodes(self) -> int:
        return sum(len(r.nodes) for r in self.regions)

    def as_dict(self) -> dict[str, Any]:
        return {"regions": [r.describe() for r in self.regions], "fallbacks": self.fallbacks,
                "compute_nodes": self.compute_nodes, "covered_nodes": self.covered_nodes}


def recognize(cap: Captured, registry: list[Implementer] | None = None) -> Recognition:
    """Walk the graph in order; each compute node is taken by the first implementer that matches
    there, or recorded as a fallback with the reasons every implementer gave."""
    impls = implementers() if registry is None else registry
    taken: set[fx.Node] = set()
    regions: list[Region] = []
    fallbacks: list[dict[str, str]] = []
    compute = 0
    for node in cap.gm.graph.nodes:
        if is_layout(node):
            continue
        compute += 1
        if node in taken:
            continue
        why = []
        for impl in impls:
            try:
                region = impl.match(node, cap, taken)
            except Refused as exc:
                why.append(f"{impl.name}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - a matcher bug must not stop the problem
                why.append(f"{impl.name}: matcher raised {type(exc).__name__}: {exc}")
                continue
            if region is not None:
                regions.append(region)
                taken.update(region.nodes)
                break
        else:
            reason = "; ".join(why) if why else "no region implementer for this operator"
            fallbacks.append({"node": node.name, "op": op_label(node, cap.gm), "reason": reason})
    return Recognition(regions, fallbacks, compute)
