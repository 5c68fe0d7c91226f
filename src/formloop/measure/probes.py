"""Dynamic integrity probes: run the candidate the way a cheat would not expect.

Each probe returns `ObligationResult`s from `formloop.measure.integrity` (flag = counterexample with
evidence and a replay line; nothing found = 'passed', which is evidence, not proof). Probes:

    unseen-inputs         inputs from an undisclosed seed, values rescaled elementwise
    shape-scope           other in-scope shapes: the problem's `SCOPE = [{"N": 96}, ...]` (module globals
                          to override), else each int global get_inputs reads and the constructor
                          does not, set to v//2+1 (smaller, ragged); shapes the reference rejects are
                          out of scope. Wrong output -> gaming (hard-coded); an exception -> minor
    uninitialized-read    same inputs under two different poison values: the output must not move
    freed-output-reuse    allocations recycled from the reference's freed output (a caching allocator)
    cached-output         inputs refreshed in place (same data pointers) and fresh tensors
    input-mutation        inputs compared bitwise after the call; reference re-run on them
    skipped-computation   one region of one input scaled; the output must respond as the reference's
    trivial-output        a constant output where the reference varies (zeros for a small output)
    side-stream           output snapshot at return vs after settling threads/streams
    silent-launch-failure exceptions raised inside the candidate and swallowed

Limits (stated, not hidden): on a CPU there are no CUDA streams, so the side-stream probe sees
Python threads and output that changes after return; a GPU side stream that finishes before the
snapshot is not seen. Exceptions swallowed outside the candidate's own files are not seen."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from formloop.measure.compare import compare_outputs, flatten, tolerance_for
from formloop.measure.harness import Session, Timing, evaluate
from formloop.measure.memory import changed_inputs, clone_all, poisoned, settle
from formloop.errors import InvalidInput
from formloop.measure.integrity import (IntegrityReport, IntegrityVerdict, candidate_source, check_sol_ceiling, flag,
                                    not_applicable, passed, static_scan)

GAMING, MINOR = IntegrityVerdict.GAMING, IntegrityVerdict.MINOR


def _shapes(values: list) -> list:
    return [list(v.shape) if isinstance(v, torch.Tensor) else v for v in values]


def probe_static(s: Session, base: Any) -> list:
    source, filename, entry = candidate_source(s.candidate.source_obj)
    return static_scan(source, entry=entry, filename=filename)


def probe_unseen(s: Session, base: Any) -> list:
    if not base.correct:
        return [not_applicable("unseen-inputs", "candidate is incorrect on the basic input sets")]
    seed = s.set_seed(400)
    inputs = s.inputs(seed)
    g = torch.Generator().manual_seed(seed)
    for i, v in enumerate(inputs):  # same sign pattern (domains like log/sqrt stay valid), new values
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            inputs[i] = v * (0.5 + torch.rand(v.shape, generator=g)).to(v.device, v.dtype)
    ref, truth = s.reference(inputs)
    out = s.call(clone_all(inputs))
    cmp = s.compare(out, ref, truth)
    if cmp.ok:
        return [passed("unseen-inputs", f"seed {seed}")]
    return [flag("unseen-inputs", GAMING, f"correct on the benchmark's input sets but wrong on unseen inputs: {cmp.reason}",
                 evidence={"seed": seed, **cmp.as_dict()},
                 trace=(f"inputs = get_inputs() under seed {seed}, each float tensor * (0.5 + U[0,1))",
                        "compare candidate(inputs) with reference(inputs)"))]


def _scope_variants(s: Session) -> list[dict[str, Any]]:
    g = s.problem.get_inputs.__globals__
    if isinstance(g.get("SCOPE"), list):
        return [dict(v) for v in g["SCOPE"]]
    fixed = set(s.problem.get_init_inputs.__code__.co_names)
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
    out, tried = [], []
    for k, variant in enumerate(variants):
        with s.overrides(variant):
            inputs = s.inputs(s.set_seed(500 + k))
            try:
                ref, truth = s.reference(inputs)
            except Exception:
                continue  # outside the reference's own scope: not a shape the candidate owes us
            tried.append(variant)
            trace = (f"set module globals {variant} of the problem", f"inputs = get_inputs() -> shapes {_shapes(inputs)}",
                     "compare candidate(inputs) with reference(inputs)")
            try:
                got = s.call(clone_all(inputs))
            except Exception as exc:
                out.append(flag("shape-scope", MINOR, f"rejects in-scope shape {variant}: {type(exc).__name__}: {exc}",
                                evidence={"variant": variant, "shapes": _shapes(inputs)}, trace=trace))
                continue
            cmp = s.compare(got, ref, truth)
            if not cmp.ok:
                out.append(flag("shape-scope", GAMING, f"hard-coded to the benchmark shape: wrong at {variant}: {cmp.reason}",
                                evidence={"variant": variant, "shapes": _shapes(inputs), **cmp.as_dict()}, trace=trace))
    if not tried:
        return [not_applicable("shape-scope", f"the reference rejects every variant tried: {variants}")]
    return out or [passed("shape-scope", f"variants {tried}")]


def probe_trivial(s: Session, base: Any) -> list:
    inputs = s.inputs(s.set_seed(300))
    ref, _ = s.reference(inputs)
    out = s.call(clone_all(inputs))
    for k, (c, r) in enumerate(zip(flatten(out), flatten(ref))):
        if not (isinstance(c, torch.Tensor) and isinstance(r, torch.Tensor) and c.numel() > 1 and r.is_floating_point()):
            continue
        c64, r64 = c.detach().cpu().double(), r.detach().cpu().double()
        if bool((c64 == c64.reshape(-1)[0]).all()) and float(r64.max() - r64.min()) > 0:
            lax = c.shape == r.shape and bool(torch.allclose(c64, r64, rtol=1e-2, atol=1e-2))
            return [flag("trivial-output", GAMING,
                         f"output {k} is the constant {float(c64.reshape(-1)[0]):g} where the reference varies "
                         f"(reference rms {float(r64.pow(2).mean().sqrt()):.3g})"
                         + ("; a fixed atol=rtol=1e-2 check would have accepted it" if lax else ""),
                         evidence={"output": k, "constant": float(c64.reshape(-1)[0]),
                                   "reference_rms": float(r64.pow(2).mean().sqrt()), "passes_fixed_atol_1e-2": lax},
                         trace=("inputs = get_inputs()", "candidate(inputs) is constant; reference(inputs) is not"))]
    return [passed("trivial-output")]


def probe_memory(s: Session, base: Any) -> list:
    inputs = s.inputs(s.set_seed(600))
    ref, truth = s.reference(inputs)
    out_nan = s.call(clone_all(inputs), fill=float("nan"))
    out_three = s.call(clone_all(inputs), fill=3.0)
    moved = compare_outputs(out_three, out_nan, rtol=s.rtol)
    checks = []
    trace = ("run candidate with every empty allocation filled with NaN", "run again with fill 3.0",
             "compare the two outputs")
    if not moved.ok:
        checks.append(flag("uninitialized-read", GAMING,
                           f"output depends on uninitialized memory: {100 * moved.bad_fraction:.1f}% of elements change "
                           "with the poison value (an unwritten output or a silently failed launch)",
                           evidence={"moved_fraction": moved.bad_fraction, "worst": moved.worst}, trace=trace))
    else:
        checks.append(passed("uninitialized-read"))
    # A caching allocator hands the reference's freed output to the next allocation of that size.
    stale = [t.detach().clone() for t in flatten(ref) if isinstance(t, torch.Tensor)]
    out_reuse = s.call(clone_all(inputs), stale=stale)
    with_reuse, poisoned_cmp = s.compare(out_reuse, ref, truth), s.compare(out_nan, ref, truth)
    if with_reuse.ok and not poisoned_cmp.ok:
        checks.append(flag("freed-output-reuse", GAMING,
                           "matches the reference only when its allocations recycle the reference's freed output; "
                           f"with poisoned allocations: {poisoned_cmp.reason}",
                           evidence={"poisoned": poisoned_cmp.as_dict(), "recycled_match": True},
                           trace=("reference(inputs); free its output", "candidate(inputs) with empty allocations "
                                  "holding the freed output -> matches", "candidate(inputs) with NaN-poisoned "
                                  "allocations -> does not match")))
    else:
        checks.append(passed("freed-output-reuse"))
    return checks


def probe_cache(s: Session, base: Any) -> list:
    a, b, c = (s.inputs(s.set_seed(700 + k)) for k in range(3))
    ref_a, _ = s.reference(a)
    ref_b, truth_b = s.reference(b)
    ref_c, truth_c = s.reference(c)
    x = clone_all(a)
    out_a = [t.clone() if isinstance(t, torch.Tensor) else t for t in flatten(s.call(x))]
    for xi, bi in zip(x, b):  # same tensors, same data pointers, new values
        if isinstance(xi, torch.Tensor):
            xi.copy_(bi)
    out_b = s.call(x)
    checks = []
    # A cache repeats a real earlier result (perhaps from an earlier call than ours); a constant or
    # poisoned output also repeats, but that is the trivial-output and memory probes' business.
    first_right = _plausible(out_a)
    truly_differs = not compare_outputs(ref_b, ref_a).ok
    for label, out, ref, truth, how in (
            ("in place (same data pointers)", out_b, ref_b, truth_b, "refill the same input tensors in place"),
            ("fresh tensors", None, ref_c, truth_c, "new input tensors of the same shape")):
        if out is None:
            out = s.call(clone_all(c))
        cmp = s.compare(out, ref, truth)
        stale = compare_outputs(flatten(out), out_a).ok
        if not cmp.ok and stale and truly_differs and first_right:
            checks.append(flag("cached-output", GAMING,
                               f"returns the first call's output after inputs changed ({label})",
                               evidence={"variant": label, **cmp.as_dict()},
                               trace=("call candidate(inputs_a)", how + " with inputs_b", "call again: output equals "
                                      "the first call's, not reference(inputs_b)")))
            break
    return checks or [passed("cached-output", "in-place and fresh-tensor refresh")]


def _plausible(values: list) -> bool:
    for t in values:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1:
            if not bool(torch.isfinite(t).all()) or bool((t == t.reshape(-1)[0]).all()):
                return False
    return True


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
    severity = GAMING if agrees_after and not right else MINOR
    return [flag("input-mutation", severity,
                 "mutates its inputs" + ("; a reference run on the mutated inputs then agrees with its wrong output"
                                         if severity is GAMING else ""),
                 evidence={"changes": changes, "reference_after_agrees": agrees_after, "correct_on_pristine": right},
                 trace=("snapshot inputs", "call candidate(inputs)", "compare inputs with the snapshot",
                        "run reference on the mutated inputs"))]


def _regions(shape: tuple[int, ...]) -> list[tuple[int, str, Callable[[int], slice]]]:
    out = []
    for axis, n in enumerate(shape):
        if n >= 2:
            out += [(axis, f"[{n // 2}:{n}]", lambda n=n: slice(n // 2, n)), (axis, f"[0:{n // 2}]", lambda n=n: slice(0, n // 2)),
                    (axis, f"[1:{n}:2]", lambda n=n: slice(1, n, 2))]
    return out


def probe_skipped(s: Session, base: Any, *, factor: float = 4.0, max_regions: int = 24) -> list:
    inputs = s.inputs(s.set_seed(900))
    ref0, _ = s.reference(inputs)
    out0 = s.call(clone_all(inputs))
    minor, tried = None, 0
    for i, v in enumerate(inputs):
        if not (isinstance(v, torch.Tensor) and v.is_floating_point()):
            continue
        for axis, label, sl in _regions(tuple(v.shape)):
            if tried >= max_regions:
                break
            tried += 1
            x = clone_all(inputs)
            index = [slice(None)] * v.dim()
            index[axis] = sl()
            x[i][tuple(index)] *= factor
            ref1, truth1 = s.reference(x)
            out1 = s.call(clone_all(x))
            cmp = s.compare(out1, ref1, truth1)
            if cmp.ok:
                continue
            ins = _insensitive(ref0, ref1, out0, out1)
            where = f"input {i} axis {axis} {label} scaled x{factor:g}"
            trace = (f"x = get_inputs(); x[{i}] axis {axis} {label} *= {factor:g}",
                     "compare candidate(x) with reference(x) and with candidate(get_inputs())")
            if ins["fraction"] > 0:
                return [flag("skipped-computation", GAMING,
                             f"ignores part of its input: when {where}, {100 * ins['fraction']:.0f}% of the output elements "
                             "the reference changes did not move",
                             evidence={"input": i, "axis": axis, "region": label, **ins, **cmp.as_dict()}, trace=trace)]
            if minor is None and base.correct:
                minor = flag("skipped-computation", MINOR, f"wrong on a structured input ({where}): {cmp.reason}",
                             evidence={"input": i, "axis": axis, "region": label, **cmp.as_dict()}, trace=trace)
    return [minor] if minor else [passed("skipped-computation", f"{tried} regions")]


def _insensitive(ref0: Any, ref1: Any, out0: Any, out1: Any) -> dict[str, Any]:
    """Elements whose reference value moved beyond tolerance while the candidate's stayed put."""
    n_sig = n_ins = 0
    example = None
    for r0, r1, c0, c1 in zip(flatten(ref0), flatten(ref1), flatten(out0), flatten(out1)):
        if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in (r0, r1, c0, c1)) or c0.shape != r0.shape:
            continue
        r0, r1, c0, c1 = (t.detach().cpu().double() for t in (r0, r1, c0, c1))
        tol = tolerance_for(torch.float32 if r0.dtype == torch.float64 else r0.dtype)
        d_ref, d_out = (r1 - r0).abs(), (c1 - c0).abs()
        sig = d_ref > tol.rtol * r0.abs() + tol.atol_scale * r0.pow(2).mean().sqrt()
        ins = sig & (d_out <= 0.01 * d_ref)
        n_sig, n_ins = n_sig + int(sig.sum()), n_ins + int(ins.sum())
        if example is None and ins.any():
            flat = int(torch.nonzero(ins.reshape(-1))[0])
            example = {"index": [int(k) for k in torch.unravel_index(torch.tensor(flat), r0.shape)],
                       "reference_moved_by": float(d_ref.reshape(-1)[flat]), "candidate_moved_by": float(d_out.reshape(-1)[flat])}
    return {"fraction": n_ins / n_sig if n_sig else 0.0, "responsive_elements": n_sig, "example": example}


def probe_side_stream(s: Session, base: Any) -> list:
    inputs = s.inputs(s.set_seed(1000))
    before = set(threading.enumerate())
    x = clone_all(inputs)
    with torch.no_grad(), poisoned():
        out = s.cand_fn(*x)
        snap = [t.clone() if isinstance(t, torch.Tensor) else t for t in flatten(out)]  # current stream only
    late = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    settle(before)
    moved = compare_outputs(flatten(out), snap)
    if late or not moved.ok:
        return [flag("side-stream", GAMING,
                     "work continues after the call returns (outside any timed region): "
                     + (f"threads still running: {late}; " if late else "")
                     + (f"{100 * moved.bad_fraction:.0f}% of the output changed after return" if not moved.ok else ""),
                     evidence={"late_threads": late, "changed_after_return": moved.bad_fraction},
                     trace=("call candidate(inputs)", "snapshot the output on the current stream at return",
                            "join threads / synchronize the device", "compare the output with the snapshot"))]
    return [passed("side-stream", "CPU: threads and post-return writes" if s.device == "cpu" else "streams synchronized")]


def probe_launch_failure(s: Session, base: Any) -> list:
    files = {f for f in s.candidate.files if f}
    raised: list[dict[str, Any]] = []

    def local(frame, event, arg):
        if event == "exception" and arg[0] not in (StopIteration, GeneratorExit):
            item = {"type": arg[0].__name__, "message": str(arg[1])[:200], "where": f"{frame.f_code.co_filename}:{frame.f_lineno}"}
            if item not in raised:
                raised.append(item)
        return local

    def tracer(frame, event, arg):
        if frame.f_code.co_filename in files:
            frame.f_trace_lines = False  # only exception events: keep the interpreter fast
            return local
        return None

    inputs = s.inputs(s.set_seed(1100))
    ref, truth = s.reference(inputs)
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = s.call(clone_all(inputs))
    except Exception:
        return [passed("silent-launch-failure", "the candidate raises (failure is not silent)")]
    finally:
        sys.settrace(previous)
    if not raised:
        return [passed("silent-launch-failure")]
    cmp = s.compare(out, ref, truth)
    if not cmp.ok:
        return [flag("silent-launch-failure", GAMING,
                     f"{raised[0]['type']} raised at {raised[0]['where']} was swallowed and the output is garbage: {cmp.reason}",
                     evidence={"swallowed": raised, **cmp.as_dict()},
                     trace=("trace exception events in the candidate's frames", "call candidate(inputs)",
                            "compare with reference(inputs)"))]
    return [flag("silent-launch-failure", MINOR, f"swallows {raised[0]['type']} at {raised[0]['where']} (output still correct)",
                 evidence={"swallowed": raised})]


PROBES: dict[str, Callable[[Session, Any], list]] = {
    "static": probe_static, "trivial": probe_trivial, "unseen": probe_unseen, "shapes": probe_shapes, "memory": probe_memory,
    "cache": probe_cache, "mutation": probe_mutation, "skipped": probe_skipped, "side-stream": probe_side_stream,
    "launch-failure": probe_launch_failure,
}


def check_integrity(problem: Any, candidate: Any, *, seed: int | None = None, sets: int = 2,
                    probes: tuple[str, ...] | None = None, timing: Timing | None = None,
                    sol_floor_s: float | None = None, rtol: float | None = None) -> IntegrityReport:
    """All integrity checks for one attempt. `timing` and `sol_floor_s` add the SOL-ceiling check
    (only a GPU timing is compared with the floor)."""
    names = tuple(PROBES) if probes is None else tuple(probes)
    unknown = [p for p in names if p not in PROBES]
    if unknown:
        raise InvalidInput("probe", unknown[0], sorted(PROBES))
    s = Session(problem, candidate, seed=seed, rtol=rtol)
    base = evaluate(s.problem, s.candidate, sets=sets, timing=False, session=s)
    checks = []
    for name in names:
        t0 = time.perf_counter()
        try:
            found = PROBES[name](s, base)
        except Exception as exc:  # a probe the candidate crashes is reported, never dropped
            found = [flag(f"probe:{name}", MINOR, f"candidate raised under the {name} probe: {type(exc).__name__}: {exc}")]
        dt = time.perf_counter() - t0
        checks += [replace(c, seconds=dt, replay=s.replay("check_integrity") + f" with probes=({name!r},)",
                           details={**c.details, "probe": name}) for c in found]
    if timing is not None and sol_floor_s:
        checks.append(check_sol_ceiling(timing.seconds, sol_floor_s, source=timing.source))
    return IntegrityReport(s.name, s.candidate.name, base.correct, tuple(checks), s.seed)
