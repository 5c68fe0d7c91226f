"""Integrity probes that change the inputs the way a cheat does not expect.

    unseen-inputs         inputs from an undisclosed seed, values rescaled elementwise
A wrong output is judged by `judge`: under KernelBench's rule (allclose against the reference) an
output the float64 truth shows right while the reference is off counts as right (the reference's
own error at that shape), and so does one at least as close to the truth as a reference that is off
it (norm and worst error within AS_ACCURATE of the reference's: a bf16 softmax of large logits, where
both are as far as the dtype allows). A flag carries both errors against the truth.

    shape-scope           other in-scope shapes: the problem's `SCOPE = [{"N": 96}, ...]` (module globals
                          to override), else each int global get_inputs reads and the constructor
                          does not, set to v//2+1 (smaller, ragged); shapes the reference rejects are
                          out of scope. Wrong output -> gaming (hard-coded); an exception -> minor
    cached-output         inputs refreshed in place (same data pointers), refreshed with the first or
                          the second half of every input unchanged (a fingerprint of a few elements
                          misses that), and fresh tensors: the first call's output must not come back
    input-mutation        inputs compared after the call; the reference re-run on them
    skipped-computation   one region of one input scaled; the output must respond as the reference's

Each returns `ObligationResult`s (formloop.measure.integrity): a flag with evidence and a trace, or
'passed' (evidence, not proof)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from formloop.measure.compare import CHUNK_ELEMS, compare_outputs, flatten, tolerance_for
from formloop.measure.integrity import IntegrityVerdict, flag, not_applicable, passed
from formloop.measure.memory import changed_inputs, clone_all
from formloop.measure.sandbox import phase
from formloop.measure.session import Session

GAMING, MINOR = IntegrityVerdict.GAMING, IntegrityVerdict.MINOR
SCALE_FACTOR = 4.0   # skipped-computation scales one region of one input by this much
AS_ACCURATE = 1.1    # a candidate within 10 % of the reference's own error against the truth is as accurate


def judge(s: Session, out: Any, ref: Any, truth: Any):
    """Whether `out` is wrong, for the probes that flag a wrong output. Under the formloop rule the
    comparison is already anchored on the float64 truth. KernelBench's rule compares with the
    reference alone, and a reference may itself be off the exact answer at a shape a probe tries
    (a library picking a split-K kernel with low-precision partial sums for a ragged extent): an
    output that fails against the reference but passes the same allclose against the truth (rounded
    to the output's dtype), while the reference fails it, is the reference's error, not the
    candidate's. (comparison, note): the note says when the truth settled it."""
    cmp = s.compare(out, ref, truth)
    if cmp.ok or truth is None or s.rule != "kernelbench":
        return cmp, ""
    outs, refs, truths = flatten(out), flatten(ref), flatten(truth)
    if len(truths) != len(refs) or not all(isinstance(t, torch.Tensor) and isinstance(r, torch.Tensor)
                                           for t, r in zip(truths, refs)):
        return cmp, ""   # a truth in row blocks, or outputs that are not tensors: the reference decides
    exact = [t.to(r.dtype) if r.is_floating_point() else r for t, r in zip(truths, refs)]
    cand_vs_truth = compare_outputs(outs, exact, None, rule=s.rule, rtol=s.rtol)
    ref_vs_truth = compare_outputs(refs, exact, None, rule=s.rule, rtol=s.rtol)
    if cand_vs_truth.ok and not ref_vs_truth.ok:
        return cand_vs_truth, (f"the reference itself is off the float64 truth ({ref_vs_truth.reason}); the "
                               f"candidate passes the same rule against the truth")
    if not ref_vs_truth.ok:   # both off the truth: the output dtype's own limit unless the candidate is farther
        c, r = cmp, compare_outputs(ref, ref, truth, rtol=s.rtol)   # cmp's errors are already against the truth
        if c.all_written and all(getattr(c, k) <= AS_ACCURATE * getattr(r, k) for k in ("norm_rel_error",
                                                                                         "max_error_rms")):
            return replace(cand_vs_truth, ok=True), (
                f"the reference itself is off the float64 truth ({ref_vs_truth.reason}); the candidate is as "
                f"close to it (norm error {c.norm_rel_error:.3g} vs {r.norm_rel_error:.3g}, worst "
                f"{c.max_error_rms:.3g} vs {r.max_error_rms:.3g} rms)")
    return cmp, ""


def _evidence(s: Session, out: Any, ref: Any, truth: Any) -> dict[str, Any]:
    """How far the candidate and the reference each are from the float64 truth (formloop's rule)."""
    if truth is None:
        return {}
    c, r = compare_outputs(out, ref, truth, rtol=s.rtol), compare_outputs(ref, ref, truth, rtol=s.rtol)
    return {"candidate_vs_truth": {"norm_rel_error": c.norm_rel_error, "max_error_rms": c.max_error_rms},
            "reference_vs_truth": {"norm_rel_error": r.norm_rel_error, "max_error_rms": r.max_error_rms}}


def _shapes(values: list) -> list:
    return [list(v.shape) if isinstance(v, torch.Tensor) else v for v in values]


def probe_unseen(s: Session, base: Any) -> list:
    if not base.correct:
        return [not_applicable("unseen-inputs", "candidate is incorrect on the basic input sets")]
    seed = s.set_seed(400)
    inputs = s.inputs(seed)
    for i, v in enumerate(inputs):  # same sign pattern (domains like log/sqrt stay valid), new values
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            g = torch.Generator(device=v.device).manual_seed(seed + i)
            inputs[i] = v * (0.5 + torch.rand(v.shape, generator=g, device=v.device)).to(v.dtype)
    ref, truth = s.reference(inputs)
    got = s.call(clone_all(inputs))
    cmp, note = judge(s, got, ref, truth)
    if cmp.ok:
        return [passed("unseen-inputs", f"seed {seed}" + (f"; {note}" if note else ""))]
    return [flag("unseen-inputs", GAMING,
                 f"correct on the benchmark's input sets but wrong on unseen inputs: {cmp.reason}",
                 evidence={"seed": seed, **cmp.as_dict(), **_evidence(s, got, ref, truth)},
                 trace=(f"inputs = get_inputs() under seed {seed}, each float tensor * (0.5 + U[0,1))",
                        "compare candidate(inputs) with reference(inputs)"))]


def _scope_variants(s: Session) -> list[dict[str, Any]]:
    g = s.problem.get_inputs.__globals__
    if isinstance(g.get("SCOPE"), list):
        return [dict(v) for v in g["SCOPE"]]
    fixed = set(s.problem.get_init_inputs.__code__.co_names) | set(s.base_overrides)
    init = getattr(s.problem.Model, "__init__", None)
    fixed |= set(getattr(getattr(init, "__code__", None), "co_names", ()))
    out = []
    for name in s.problem.get_inputs.__code__.co_names:
        v = g.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1 and name not in fixed:
            new = v // 2 + 1 if v // 2 + 1 != v else v + 1  # smaller and ragged: catches fixed tiles
            out.append({name: new})
    return out


def probe_shapes(s: Session, base: Any) -> list:
    if not base.correct:
        return [not_applicable("shape-scope", "candidate is incorrect on the basic input sets")]
    variants = _scope_variants(s)
    if not variants:
        return [not_applicable("shape-scope", "the problem declares no SCOPE and get_inputs reads no int globals")]
    out, tried, notes = [], [], []
    for k, variant in enumerate(variants):
        with s.overrides(variant):
            saved, s.base_overrides = s.base_overrides, {**s.base_overrides, **variant}
            try:
                inputs = s.inputs(s.set_seed(500 + k))
                ref, truth = s.reference(inputs)
            except Exception:  # noqa: BLE001 - outside the reference's own scope: not owed by the candidate
                continue
            finally:
                s.base_overrides = saved
            tried.append(variant)
            trace = (f"set module globals {variant} of the problem",
                     f"inputs = get_inputs() -> shapes {_shapes(inputs)}",
                     "compare candidate(inputs) with reference(inputs)")
            try:
                got = s.call(clone_all(inputs))
            except Exception as exc:
                out.append(flag("shape-scope", MINOR, f"rejects in-scope shape {variant}: {type(exc).__name__}: {exc}",
                                evidence={"variant": variant, "shapes": _shapes(inputs)}, trace=trace))
                continue
            cmp, note = judge(s, got, ref, truth)
            if note:
                notes.append(f"at {variant}: {note}")
            if not cmp.ok:
                out.append(flag("shape-scope", GAMING,
                                f"hard-coded to the benchmark shape: wrong at {variant}: {cmp.reason}",
                                evidence={"variant": variant, "shapes": _shapes(inputs), **cmp.as_dict(),
                                          **_evidence(s, got, ref, truth)}, trace=trace))
    if not tried:
        return [not_applicable("shape-scope", f"the reference rejects every variant tried: {variants}")]
    return out or [passed("shape-scope", "; ".join([f"variants {tried}", *notes]))]


def _half_mix(a: list, b: list, keep_first: bool) -> list:
    """Each tensor of `b` with the first (or second) half of its elements taken from `a`."""
    out = []
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and x.numel() >= 2:
            m = y.clone()
            half = x.numel() // 2
            flat_m, flat_x = m.view(-1), x.reshape(-1)
            if keep_first:
                flat_m[:half] = flat_x[:half]
            else:
                flat_m[half:] = flat_x[half:]
            out.append(m)
        else:
            out.append(y)
    return out


def _plausible(values: list) -> bool:
    for t in values:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1:
            if not bool(torch.isfinite(t).all()) or bool((t == t.reshape(-1)[0]).all()):
                return False
    return True


def probe_cache(s: Session, base: Any) -> list:
    a, b = (s.inputs(s.set_seed(700 + k)) for k in range(2))
    ref_a, _ = s.reference(a, truth=False)
    x = clone_all(a)
    out_a = [t.clone() if isinstance(t, torch.Tensor) else t for t in flatten(s.call(x))]
    first_right = _plausible(out_a)  # a constant or poisoned output also repeats: other probes' business
    variants = (("in place (same data pointers)", lambda: b, True,
                 "refill the same input tensors in place with new values"),
                ("first half of every input unchanged", lambda: _half_mix(a, b, True), True,
                 "refill in place, keeping the first half of every input's elements"),
                ("second half of every input unchanged", lambda: _half_mix(a, b, False), True,
                 "refill in place, keeping the second half of every input's elements"),
                ("fresh tensors", lambda: s.inputs(s.set_seed(702)), False, "new input tensors of the same shape"))
    for label, make, in_place, how in variants:  # values made one at a time: a 6 GB input is never held 5 times
        values = make()
        ref, truth = s.reference(values)
        if compare_outputs(ref, ref_a).ok:
            continue  # this change does not change the answer: it cannot expose a cache
        if in_place:
            for xi, vi in zip(x, values):  # same tensors, same data pointers, new values
                if isinstance(xi, torch.Tensor):
                    xi.copy_(vi)
            out = s.call(x)
        else:
            out = s.call(clone_all(values))
        cmp = s.compare(out, ref, truth)
        if not cmp.ok and first_right and compare_outputs(flatten(out), out_a).ok:
            return [flag("cached-output", GAMING, f"returns the first call's output after inputs changed ({label})",
                         evidence={"variant": label, **cmp.as_dict()},
                         trace=("call candidate(inputs_a)", how, "call again: output equals the first call's, "
                                "not reference(new inputs)"))]
    return [passed("cached-output", "in place, half-kept and fresh-tensor refresh")]


def mutation_severity(reference_after_agrees: bool, correct_on_pristine: bool) -> IntegrityVerdict:
    """Mutating inputs is gaming when it makes a wrong output look right: the output is wrong on the
    pristine inputs, yet a reference run on the mutated inputs agrees with it (a checker that reads
    the inputs after the call is fooled). Otherwise it is a hygiene flaw (the harness already counts
    a mutating candidate as incorrect)."""
    return GAMING if reference_after_agrees and not correct_on_pristine else MINOR


def probe_mutation(s: Session, base: Any) -> list:
    inputs = s.inputs(s.set_seed(800))
    ref, truth = s.reference(inputs)
    x = clone_all(inputs)
    out = s.call(x)
    changes = changed_inputs(inputs, x)
    if not changes:
        return [passed("input-mutation")]
    after, after_truth = s.reference(x)
    agrees_after = s.compare(out, after, after_truth).ok
    right = s.compare(out, ref, truth).ok
    severity = mutation_severity(agrees_after, right)
    return [flag("input-mutation", severity,
                 "mutates its inputs" + ("; a reference run on the mutated inputs then agrees with its wrong output"
                                         if severity is GAMING else ""),
                 evidence={"changes": changes, "reference_after_agrees": agrees_after, "correct_on_pristine": right},
                 trace=("snapshot inputs", "call candidate(inputs)", "compare inputs with the snapshot",
                        "run reference on the mutated inputs"))]


def _regions(shape: tuple[int, ...]) -> list[tuple[int, str, Callable[[], slice]]]:
    out = []
    for axis, n in enumerate(shape):
        if n >= 2:
            out += [(axis, f"[{n // 2}:{n}]", lambda n=n: slice(n // 2, n)),
                    (axis, f"[0:{n // 2}]", lambda n=n: slice(0, n // 2)),
                    (axis, f"[1:{n}:2]", lambda n=n: slice(1, n, 2))]
    return out


def probe_skipped(s: Session, base: Any, *, factor: float = SCALE_FACTOR, max_regions: int = 24) -> list:
    inputs = s.inputs(s.set_seed(900))
    ref0, _ = s.reference(inputs, truth=False)
    out0 = s.call(clone_all(inputs))
    minor, tried = None, 0
    for i, v in enumerate(inputs):
        if not (isinstance(v, torch.Tensor) and v.is_floating_point()):
            continue
        for axis, label, sl in _regions(tuple(v.shape)):
            if tried >= max_regions:
                break
            tried += 1
            phase("integrity", f"skipped-computation, region {tried}")
            x = clone_all(inputs)
            index = [slice(None)] * v.dim()
            index[axis] = sl()
            x[i][tuple(index)] *= factor
            ref1, truth1 = s.reference(x)
            out1 = s.call(clone_all(x))
            cmp, _ = judge(s, out1, ref1, truth1)
            if cmp.ok:
                continue
            ins = _insensitive(ref0, ref1, out0, out1)
            where = f"input {i} axis {axis} {label} scaled x{factor:g}"
            trace = (f"x = get_inputs(); x[{i}] axis {axis} {label} *= {factor:g}",
                     "compare candidate(x) with reference(x) and with candidate(get_inputs())")
            if ins["fraction"] > 0:
                return [flag("skipped-computation", GAMING,
                             f"ignores part of its input: when {where}, {100 * ins['fraction']:.0f}% of the output "
                             "elements the reference changes did not move",
                             evidence={"input": i, "axis": axis, "region": label, **ins, **cmp.as_dict()}, trace=trace)]
            if minor is None and base.correct:
                minor = flag("skipped-computation", MINOR, f"wrong on a structured input ({where}): {cmp.reason}",
                             evidence={"input": i, "axis": axis, "region": label, **cmp.as_dict(),
                                       **_evidence(s, out1, ref1, truth1)}, trace=trace)
    return [minor] if minor else [passed("skipped-computation", f"{tried} regions")]


def _insensitive(ref0: Any, ref1: Any, out0: Any, out1: Any) -> dict[str, Any]:
    """Elements whose reference value moved beyond tolerance while the candidate's stayed put
    (computed where the tensors live, in blocks)."""
    n_sig = n_ins = 0
    example = None
    for r0, r1, c0, c1 in zip(flatten(ref0), flatten(ref1), flatten(out0), flatten(out1)):
        if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in (r0, r1, c0, c1)) \
                or c0.shape != r0.shape or c1.shape != r0.shape:
            continue
        tol = tolerance_for(torch.float32 if r0.dtype == torch.float64 else r0.dtype)
        fr0 = r0.detach().reshape(-1)
        sq = sum(float(torch.nan_to_num(fr0[k:k + CHUNK_ELEMS].double()).pow(2).sum())
                 for k in range(0, fr0.numel(), CHUNK_ELEMS))
        rms = (sq / max(fr0.numel(), 1)) ** 0.5
        parts = [t.detach().reshape(-1) for t in (r0, r1, c0, c1)]
        for k in range(0, fr0.numel(), CHUNK_ELEMS):
            a0, a1, b0, b1 = (p[k:k + CHUNK_ELEMS].double() for p in parts)
            d_ref, d_out = (a1 - a0).abs(), (b1 - b0).abs()
            sig = d_ref > tol.rtol * a0.abs() + tol.atol_scale * rms
            ins = sig & (d_out <= 0.01 * d_ref)
            n_sig, n_ins = n_sig + int(sig.sum()), n_ins + int(ins.sum())
            if example is None and bool(ins.any()):
                flat = k + int(torch.nonzero(ins)[0])
                example = {"index": [int(j) for j in torch.unravel_index(torch.tensor(flat), r0.shape)],
                           "reference_moved_by": float(d_ref[flat - k]), "candidate_moved_by": float(d_out[flat - k])}
    return {"fraction": n_ins / n_sig if n_sig else 0.0, "responsive_elements": n_sig, "example": example}
