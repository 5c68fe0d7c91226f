"""The one output checker: the harness, the integrity probes and the GPU evaluator all compare here.

A candidate output `c` is compared with the reference `r` (same dtype, same protocol) and, when it
can be computed, the truth `t` (the reference re-run in float64; else `t = r`). Three rules, all
evaluated in the same pass, one of them deciding `ok`:

    Tolerance (formloop, default)  |c - t| <= rtol*|t| + atol_scale*rms(t) + k*rms(r - t), every element
    AllClose  (KernelBench)        torch.isclose(r, c, rtol, atol) for every element, in r's dtype
    NormBound (GPU evaluator)      ||c - t|| / ||t|| <= rel, max|c - t| <= element_factor*rel*rms(t),
                                   and every element written (finite where t is finite)

The formloop rule's middle term scales the absolute slack with the output's own magnitude, so zeros
for a small-valued output (a softmax over a wide row) fail where a fixed atol of 1e-2 passes them;
the last term is the reference's own rounding error (k = 4). Special values must agree exactly.

Everything runs where the tensors live, in blocks of `CHUNK_ELEMS` elements (float64 temporaries of
a block, never of the whole output), and only scalars cross to the host. The truth may be a
`TruthChunks` (row blocks computed on demand, see `formloop.measure.truth`)."""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, Union

import torch

from formloop.dtypes import DTYPES
from formloop.errors import InvalidInput

CHUNK_ELEMS = 1 << 25     # 32 Mi elements: 256 MiB per float64 temporary


@dataclass(frozen=True)
class Tolerance:
    """formloop's magnitude-aware element rule (see the module docstring)."""

    rtol: float
    atol_scale: float
    ref_error_factor: float = 4.0
    name = "formloop"


@dataclass(frozen=True)
class AllClose:
    """KernelBench's rule: torch.allclose(reference, candidate, atol=atol, rtol=rtol)."""

    atol: float
    rtol: float
    name = "kernelbench"


@dataclass(frozen=True)
class NormBound:
    """The GPU evaluator's rule: relative Frobenius error and the worst element against RMS."""

    rel: float
    element_factor: float = 10.0
    name = "norm"


Rule = Union[Tolerance, AllClose, NormBound]
RULES = ("formloop", "kernelbench")

# Per output dtype, from the dtype table (a torch build without a type skips it).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    getattr(torch, d.torch): Tolerance(d.compare_rtol, d.compare_rtol)
    for d in DTYPES if d.storage and d.compare_rtol is not None and hasattr(torch, d.torch)
}
# KernelBench's tolerance by output dtype (atol = rtol), from the dtype table.
KERNELBENCH_TOLERANCE: dict[torch.dtype, float] = {
    getattr(torch, d.torch): d.kernelbench_tol
    for d in DTYPES if d.kernelbench_tol is not None and hasattr(torch, d.torch)
}


def tolerance_for(dtype: torch.dtype, rtol: float | None = None) -> Tolerance:
    """The dtype's tolerance; `rtol` overrides both relative terms (never loosened silently)."""
    if rtol is not None:
        if not (isinstance(rtol, (int, float)) and 0 < rtol < 1):
            raise InvalidInput("rtol", rtol, "0 < rtol < 1")
        return Tolerance(rtol, rtol)
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    raise InvalidInput("output dtype", str(dtype), [str(d) for d in TOLERANCES],
                       fix="pass rtol= for this floating dtype")


def rule_for(name: str, dtype: torch.dtype, rtol: float | None = None) -> Rule:
    """The named rule ('formloop' | 'kernelbench') at the dtype's tolerance (or `rtol`)."""
    if name == "formloop":
        return tolerance_for(dtype, rtol)
    if name == "kernelbench":
        tol = rtol if rtol is not None else KERNELBENCH_TOLERANCE.get(dtype)
        if tol is None:
            raise InvalidInput("output dtype for the KernelBench rule", str(dtype),
                               [str(d) for d in KERNELBENCH_TOLERANCE])
        return AllClose(tol, tol)
    raise InvalidInput("tolerance rule", name, RULES)


class TruthChunks(Protocol):
    """A float64 truth delivered in row blocks along dim 0 (see formloop.measure.truth)."""

    shape: tuple[int, ...]

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]: ...

    def value_at(self, flat: int) -> float: ...


@dataclass(frozen=True)
class Comparison:
    """How a candidate's outputs compare with the reference; `worst` locates the worst element.
    `allclose` is KernelBench's verdict on the same data (None where it has no tolerance)."""

    ok: bool
    reason: str = ""
    max_ratio: float = 0.0          # max |c - t| / allowed (formloop rule); <= 1 passes
    bad_fraction: float = 0.0       # share of elements outside the formloop tolerance
    norm_rel_error: float = 0.0     # ||c - t|| / ||t|| over finite elements
    max_error_rms: float = 0.0      # max |c - t| / rms(t)
    all_written: bool = True        # finite wherever the truth is finite
    allclose: bool | None = None
    rule: str = "formloop"
    worst: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def flatten(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in flatten(o)]
    return [out]


def _blocks(c: torch.Tensor, r: torch.Tensor, t: Any, chunk: int) -> Iterator[tuple[int, Any, Any, Any]]:
    """(flat offset, c, r, t) blocks as flat views; t is None when the truth is the reference."""
    if t is not None and not isinstance(t, torch.Tensor):
        row = math.prod(r.shape[1:])
        for a, b, tb in t.blocks():
            yield a * row, c[a:b].reshape(-1), r[a:b].reshape(-1), tb.reshape(-1)
        return
    cf, rf = c.reshape(-1), r.reshape(-1)
    tf = t.reshape(-1) if t is not None else None
    for start in range(0, rf.numel(), chunk):
        stop = start + chunk
        yield start, cf[start:stop], rf[start:stop], (tf[start:stop] if tf is not None else None)


def _structure(c: Any, r: Any, index: int) -> str:
    if not isinstance(c, torch.Tensor):
        return f"output {index}: got {type(c).__name__}, reference Tensor"
    if type(c) is not type(r):
        return (f"output {index} is a {type(c).__name__} (a torch.Tensor subclass), the reference a "
                f"{type(r).__name__}: a subclass can compute its values when they are read, outside the timed call")
    if tuple(c.shape) != tuple(r.shape):
        return f"output {index}: shape {tuple(c.shape)} != reference {tuple(r.shape)}"
    if c.dtype != r.dtype:
        return f"output {index}: dtype {c.dtype} != reference {r.dtype}"
    if c.device != r.device:
        return f"output {index}: on {c.device}, reference on {r.device}"
    return ""


def _scalar(c: Any, r: Any, rtol: float | None, index: int) -> Comparison:
    if isinstance(c, torch.Tensor) or type(c) is not type(r):
        return Comparison(False, f"output {index}: got {type(c).__name__}, reference {type(r).__name__}")
    if isinstance(r, float):
        ok = math.isclose(c, r, rel_tol=rtol or 1e-6, abs_tol=0.0) or (math.isnan(c) and math.isnan(r))
        return Comparison(ok, "" if ok else f"output {index}: {c!r} != {r!r}")
    return Comparison(c == r, "" if c == r else f"output {index}: {c!r} != {r!r}")


def compare_tensor(c: Any, r: Any, t: Any = None, *, rule: Rule | None = None, rtol: float | None = None,
                   index: int = 0, chunk_elems: int = CHUNK_ELEMS) -> Comparison:
    """Compare one candidate output with the reference `r` and the truth `t` (a tensor, a
    TruthChunks, or None for 'the reference is the truth'). `rule` decides ok (default: formloop's
    tolerance for r's dtype, `rtol` overriding its relative terms)."""
    if not isinstance(r, torch.Tensor):
        return _scalar(c, r, rtol, index)
    problem = _structure(c, r, index)
    if problem:
        return Comparison(False, problem, max_ratio=math.inf, bad_fraction=1.0, all_written=False)
    c, r = c.detach(), r.detach()
    n = r.numel()
    if not r.is_floating_point():
        bad = int((c != r).sum()) if n else 0
        return Comparison(bad == 0, "" if bad == 0 else f"output {index}: {bad} of {n} elements differ",
                          max_ratio=math.inf if bad else 0.0, bad_fraction=bad / max(n, 1), allclose=bad == 0)
    if isinstance(t, torch.Tensor) and tuple(t.shape) != tuple(r.shape):
        t = None
    tol = rule if isinstance(rule, Tolerance) else tolerance_for(r.dtype, rtol)
    kb = KERNELBENCH_TOLERANCE.get(r.dtype) if not isinstance(rule, AllClose) else None
    kb_rule = rule if isinstance(rule, AllClose) else (AllClose(kb, kb) if kb is not None else None)
    s = _pass_stats(c, r, t, kb_rule, chunk_elems)
    rms_t = math.sqrt(s["t2"] / s["nt"]) if s["nt"] else 0.0
    ref_err = math.sqrt(s["rt2"] / s["nrt"]) if (t is not None and s["nrt"]) else 0.0
    floor = (tol.atol_scale * rms_t + tol.ref_error_factor * ref_err, torch.finfo(r.dtype).tiny)
    e = _pass_ratio(c, r, t, tol, floor, chunk_elems)
    norm_rel = math.sqrt(s["ct2"]) / math.sqrt(s["t2"]) if s["t2"] > 0 else (0.0 if s["ct2"] == 0 else math.inf)
    max_err_rms = s["max_abs"] / rms_t if rms_t > 0 else (0.0 if s["max_abs"] == 0 else math.inf)
    all_written = s["unwritten"] == 0
    allclose = (s["kb_bad"] == 0) if kb_rule is not None else None
    worst = _worst(c, r, t, e, rms_t, tol, floor, index) if n else None
    rule_name = rule.name if rule is not None else "formloop"
    if isinstance(rule, AllClose):
        ok = bool(allclose)
        reason = "" if ok else (f"output {index}: {s['kb_bad']} of {n} elements fail torch.allclose("
                                f"atol={rule.atol:g}, rtol={rule.rtol:g}) against the reference (KernelBench rule)")
    elif isinstance(rule, NormBound):
        ok = all_written and norm_rel <= rule.rel and max_err_rms <= rule.element_factor * rule.rel
        reason = "" if ok else (f"output {index}: {s['unwritten']} unwritten (non-finite) elements" if not all_written
                                else f"output {index}: relative error {norm_rel:.3g} (bound {rule.rel:g}), worst "
                                     f"element {max_err_rms:.3g} x RMS (bound {rule.element_factor * rule.rel:g})")
    else:
        ok = e["bad"] == 0
        reason = "" if ok else (f"output {index}: {e['bad']} of {n} elements outside tolerance (worst "
                                f"{e['max']:.3g}x the allowed error at {worst['index'] if worst else '?'})")
    return Comparison(ok, reason, e["max"], e["bad"] / max(n, 1), norm_rel, max_err_rms, all_written, allclose,
                      rule_name, worst)


def _pass_stats(c, r, t, kb_rule: AllClose | None, chunk: int) -> dict[str, float]:
    """Sums over finite elements: t^2, (r - t)^2, (c - t)^2; max |c - t|; unwritten and allclose failures."""
    acc = {"t2": 0.0, "nt": 0, "rt2": 0.0, "nrt": 0, "ct2": 0.0, "max_abs": 0.0, "unwritten": 0, "kb_bad": 0}
    for _, cb, rb, tb in _blocks(c, r, t, chunk):
        if kb_rule is not None:
            acc["kb_bad"] += int((~torch.isclose(rb, cb, rtol=kb_rule.rtol, atol=kb_rule.atol)).sum())
        c64, r64 = cb.double(), rb.double()
        t64 = r64 if tb is None else tb.to(device=rb.device, dtype=torch.float64)
        ft = torch.isfinite(t64)
        acc["t2"] += float(torch.where(ft, t64, 0.0).pow(2).sum())
        acc["nt"] += int(ft.sum())
        if tb is not None:
            d = r64 - t64
            fd = torch.isfinite(d)
            acc["rt2"] += float(torch.where(fd, d, 0.0).pow(2).sum())
            acc["nrt"] += int(fd.sum())
        fc = torch.isfinite(c64)
        acc["unwritten"] += int((ft & ~fc).sum())
        d = torch.where(ft & fc & torch.isfinite(r64), c64 - t64, 0.0)
        acc["ct2"] += float(d.pow(2).sum())
        if d.numel():
            acc["max_abs"] = max(acc["max_abs"], float(d.abs().max()))
    return acc


def _ratio(c64, r64, t64, tol: Tolerance, floor: tuple[float, float]):
    special = ~torch.isfinite(t64) | ~torch.isfinite(r64)
    ok_special = torch.where(special, (c64 == r64) | (torch.isnan(c64) & torch.isnan(r64)), torch.isfinite(c64))
    allowed = (tol.rtol * t64.abs() + floor[0]).clamp_min(floor[1])
    return torch.where(special | ~torch.isfinite(c64), torch.where(ok_special, 0.0, math.inf),
                       (c64 - t64).abs() / allowed), allowed


def _pass_ratio(c, r, t, tol: Tolerance, floor: tuple[float, float], chunk: int) -> dict[str, Any]:
    out: dict[str, Any] = {"bad": 0, "max": -1.0, "at": 0}
    for off, cb, rb, tb in _blocks(c, r, t, chunk):
        if not rb.numel():
            continue
        r64 = rb.double()
        ratio, _ = _ratio(cb.double(), r64, r64 if tb is None else tb.to(rb.device, torch.float64), tol, floor)
        ratio = torch.nan_to_num(ratio, nan=math.inf)
        out["bad"] += int((ratio > 1.0).sum())
        k = int(torch.argmax(ratio))
        m = float(ratio[k])
        if m > out["max"]:
            out["max"], out["at"] = m, off + k
    out["max"] = max(out["max"], 0.0)
    return out


def _at(x: Any, flat: int, r: torch.Tensor) -> float:
    if x is None:
        return float(r.reshape(-1)[flat])
    if isinstance(x, torch.Tensor):
        return float(x.reshape(-1)[flat])
    return float(x.value_at(flat))


def _worst(c, r, t, e, rms_t, tol, floor, index) -> dict[str, Any]:
    flat = e["at"]
    idx = [int(i) for i in torch.unravel_index(torch.tensor(flat), r.shape)] if r.dim() else []
    truth = _at(t, flat, r)
    return {"output": index, "index": idx, "candidate": float(c.reshape(-1)[flat]),
            "reference": float(r.reshape(-1)[flat]), "truth": truth,
            "allowed": max(tol.rtol * abs(truth) + floor[0], floor[1]) if math.isfinite(truth) else 0.0}


def compare_outputs(cand: Any, ref: Any, truth: Any = None, *, rule: Rule | str | None = None,
                    rtol: float | None = None) -> Comparison:
    """Compare (possibly nested) outputs; the worst tensor decides. `rule` may be a rule name."""
    cs, rs = flatten(cand), flatten(ref)
    ts: Sequence[Any] = flatten(truth) if truth is not None else [None] * len(rs)
    if len(cs) != len(rs):
        return Comparison(False, f"candidate returned {len(cs)} outputs, reference {len(rs)}")
    results = []
    for i, (c, r, t) in enumerate(zip(cs, rs, ts)):
        one = rule_for(rule, r.dtype, rtol) if isinstance(rule, str) and isinstance(r, torch.Tensor) \
            and r.is_floating_point() else (None if isinstance(rule, str) else rule)
        results.append(compare_tensor(c, r, t, rule=one, rtol=rtol, index=i))
    failed = [x for x in results if not x.ok]
    if not failed:
        return max(results, key=lambda x: x.max_ratio) if results else Comparison(True)
    return max(failed, key=lambda x: x.max_ratio)


def _chunked_equal(x: torch.Tensor, y: torch.Tensor, chunk: int = CHUNK_ELEMS) -> int:
    """How many elements differ bitwise-or-by-value (NaN equals NaN), counted in blocks."""
    xf, yf = x.detach().reshape(-1), y.detach().reshape(-1).to(x.device)
    differ = 0
    for s in range(0, xf.numel(), chunk):
        a, b = xf[s:s + chunk], yf[s:s + chunk]
        same = (a == b) | (torch.isnan(a) & torch.isnan(b)) if a.is_floating_point() else (a == b)
        differ += int((~same).sum())
    return differ


def same_values(a: Any, b: Any) -> bool:
    """Equal outputs (NaN equal to NaN): used to tell a cached result from a recomputed one."""
    xs, ys = flatten(a), flatten(b)
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or _chunked_equal(x, y):
                return False
        elif x != y:
            return False
    return True
