"""Production baselines for the attention families: torch's scaled_dot_product_attention pinned to
one backend (cuDNN or flash), on the same cases as the Triton instances (imports torch).

Grouped-query heads are passed as they are (Hkv < Hq) with enable_gqa=True, so the backend reads
each key/value head once, as the Triton kernels do. A backend that refuses that call is tried
without the flag, then (labelled "expanded KV", which reads G times the KV bytes) on K/V repeated
per query head; `variant` records which call ran."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from formloop.errors import InvalidInput
from formloop.library.attention_cases import TOLERANCE, RowScaled, qkv, reference

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
VARIANTS = ("gqa", "heads", "expanded KV")


class SdpaCase:
    def __init__(self, q, k, v, G: int):
        self.q, self.k, self.v = q, k, v
        self.out = torch.full_like(q, float("nan"))
        self.G = G
        self.k_x = self.v_x = None  # K/V repeated per query head, made on first need


class SdpaAttention(RowScaled):
    """SDPA on one backend: decode (Lq = 1) or prefill (Lq = L, causal or not). A Runnable, checked row by
    row as the Triton instances are (attention_cases.RowScaled)."""

    tier_source = "torch sdpa"

    def __init__(self, backend: str, B: int, Hq: int, Hkv: int, D: int, L: int, *, decode: bool, causal: int = 1,
                 dtype: str = "bf16", kind: str = "random", variant: str = "gqa"):
        if backend not in BACKENDS:
            raise InvalidInput("sdpa backend", backend, sorted(BACKENDS))
        if variant not in VARIANTS:
            raise InvalidInput("sdpa variant", variant, VARIANTS)
        self.backend, self.variant, self.kind = backend, variant, kind
        self.shape = (B, Hq, Hkv, D, L)
        self.decode, self.causal, self.dtype = decode, bool(causal) and not decode, dtype
        self.name = f"sdpa {backend} ({variant})"
        self.tolerance = TOLERANCE[dtype]

    def new_case(self, device, generator) -> SdpaCase:
        B, Hq, Hkv, D, L = self.shape
        q, k, v = qkv(B, Hq, Hkv, 1 if self.decode else L, L, D, self.dtype, device, generator, self.kind)
        case = SdpaCase(q, k, v, Hq // Hkv)
        if self.variant == "expanded KV":
            case.k_x = k.repeat_interleave(case.G, dim=1)
            case.v_x = v.repeat_interleave(case.G, dim=1)
        return case

    def launch(self, case: SdpaCase) -> None:
        with sdpa_kernel(BACKENDS[self.backend]):
            if self.variant == "expanded KV":
                case.out = F.scaled_dot_product_attention(case.q, case.k_x, case.v_x, is_causal=self.causal)
            else:
                case.out = F.scaled_dot_product_attention(case.q, case.k, case.v, is_causal=self.causal,
                                                          enable_gqa=self.variant == "gqa")

    def raw_output(self, case: SdpaCase) -> torch.Tensor:
        return case.out

    def raw_reference(self, case: SdpaCase) -> torch.Tensor:
        return reference(case.q, case.k, case.v, causal=self.causal, dtype=torch.float32)

    def poison(self, case: SdpaCase) -> None:
        case.out = torch.full_like(case.q, float("nan"))

    @property
    def case_bytes(self) -> int:
        B, Hq, Hkv, D, L = self.shape
        lq = 1 if self.decode else L
        kv = Hq if self.variant == "expanded KV" else Hkv
        return 2 * (2 * B * Hq * lq * D + 2 * B * kv * L * D)


def first_working(backend: str, *args, device="cuda", **kwargs) -> tuple[SdpaAttention | None, list[str]]:
    """The first variant of `backend` that runs on this device, and why the others did not."""
    notes = []
    for variant in VARIANTS:
        inst = SdpaAttention(backend, *args, variant=variant, **kwargs)
        try:
            inst.launch(inst.new_case(device, torch.Generator(device=device).manual_seed(0)))
            torch.cuda.synchronize()
            return inst, notes
        except Exception as exc:  # noqa: BLE001 - a refused call is a reported result, not a crash
            notes.append(f"{variant}: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
    return None, notes
