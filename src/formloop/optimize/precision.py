"""The operand precision of an fp32 GEMM region: tf32, tf32x3 or fp32 (IEEE, SIMT), chosen a priori.

`decide(...)` with `fp32_operands="auto"` picks the fastest precision whose error bound fits the
tolerance rule the harness applies (formloop.measure.compare.rule_for); a named precision is taken
as asked, with its bound recorded all the same. The bound is a statistical one (independent
rounding errors, a Gaussian tail over the outputs), stated on these assumptions:

  output scale  s = sqrt(K) · rms(A) · rms(B): unit-rms activations (KernelBench draws its inputs
                with torch.randn; normalized hidden states are unit-rms too), B an nn.Linear weight
                at PyTorch's default init (uniform ±1/sqrt(K): rms 1/sqrt(3K)), any other B unit-rms.
  error rms     s · sqrt(op_p² + u²·K/3) relative: op_p the precision's operand rounding per product
                (tf32 truncated to 10 mantissa bits: sqrt(7/6)·2^-10; tf32x3: the residual's
                truncation and the dropped lo·lo term, ≤ 2^-20; fp32: 0), u = 2^-24 the fp32
                accumulation roundoff, kernel and reference summing in different orders.
  worst element z(n) = sqrt(2·ln(2n)) error rms over n outputs, times the epilogue's gain: |scale|,
                1.2 for silu/gelu/mish, 2 for softmax, 1 for the other element ops; a row
                log-sum-exp averages the row's errors (gain e^{s²/2}/sqrt(N), outputs ≥ ln N).
  allowed       KernelBench (torch.allclose vs the fp32 reference, atol = rtol = tol): tol at a
                near-zero output (tol·(1 + ln N) under a log-sum-exp); formloop's rule: its
                RMS-scaled slack atol_scale·(the output's scale).

A precision fits when its bound fits at the model's scale and at SCALE_FACTOR (4) times it: the
integrity battery's skipped-computation probe scales one region of one input by 4 and judges the
output by the same rule, so a bound that holds only for unit-rms inputs would be flagged there.
The scaled input picks between tf32 and tf32x3 (tensor cores) only: where only SIMT fp32 would fit
it, tf32x3 is kept if it fits at the model's scale (the probe may then say 'minor').

When no precision fits (the fp32 reference's own rounding error is of the tolerance's order, e.g.
K = 8192 on unit operands), tf32x3 is kept where its bound is within 2x fp32's, else fp32: the
harness decides, and a failing attempt is retried on fp32 operands (formloop.optimize.engine)."""
from __future__ import annotations

import math
from typing import Any

from formloop.errors import InvalidInput

FP32_OPERANDS = ("auto", "tf32", "tf32x3", "fp32")
SPEED_ORDER = ("tf32", "tf32x3", "fp32")        # fastest first: tf32 peak, tf32 peak / 3, SIMT fp32
OPERAND_RMS = {"tf32": math.sqrt(7 / 6) * 2.0 ** -10, "tf32x3": 2.0 ** -20, "fp32": 0.0}
U_ACC = 2.0 ** -24
GAINS = {"silu": 1.2, "gelu": 1.2, "mish": 1.2, "softmax": 2.0}


def check_option(value: str) -> str:
    """`value` if it is one of FP32_OPERANDS, else the named error."""
    if value not in FP32_OPERANDS:
        raise InvalidInput("fp32-operands", value, FP32_OPERANDS)
    return value


def _gain(chain: list[str]) -> float:
    g = 1.0
    for op in chain:
        kind = op.split("(")[0]
        if kind == "scale" and "by=row" not in op:
            g *= abs(float(op.split("by=")[1].split(",")[0].rstrip(")")))
        else:
            g *= GAINS.get(kind, 1.0)
    return g


def bound(precision: str, *, K: int, N: int, outputs: int, rms_ab: float, chain: list[str] | None = None,
          rule: str = "kernelbench") -> dict[str, Any]:
    """The predicted worst element error of `precision` and what the rule allows (absolute, in the
    output's units), with `fits`. `rms_ab` = rms(A)·rms(B); `outputs` = elements of the region's output."""
    chain = list(chain or [])
    s = math.sqrt(K) * rms_ab
    rel = math.sqrt(OPERAND_RMS[precision] ** 2 + U_ACC ** 2 * K / 3)
    lse = bool(chain) and chain[-1].startswith("logsumexp")
    gain = _gain(chain[:-1] if lse else chain)
    floor = 0.0   # the smallest |output| the allowed error may count on
    if lse:
        gain *= min(1.0, math.exp(min(s * s / 2, 50.0)) / math.sqrt(N))
        z = math.sqrt(2 * math.log(2 * max(outputs, 1)))
        floor = max(0.0, math.log(N) - z * s / math.sqrt(N))
    z = math.sqrt(2 * math.log(2 * max(outputs, 1)))
    worst = z * gain * s * rel
    import torch  # noqa: PLC0415 (the CLI and the API load this module without torch)

    from formloop.measure.compare import AllClose, rule_for  # noqa: PLC0415

    r = rule_for(rule, torch.float32)
    if isinstance(r, AllClose):
        allowed = r.atol + r.rtol * floor
    else:
        allowed = r.atol_scale * gain * s + r.rtol * floor
    return {"precision": precision, "worst_error": worst, "allowed": allowed, "fits": worst <= allowed,
            "z": z, "scale": s, "rule": rule}


def _both(precision: str, **kw: Any) -> dict[str, Any]:
    """The bound at the model's scale and at the integrity battery's structured input (one region
    of an input scaled by SCALE_FACTOR): a precision fits only if it fits both, since the battery
    judges the candidate on that input too (a row log-sum-exp's error grows like e^{s²/2})."""
    from formloop.measure.probes_inputs import SCALE_FACTOR  # noqa: PLC0415 (torch)

    base = bound(precision, **kw)
    probe = bound(precision, **{**kw, "rms_ab": kw["rms_ab"] * SCALE_FACTOR})
    return {**base, "fits": base["fits"] and probe["fits"], "fits_base": base["fits"],
            "probe": {k: probe[k] for k in ("worst_error", "allowed")}}


def decide(fp32_operands: str, *, K: int, N: int, outputs: int, rms_ab: float, chain: list[str] | None = None,
           rule: str = "kernelbench") -> dict[str, Any]:
    """The precision for one fp32 GEMM region and why: {'precision', 'bounds', 'note'}."""
    from formloop.measure.probes_inputs import SCALE_FACTOR  # noqa: PLC0415 (torch)

    check_option(fp32_operands)
    bounds = {p: _both(p, K=K, N=N, outputs=outputs, rms_ab=rms_ab, chain=chain, rule=rule) for p in SPEED_ORDER}
    if fp32_operands != "auto":
        pick, why = fp32_operands, "asked for"
    else:
        fitting = [p for p in SPEED_ORDER if bounds[p]["fits"]]
        near = [p for p in SPEED_ORDER if bounds[p]["fits_base"]]
        if fitting and not (fitting[0] == "fp32" and near[:1] == ["tf32x3"]):
            pick, why = fitting[0], "the fastest whose bound fits"
        elif near:   # never SIMT fp32 for the scaled input alone: tensor cores, the probe may say 'minor'
            pick, why = near[0], (f"the fastest whose bound fits at the model's scale; only fp32 fits on an "
                                  f"input scaled x{SCALE_FACTOR:g} too" if fitting else
                                  f"the fastest whose bound fits at the model's scale; none fits on an input "
                                  f"scaled x{SCALE_FACTOR:g}")
        else:
            close = bounds["tf32x3"]["worst_error"] <= 2 * bounds["fp32"]["worst_error"]
            pick = "tf32x3" if close else "fp32"
            why = "no bound fits (the fp32 reference's own error is of the tolerance's order); " + (
                "tf32x3 is within 2x of fp32's" if close else "fp32 is the most accurate")
    b = bounds[pick]
    note = (f"fp32 operands as {pick} ({fp32_operands}: {why}): predicted worst error {b['worst_error']:.3g} vs "
            f"allowed {b['allowed']:.3g} under the {rule} rule ({b['probe']['worst_error']:.3g} vs "
            f"{b['probe']['allowed']:.3g} on an input scaled x{SCALE_FACTOR:g}, as the integrity battery probes; "
            f"model: K={K}, output scale {b['scale']:.3g}, "
            f"{outputs} outputs; tf32 {bounds['tf32']['worst_error']:.3g}, tf32x3 "
            f"{bounds['tf32x3']['worst_error']:.3g}, fp32 {bounds['fp32']['worst_error']:.3g})")
    return {"precision": pick, "bounds": bounds, "note": note}
