"""The decode step's new token for attention-decode with RoPE inside (the Qwen3 layer's fusion RA).

With a plan's `rope` on, q is the query as the QKV projection wrote it (before the per-head RMSNorm and
RoPE), and the new token's key and value come raw beside it: the kernel normalizes and rotates q and the
new key at position L − 1, attends over the cache's L − 1 keys plus the new one, and writes the rotated
key and the value into the cache at L − 1 (attention_decode_jit documents the program). This module
holds those operands and checks them (the tables as qk_rope.check_rope_tables does for the rope kernel); no triton."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from formloop.errors import InvalidInput
from formloop.library.qk_rope import check_rope_tables


@dataclass
class NewToken:
    """k, v [B, Hkv, D] as the projection wrote them (head dim contiguous, one batch stride for both);
    q_weight, k_weight [D] (the per-head RMSNorms' weights); cos, sin fp32 [P, D/2] with P ≥ L (HF's
    tables, qk_rope_kernel.rope_tables), read at row L − 1."""

    k: torch.Tensor
    v: torch.Tensor
    q_weight: torch.Tensor
    k_weight: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.k, self.v, self.q_weight, self.k_weight, self.cos, self.sin

    def check(self, B: int, Hkv: int, D: int, L: int, dtype: torch.dtype) -> None:
        for name, t in (("new k", self.k), ("new v", self.v)):
            if tuple(t.shape) != (B, Hkv, D) or t.dtype != dtype:
                raise InvalidInput(f"{name}", (tuple(t.shape), str(t.dtype)), f"{dtype} [{B}, {Hkv}, {D}]")
            if t.stride(2) != 1 or t.stride(1) != D:
                raise InvalidInput(f"{name} layout", tuple(t.stride()), f"heads {D} apart, head dim contiguous")
        if self.k.stride(0) != self.v.stride(0):
            raise InvalidInput("new v batch stride", self.v.stride(0), [self.k.stride(0)])
        for name, w in (("q_weight", self.q_weight), ("k_weight", self.k_weight)):
            if tuple(w.shape) != (D,) or w.stride(0) != 1:
                raise InvalidInput(name, tuple(w.shape), f"a contiguous [{D}] vector")
        check_rope_tables(self.cos, self.sin, D, rows=L)  # the new key's position is L - 1

    def args(self, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple:  # N_TENSORS tensors, then the strides
        """The kernel's arguments kn, vn, qw, kw, cos, sin, kc, vc, s_nb, s_nh, s_cs."""
        return (self.k, self.v, self.q_weight, self.k_weight, self.cos, self.sin, k_cache, v_cache,
                self.k.stride(0), self.k.stride(1), self.cos.stride(0))


N_TENSORS = 8  # tensors at the head of `NewToken.args` (and of `absent_args`); the rest are strides


def absent_args(q: torch.Tensor) -> tuple:
    """The same arguments without RoPE inside (never read: the kernel's ROPE branch is compiled out)."""
    return (q,) * N_TENSORS + (0, 0, 0)
