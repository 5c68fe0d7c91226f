"""The math mode a reference runs in: the problem's declared precision, or PyTorch's defaults.

PyTorch runs fp32 convolutions through cuDNN on TF32 tensor cores by default
(`torch.backends.cudnn.allow_tf32` is True; `torch.backends.cuda.matmul.allow_tf32` is False), so
an fp32 reference conv carries TF32 rounding (~1e-3 relative) and an fp32-accurate candidate differs
from it by the reference's own error. The reference that candidates are checked against is
therefore the problem's math in its declared precision: fp32 with TF32 off for cuDNN and matmul
(`fp32_math`). Timing keeps PyTorch's defaults (what users run): only correctness references run
under this mode. bf16/fp16 ops are unaffected by both flags."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

REFERENCE_MATH = ("fp32", "defaults")
FP32_NOTE = "fp32 math (TF32 off)"


def tf32_flags() -> dict[str, bool]:
    """The two TF32 switches as they are now in this process."""
    return {"cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32)}


def _set(cudnn: bool, matmul: bool) -> None:
    torch.backends.cudnn.allow_tf32 = cudnn
    torch.backends.cuda.matmul.allow_tf32 = matmul


def _matmul_precision() -> str | None:
    """cuBLAS's fp32 precision setting where torch has one (2.9 and later): 'none' until set, and setting the
    legacy switch writes 'ieee' or 'tf32', so the switch alone cannot restore 'none'. torch.compile keys its
    caches on it (Inductor's FX graph cache): after a reference has run, it must be what it was."""
    return getattr(torch.backends.cuda.matmul, "fp32_precision", None)


@contextmanager
def fp32_math() -> Iterator[None]:
    """fp32 ops as fp32 (cuDNN and cuBLAS TF32 off) inside; the previous settings restored exactly after,
    also when the body raises."""
    before, precision = tf32_flags(), _matmul_precision()
    _set(False, False)
    try:
        yield
    finally:
        _set(before["cudnn.allow_tf32"], before["cuda.matmul.allow_tf32"])
        if precision is not None and _matmul_precision() != precision:
            torch.backends.cuda.matmul.fp32_precision = precision


@contextmanager
def reference_math(mode: str) -> Iterator[None]:
    """'fp32': `fp32_math`; 'defaults': the flags as they are (PyTorch's defaults unless changed)."""
    if mode == "fp32":
        with fp32_math():
            yield
    else:
        yield


def describe(mode: str) -> str:
    """One line for a result's notes: what the correctness reference and the timing ran under."""
    f = tf32_flags()
    timing = (f"eager timing: PyTorch defaults (cudnn.allow_tf32={f['cudnn.allow_tf32']}, "
              f"cuda.matmul.allow_tf32={f['cuda.matmul.allow_tf32']})")
    if mode == "fp32":
        return f"reference for correctness: {FP32_NOTE}, cudnn and cuda.matmul allow_tf32 False; {timing}"
    return f"reference for correctness: PyTorch defaults (TF32 as the flags say); {timing}"
