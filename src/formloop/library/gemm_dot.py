"""The one tensor-core dot of the GEMM kernels (`_dot`), with tl.dot's `input_precision` (ieee, tf32,
tf32x3: formloop.dtypes' dot_precision), shared by the tiling family and the gemm-epilogue kernels.

Triton 3.6's interpreter accepts input_precision "tf32" and "tf32x3" but computes every fp32 dot in
IEEE fp32 (numpy). Under the interpreter (TRITON_INTERPRET=1 before this module is imported) `_dot`
emulates them on the operands' bits instead: tf32 keeps 10 mantissa bits (truncated: the tensor
cores ignore the low 13 bits; rounding would halve the error, so this is the pessimistic model);
tf32x3 is Triton's own decomposition (the F32DotTC pass: hi = tf32(x) rounded, lo = x − hi, then
lo·hi + hi·lo, NaNs of that small part dropped, + hi·hi, each dot on tf32 values). Products of two
tf32 values are exact in fp32, so the interpreter's fp32 dots of them are the tensor cores' products.
Compiled kernels call tl.dot as is."""
from __future__ import annotations

import os

import triton
import triton.language as tl

EMULATE_TF32 = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")


@triton.jit
def _tf32_trunc(x):
    # the tf32 value the tensor cores read: the low 13 mantissa bits dropped (NaN kept)
    t = (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return tl.where(x != x, x, t)


@triton.jit
def _tf32_round(x):
    # x rounded to tf32 (10 mantissa bits), ties away from zero: PTX cvt.rna.tf32.f32 on the bits
    t = ((x.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return tl.where(x != x, x, t)


@triton.jit
def round_bf16(x):
    # fp32 -> bf16 -> fp32, round to nearest even, in integer arithmetic: the same bits on the GPU and in
    # Triton 3.6's interpreter (whose own bf16 conversion truncates); NaN kept. The emitted epilogues
    # (gemm_epilogue_emit.HELPERS) and the vecops kernels round bf16 stores through it under the interpreter.
    bits = x.to(tl.uint32, bitcast=True)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.where(x != x, x, rounded)


@triton.jit
def store_cast(x, ptr):
    """x as the element type of `ptr` (a pointer or a block of them) for tl.store: under the interpreter a
    bf16 is rounded to nearest even first (round_bf16: the interpreter's own conversion truncates, which
    would double the kernels' rounding error on the CPU tier); compiled kernels convert as is."""
    if EMULATE_TF32:
        if ptr.dtype.element_ty == tl.bfloat16:
            x = round_bf16(x.to(tl.float32))
    return x.to(ptr.dtype.element_ty)


@triton.jit
def _dot(a, b, acc, PRECISION: tl.constexpr):
    """acc + a·b with tl.dot's `input_precision`; in the interpreter tf32 and tf32x3 are emulated
    (EMULATE_TF32), compiled kernels call tl.dot as is."""
    if EMULATE_TF32:
        if PRECISION == "tf32":
            acc = tl.dot(_tf32_trunc(a), _tf32_trunc(b), acc, input_precision="ieee")
        elif PRECISION == "tf32x3":
            a_hi = _tf32_round(a)
            b_hi = _tf32_round(b)
            small = tl.dot(_tf32_trunc(a - a_hi), b_hi, input_precision="ieee")
            small = tl.dot(a_hi, _tf32_trunc(b - b_hi), small, input_precision="ieee")
            acc = tl.dot(a_hi, b_hi, acc + tl.where(small != small, 0.0, small), input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
    else:
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc
