"""Capture: a problem's reference `Model` as a torch.fx graph with every value's shape and dtype.

The model is built and the graph traced on the meta device (nothing allocated, any size), then
shapes are propagated by running the graph on meta tensors. A model that FX cannot trace
(data-dependent control flow, unsupported Python) is not captured: `CaptureFailed` carries the
reason, and the problem keeps its reference."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from formloop.errors import FormloopError
from formloop.sol.problem import Problem, call_inputs


class CaptureFailed(FormloopError):
    """The reference could not be traced into a graph (the reason says why)."""


@dataclass
class Captured:
    problem: Problem
    gm: fx.GraphModule
    inputs: list                  # meta tensors (get_inputs() on the meta device)
    init_inputs: list

    def meta(self, node: fx.Node) -> Any:
        return node.meta.get("tensor_meta")

    def shape(self, node: Any) -> tuple[int, ...] | None:
        tm = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
        return tuple(tm.shape) if tm is not None and hasattr(tm, "shape") else None

    def dtype(self, node: Any) -> torch.dtype | None:
        tm = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
        return getattr(tm, "dtype", None)


def capture(problem: Problem, precision: torch.dtype | None = None) -> Captured:
    """Trace `problem.Model` with FX and propagate shapes on meta tensors (model and floating inputs
    cast to `precision` first, as the harness casts them)."""
    from torch.fx.passes.shape_prop import ShapeProp

    try:
        with torch.device("meta"):
            init = call_inputs(problem, "get_init_inputs")
            model = problem.Model(*init)
            inputs = call_inputs(problem, "get_inputs")
            if precision is not None:
                model = model.to(precision)
                inputs = [t.to(precision) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                          for t in inputs]
    except Exception as exc:  # noqa: BLE001 - the problem's own code failed on meta tensors
        raise CaptureFailed(f"building the reference on meta tensors raised {type(exc).__name__}: {exc}") from None
    try:
        gm = fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 - FX refuses what it cannot trace; the reason is the message
        try:   # a buffer indexed by a traced size (minGPT's mask[:, :, :t, :t]) traces once buffers are proxied
            gm = _trace_proxying_buffers(model)
        except Exception:  # noqa: BLE001 - the first reason is the one to report
            raise CaptureFailed(f"torch.fx could not trace Model.forward: {type(exc).__name__}: "
                                f"{str(exc).splitlines()[0][:200]}") from None
    try:
        ShapeProp(gm).propagate(*[t for t in inputs])
    except Exception as exc:  # noqa: BLE001
        raise CaptureFailed(f"shape propagation on meta tensors raised {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:200]}") from None
    return Captured(problem, gm, inputs, init)


class _BufferProxyTracer(fx.Tracer):
    proxy_buffer_attributes = True


def _trace_proxying_buffers(model: torch.nn.Module) -> fx.GraphModule:
    """FX with buffer reads as graph values (get_attr nodes), so slicing them by a traced size works."""
    tracer = _BufferProxyTracer()
    graph = tracer.trace(model)
    return fx.GraphModule(tracer.root, graph, type(model).__name__)
