"""Output comparison with dtype- and magnitude-aware tolerances.

A candidate's element c passes against the truth t (an fp64 re-run of the reference when it can
be computed, else the reference itself) when

    |c - t| <= rtol * |t|  +  atol_scale * rms(t)  +  k * rms(r - t)

`rtol` and `atol_scale` come from the output dtype (fp32 leaves room for TF32 tensor cores).
The middle term scales the absolute slack with the output's own magnitude, so returning zeros for a
small-valued output (a softmax over a wide row, a scaled residual) fails where a fixed atol of 1e-2
would pass it. The last term is the reference's own rounding error (k = 4): an output that is pure
cancellation noise in the reference is not held to a tolerance the reference itself misses."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from formloop.dtypes import DTYPES
from formloop.errors import InvalidInput


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol_scale: float
    ref_error_factor: float = 4.0


# Per output dtype, from the dtype table's compare_rtol (a torch build without a type skips it).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    getattr(torch, d.torch): Tolerance(d.compare_rtol, d.compare_rtol)
    for d in DTYPES if d.storage and d.compare_rtol is not None and hasattr(torch, d.torch)
}


def tolerance_for(dtype: torch.dtype, rtol: float | None = None) -> Tolerance:
    """The dtype's tolerance; `rtol` overrides both relative terms (never loosened silently)."""
    if rtol is not None:
        if not 0 < rtol < 1:
            raise InvalidInput("rtol", rtol, "0 < rtol < 1")
        return Tolerance(rtol, rtol)
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    raise InvalidInput("output dtype", str(dtype), [str(d) for d in TOLERANCES],
                       fix="pass rtol= for this floating dtype")


@dataclass(frozen=True)
class Comparison:
    """How a candidate's outputs compare with the reference; `worst` locates the worst element."""

    ok: bool
    reason: str = ""
    max_ratio: float = 0.0          # max |c - t| / allowed; <= 1 passes
    bad_fraction: float = 0.0       # share of elements outside tolerance
    norm_rel_error: float = 0.0     # ||c - t|| / ||t||
    worst: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def flatten(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in flatten(o)]
    return [out]


def _rms(x: torch.Tensor) -> float:
    x = x[torch.isfinite(x)]
    return float(x.pow(2).mean().sqrt()) if x.numel() else 0.0


def compare_tensor(c: Any, r: Any, t: Any = None, *, rtol: float | None = None, index: int = 0) -> Comparison:
    if not isinstance(r, torch.Tensor):
        if isinstance(c, torch.Tensor) or type(c) is not type(r):
            return Comparison(False, f"output {index}: got {type(c).__name__}, reference {type(r).__name__}")
        if isinstance(r, float):
            ok = math.isclose(c, r, rel_tol=rtol or 1e-6, abs_tol=0.0) or (math.isnan(c) and math.isnan(r))
            return Comparison(ok, "" if ok else f"output {index}: {c!r} != {r!r}")
        return Comparison(c == r, "" if c == r else f"output {index}: {c!r} != {r!r}")
    if not isinstance(c, torch.Tensor):
        return Comparison(False, f"output {index}: got {type(c).__name__}, reference Tensor")
    if tuple(c.shape) != tuple(r.shape):
        return Comparison(False, f"output {index}: shape {tuple(c.shape)} != reference {tuple(r.shape)}")
    if c.dtype != r.dtype:
        return Comparison(False, f"output {index}: dtype {c.dtype} != reference {r.dtype}")
    c, r = c.detach().cpu(), r.detach().cpu()
    if not r.is_floating_point():
        bad = c != r
        n = int(bad.sum())
        return Comparison(n == 0, "" if n == 0 else f"output {index}: {n} of {r.numel()} elements differ",
                          max_ratio=float("inf") if n else 0.0, bad_fraction=n / max(r.numel(), 1))
    tol = tolerance_for(r.dtype, rtol)
    c64, r64 = c.double(), r.double()
    t64 = t.detach().cpu().double() if isinstance(t, torch.Tensor) and t.shape == r.shape else r64
    ref_err = _rms(r64 - t64) if t64 is not r64 else 0.0
    allowed = tol.rtol * t64.abs() + tol.atol_scale * _rms(t64) + tol.ref_error_factor * ref_err
    allowed = allowed.clamp_min(torch.finfo(r.dtype).tiny)
    # Special values must agree exactly: a NaN the reference lacks is a defect (often poison).
    special = ~torch.isfinite(t64) | ~torch.isfinite(r64)
    ok_special = torch.where(special, (c64 == r64) | (torch.isnan(c64) & torch.isnan(r64)), torch.isfinite(c64))
    diff = (c64 - t64).abs()
    ratio = torch.where(special | ~torch.isfinite(c64), torch.where(ok_special, 0.0, math.inf), diff / allowed)
    bad = ratio > 1.0
    n_bad = int(bad.sum())
    finite = ~special & torch.isfinite(c64)
    denom = float(t64[finite].norm()) if finite.any() else 0.0
    norm_rel = float((c64 - t64)[finite].norm()) / denom if denom > 0 else 0.0
    worst = None
    if r.numel():
        flat = int(torch.argmax(torch.nan_to_num(ratio, nan=math.inf)).item())
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), r.shape)) if r.dim() else ()
        worst = {"output": index, "index": list(idx), "candidate": float(c64.reshape(-1)[flat]),
                 "reference": float(r64.reshape(-1)[flat]), "truth": float(t64.reshape(-1)[flat]),
                 "allowed": float(allowed.reshape(-1)[flat])}
    max_ratio = float(ratio.max()) if r.numel() else 0.0
    reason = "" if n_bad == 0 else (f"output {index}: {n_bad} of {r.numel()} elements outside tolerance "
                                    f"(worst {max_ratio:.3g}x the allowed error at {worst['index'] if worst else '?'})")
    return Comparison(n_bad == 0, reason, max_ratio, n_bad / max(r.numel(), 1), norm_rel, worst)


def compare_outputs(cand: Any, ref: Any, truth: Any = None, *, rtol: float | None = None) -> Comparison:
    """Compare (possibly nested) outputs; the worst tensor decides."""
    cs, rs = flatten(cand), flatten(ref)
    ts: Sequence[Any] = flatten(truth) if truth is not None else [None] * len(rs)
    if len(cs) != len(rs):
        return Comparison(False, f"candidate returned {len(cs)} outputs, reference {len(rs)}")
    results = [compare_tensor(c, r, t, rtol=rtol, index=i) for i, (c, r, t) in enumerate(zip(cs, rs, ts))]
    failed = [x for x in results if not x.ok]
    if not failed:
        return max(results, key=lambda x: x.max_ratio) if results else Comparison(True)
    return max(failed, key=lambda x: x.max_ratio)


def same_values(a: Any, b: Any) -> bool:
    """Bitwise-equal outputs (NaN equal to NaN): used to tell a cached result from a recomputed one."""
    xs, ys = flatten(a), flatten(b)
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(
                    torch.nan_to_num(x.detach().cpu(), nan=0.0), torch.nan_to_num(y.detach().cpu(), nan=0.0)):
                return False
        elif x != y:
            return False
    return True
