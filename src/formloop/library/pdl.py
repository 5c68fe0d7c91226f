"""Programmatic dependent launch (PDL) as device functions the kernels of a chain call.

A kernel launched with `launch_pdl=True` may be scheduled while the kernel before it on the stream is
still running, once every program of that kernel has called `pdl_launch_dependents()`
(griddepcontrol.launch_dependents). Its `pdl_wait()` (griddepcontrol.wait) returns only when the
kernel before it has completed and its memory is visible, so a kernel of the chain:
  - may read, before the wait, only what no earlier kernel of the step writes (weights, tables);
  - must read everything an earlier kernel writes, and do EVERY store, after the wait (a store
    before it could overwrite a buffer the kernel before still reads);
  - must execute the wait in every program, unconditionally (a program that skipped it would let
    the grid complete before its predecessor, and the next kernel's wait would not cover that one).
Completion is transitive along the chain: kernel n completes only after its wait returned, so
kernel n + 1's wait also covers kernel n − 1. Without such a launch both instructions are no-ops.
`formloop.library.pdl_check` checks these rules on a kernel's source and on its compiled PTX.

`l2_prefetch(ptrs)` asks the L2 for the 128-byte lines at `ptrs` (prefetch.global.L2, no registers
written): how a GEMM starts its weight stream before the wait. Triton 3.6's interpreter has no
inline assembly, so under TRITON_INTERPRET=1 the three are empty functions (the interpreter runs
one kernel at a time: there is nothing to overlap). This module imports triton."""
from __future__ import annotations

import os

import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
WAIT_NAMES = ("pdl_wait", "gdc_wait")
TRIGGER_NAMES = ("pdl_launch_dependents", "gdc_launch_dependents")

if INTERPRETED:
    @triton.jit
    def pdl_wait():
        pass

    @triton.jit
    def pdl_launch_dependents():
        pass

    @triton.jit
    def l2_prefetch(ptrs):
        pass
else:
    from triton.language.extra.cuda import gdc_launch_dependents as pdl_launch_dependents  # noqa: F401
    from triton.language.extra.cuda import gdc_wait as pdl_wait  # noqa: F401

    @triton.jit
    def l2_prefetch(ptrs):
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs.to(tl.int64)],
                                  dtype=tl.int32, is_pure=False, pack=1)


def launch_options(pdl: bool) -> dict:
    """The launch keywords of a kernel with a `PDL` constexpr: launched as a programmatic dependent
    of the kernel before it on the stream, or exactly as without PDL (no keyword added)."""
    return {"PDL": True, "launch_pdl": True} if pdl else {}
