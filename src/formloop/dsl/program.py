"""A spec as one runnable program (formloop.evaluate.Runnable): the transform stages before the
main kernel, the kernel, the stages after it, with the torch reference the spec implies.

The reference starts from the caller's tensors and converts them with torch (not with the stage
kernels), computes the product and the epilogue in float64 and so checks the stages too. Imports
torch and triton: set TRITON_INTERPRET=1 first to run in the interpreter."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from formloop.dsl.ir import SpecIR
from formloop.library.gemm_epilogue_kernel import EpiloguePlan, new_inputs, new_output, reference, tolerance
from formloop.library.gemm_epilogue_stage import convert
from formloop.library.gemm_tiling_instance import poison
from formloop.library.gemm_tiling_kernel import TORCH_DTYPES, TileConfig


def plan_of(spec: SpecIR, assignment, shape=None, epi_split: bool | None = None) -> EpiloguePlan:
    """The kernel plan of a spec at a design; `epi_split` None = the family's rule for the epilogue halves."""
    k = spec.kernel
    return EpiloguePlan(k.kernel_spec(), TileConfig.from_assignment(assignment), shape or k.shape, k.align, epi_split)


@dataclass
class SpecCase:
    caller: dict                 # tensors as the caller holds them (a, b, the chain's tensors)
    kernel_in: dict              # what the main kernel reads (staged copies of a, b where staged)
    out: torch.Tensor            # C as the caller receives it
    kernel_out: torch.Tensor     # C as the kernel writes it (the same tensor without a post stage)
    workspace: torch.Tensor | None
    run: object = None           # the main kernel's bound launch


def _relaid(t: torch.Tensor, dtype: torch.dtype, flip: bool) -> torch.Tensor:
    """An empty tensor of t's logical shape in `dtype`, laid out the other way when `flip`."""
    if not flip:
        return torch.empty(t.shape, device=t.device, dtype=dtype) if t.is_contiguous() else \
            torch.empty(t.transpose(-1, -2).shape, device=t.device, dtype=dtype).transpose(-1, -2)
    if t.is_contiguous():
        return torch.empty(t.transpose(-1, -2).shape, device=t.device, dtype=dtype).transpose(-1, -2)
    return torch.empty(t.shape, device=t.device, dtype=dtype)


class SpecProgram:
    """Runnable: stages + main kernel of one spec at one shape and design."""

    tier_source = "triton"

    def __init__(self, spec: SpecIR, plan: EpiloguePlan):
        self.spec, self.plan = spec, plan
        self.name = f"dsl {spec.kernel.name} {plan.config.as_dict()}"
        narrowing = sum(1 for st in spec.post if st.dtype not in (None, "fp32") and st.dtype != spec.kernel.c.dtype)
        self.tolerance = tolerance(plan.spec, narrowing)

    def new_case(self, device, generator: torch.Generator) -> SpecCase:
        kernel_in = new_inputs(self.plan, device, generator)
        caller = dict(kernel_in)
        for st in self.spec.pre:  # the caller holds the staged operand in its own dtype and layout
            t = kernel_in[st.tensor]
            dtype = TORCH_DTYPES[st.dtype] if st.dtype else t.dtype
            held = _relaid(t, dtype, st.kind == "transpose")
            held.copy_(t)
            caller[st.tensor] = held
            kernel_in[st.tensor] = _relaid(t, t.dtype, False)
        kernel_out = new_output(self.plan, device)
        out = kernel_out
        for st in self.spec.post:
            dtype = TORCH_DTYPES[st.dtype] if st.dtype else kernel_out.dtype
            out = _relaid(kernel_out, dtype, st.kind == "transpose")
        case = SpecCase(caller, kernel_in, out, kernel_out, self.plan.new_workspace(device))
        case.run = self.plan.bind(case.kernel_in, case.kernel_out, case.workspace)
        self.poison(case)
        return case

    def launch(self, case: SpecCase) -> None:
        for st in self.spec.pre:
            convert(case.caller[st.tensor], case.kernel_in[st.tensor])
        case.run()
        if self.spec.post:
            convert(case.kernel_out, case.out)

    def output(self, case: SpecCase) -> torch.Tensor:
        return case.out

    def reference(self, case: SpecCase, out: torch.Tensor | None = None) -> torch.Tensor:
        """The float64 reference rounded as C and each stage after the kernel store it; `out`
        (default: the program's output) picks between the two neighbours of an ambiguous rounding."""
        inputs = dict(case.caller)
        for st in self.spec.pre:  # what the kernel sees: the caller's values in the kernel's dtype
            inputs[st.tensor] = inputs[st.tensor].to(case.kernel_in[st.tensor].dtype)
        stores = (case.kernel_out.dtype, *(case.out.dtype for _ in self.spec.post[-1:]))
        return reference(self.plan, inputs, case.out if out is None else out, stores)

    def poison(self, case: SpecCase) -> None:
        poison(case.out)
        if case.kernel_out is not case.out:
            poison(case.kernel_out)

    @property
    def case_bytes(self) -> int:
        from formloop.library.gemm_epilogue_kernel import EpilogueGemm

        return EpilogueGemm(self.plan).case_bytes
