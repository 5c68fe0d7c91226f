"""Assemble: the recognized regions, each with its chosen instance, become one `ModelNew` source file.

The ModelNew builds the problem's own `Model` (same constructor, so the same parameters, the same
initialization and the same state_dict keys) and takes over its submodules, parameters, buffers and
plain attributes; its `forward` is the captured graph with every region replaced by the formloop
kernel call of its implementer. What no implementer took stays the graph's PyTorch code, run with
TF32 off (formloop.measure.mathmode.fp32_math): a leftover conv computes the problem's fp32 math, as
the reference for correctness does, not cuDNN's default TF32 (formloop's kernels pick their own
operand precision and read no flag)."""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import fx

from formloop.optimize.capture import Captured
from formloop.optimize.recognize import Recognition, implementers

HEADER = '''"""ModelNew for problem {name}, assembled by `formloop optimize` (attempt {attempt}).
Regions: {regions}. Fallbacks (PyTorch): {fallbacks}."""
import operator  # noqa: F401
import torch  # noqa: F401
{imports}
from formloop.measure.mathmode import fp32_math
from formloop.sol.problem import load_problem

PROBLEM = {path!r}
SMALL = {small!r}
DESIGNS = {designs}


class ModelNew(torch.nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        ref = load_problem(PROBLEM, small=SMALL).Model(*init_inputs)  # the same parameters and init
        for name, child in ref.named_children():
            self.add_module(name, child)
        for name, p in ref.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name, b in ref.named_buffers(recurse=False):
            self.register_buffer(name, b)
        for name, v in vars(ref).items():
            if not name.startswith("_") and name != "training":
                setattr(self, name, v)

    def forward(self, *args):
        with fp32_math():   # leftover PyTorch ops: the problem's fp32 math (cuDNN TF32 off)
            return self._graph_forward(*args)

'''


@dataclass
class Assembly:
    source: str
    regions: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)   # regions whose instance could not be chosen


def _forward_source(gm: fx.GraphModule) -> tuple[str, dict[str, Any]]:
    code = gm.graph.python_code(root_module="self")
    return code.src, code.globals


def _import_line(name: str, obj: Any) -> str | None:
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if name in ("torch", "operator", "inf", "nan", "NoneType", "device", "fx_pytree", "pytree") or not mod or not qual:
        return {"_torch_Tensor_": "_torch_Tensor_ = torch.Tensor", "inf": "inf = float('inf')",
                "nan": "nan = float('nan')", "device": "from torch import device",
                "NoneType": "NoneType = type(None)"}.get(name)
    if name == "_torch_Tensor_":
        return "_torch_Tensor_ = torch.Tensor"
    if "." in qual or "<" in qual:
        return None
    if mod == "torch._ops.aten" or mod.startswith("torch._C"):
        return None
    return f"from {mod} import {qual} as {name}" if qual != name else f"from {mod} import {qual}"


def assemble(cap: Captured, rec: Recognition, *, tier: str, attempt: int = 0, small: bool = False,
             fp32_operands: str = "auto", spec: str | None = None, tolerance: str = "kernelbench") -> Assembly:
    """Choose every region's instance (implementer.choose), emit the calls, write the source."""
    gm = copy.deepcopy(cap.gm)
    by_old = dict(zip(cap.gm.graph.nodes, gm.graph.nodes))
    impls = {i.name: i for i in implementers()}
    out = Assembly("")
    replaced: dict[fx.Node, fx.Node] = {}   # an emitted region's output -> its kernel call (later regions read it)

    def now(v):
        v = by_old.get(v, v)
        while v in replaced and replaced[v] is not v:
            v = replaced[v]
        return v

    for region in rec.regions:
        impl = impls[region.implementer]
        local = copy.copy(region)
        local.nodes = [by_old[n] for n in region.nodes]
        local.params = {k: (now(v) if isinstance(v, fx.Node) else v) for k, v in region.params.items()}
        local.params["tensors"] = {k: now(v) if isinstance(v, fx.Node) else v
                                   for k, v in region.params.get("tensors", {}).items()}
        local.notes = list(region.notes)
        try:
            extra = {"spec": spec} if spec is not None and region.kind == "gemm-epilogue" else {}
            if region.kind in ("gemm-epilogue", "conv2d-epilogue"):
                extra["tolerance"] = tolerance
            design = impl.choose(local, tier=tier, attempt=attempt, fp32_operands=fp32_operands, **extra)
        except Exception as exc:  # noqa: BLE001 - the region stays PyTorch, with the reason
            out.skipped.append({"region": region.nodes[0].name, "reason": f"{type(exc).__name__}: {exc}"[:400]})
            continue
        output = local.output
        call = impl.emit(local, design, gm.graph)
        if isinstance(call, fx.Node):
            replaced[output] = call
        out.regions.append({**region.describe(), "nodes": [n.name for n in local.nodes], "notes": local.notes,
                            "design": {k: v for k, v in design.items() if k != "spec"}, "spec": design.get("spec")})
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    src, globs = _forward_source(gm)
    imports = sorted({line for name, obj in globs.items() if (line := _import_line(name, obj))}
                     | {line for i in impls.values() for line in i.imports})
    summary = ", ".join(f"{r['kind']} [{', '.join(r['nodes'])}]" for r in out.regions) or "none"
    fb = ", ".join(f["op"] for f in rec.fallbacks) or "none"
    # a Python literal (True, None), the values as JSON keeps them (anything else as its text)
    designs = repr(json.loads(json.dumps([r["design"] for r in out.regions], default=str)))
    header = HEADER.format(name=cap.problem.name, attempt=attempt, regions=summary, fallbacks=fb,
                           imports="\n".join(imports), path=str(Path(cap.problem.path).resolve()), small=small,
                           designs=designs)
    src = src.strip("\n").replace("def forward(", "def _graph_forward(", 1)
    body = "\n".join("    " + line if line.strip() else "" for line in src.splitlines())
    out.source = header + body + "\n"
    return out
