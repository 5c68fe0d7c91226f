"""Integrity probes that watch how the candidate runs.

    static-scan, heavy-torch, stream-use
                          the source scan (formloop.measure.static): evidence, minor flags
    torch-only            what one call launches (formloop.measure.launches): no kernel of its own
    trivial-output        a constant output where the reference varies (zeros for a small output)
    lazy-output           a torch.Tensor subclass returned: its values can be computed when read
    uninitialized-read    same inputs under two different poison values: the output must not move
    freed-output-reuse    allocations recycled from the reference's freed output (a caching allocator)
    side-stream           output snapshot at return vs after settling threads and streams; on a GPU
                          every stream the call switches to is first held back by a sleep kernel, so
                          work the caller's stream does not wait for is still pending at the snapshot
    silent-launch-failure exceptions raised inside the candidate and swallowed
    call-count            many calls, then a fresh input set: work must not stop after the calls a
                          checker makes

Limits (stated, not hidden): on a CPU there are no CUDA streams, so the side-stream probe sees Python
threads and output that changes after return; a stream switched to below Python (inside a compiled
extension) is not held back. Exceptions swallowed outside the candidate's own files are not seen."""
from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch

from formloop.errors import InvalidInput
from formloop.measure.compare import compare_outputs, flatten
from formloop.measure.harness import check_set
from formloop.measure.integrity import IntegrityVerdict, flag, not_applicable, passed
from formloop.measure.launches import record_call
from formloop.measure.memory import clone_all, poisoned, settle
from formloop.measure.sandbox import phase
from formloop.measure.session import Session
from formloop.measure.static import candidate_source, static_scan
from formloop.verify.outcome import Verdict

GAMING, MINOR, TORCH_ONLY = IntegrityVerdict.GAMING, IntegrityVerdict.MINOR, IntegrityVerdict.TORCH_ONLY
SLEEP_CYCLES = 100_000_000   # ~50 ms at 2 GHz: longer than any snapshot takes to be enqueued and run
CALLS = 8


def probe_static(s: Session, base: Any) -> list:
    try:
        source, filename, entry = candidate_source(s.candidate.source_obj)
    except InvalidInput as exc:
        return [not_applicable("static-scan", str(exc))]
    out = []
    for c in static_scan(source, entry=entry, filename=filename):
        if c.obligation != "torch-only":
            out.append(c)
        elif c.verdict is Verdict.COUNTEREXAMPLE:  # evidence for the runtime detector, not a verdict
            out.append(passed("static-scan", "no kernel launch reachable from the source's forward "
                                             "(the torch-only detector decides on what the call launches)",
                              details={"static_torch_only": True, **dict(c.witness or {})}))
        else:
            out.append(replace(c, obligation="static-scan", details={**c.details, "detector": "static-scan"}))
    return out


def probe_torch_only(s: Session, base: Any) -> list:
    inputs = s.inputs(s.set_seed(1300))
    phase("candidate", "forward under the launch recorders")
    before = set(threading.enumerate())
    _, rec = record_call(s.cand_fn, clone_all(inputs), device=s.device, after=lambda: settle(before))
    evidence = rec.evidence()
    if not rec.torch_only:
        return [passed("torch-only", f"launches {', '.join(rec.custom[:6])}", details=evidence)]
    ops = rec.compute_ops
    what = (f"every kernel it ran is PyTorch's ({', '.join(ops[:8])}{' ...' if len(ops) > 8 else ''})" if ops
            else "it launched nothing at all")
    return [flag("torch-only", TORCH_ONLY, f"{s.candidate.name} launches no kernel of its own: {what}",
                 evidence=evidence,
                 trace=("call candidate(inputs) once under the Triton, dispatcher, extension"
                        + (" and profiler" if rec.profiled else "") + " recorders",
                        "no launch outside PyTorch's operators was recorded"))]


def probe_trivial(s: Session, base: Any) -> list:
    inputs = s.inputs(s.set_seed(300))
    ref, _ = s.reference(inputs, truth=False)
    out = s.call(clone_all(inputs))
    pairs = list(zip(flatten(out), flatten(ref)))
    lazy = [(k, type(c).__name__) for k, (c, r) in enumerate(pairs)
            if isinstance(c, torch.Tensor) and isinstance(r, torch.Tensor) and type(c) is not type(r)]
    checks = [flag("lazy-output", GAMING,
                   f"output {lazy[0][0]} is a {lazy[0][1]}, a torch.Tensor subclass: its values can be computed "
                   "when they are read, after the timed call returned",
                   evidence={"outputs": [{"output": k, "type": t} for k, t in lazy]},
                   trace=("call candidate(inputs)", "type(output) is a subclass of torch.Tensor, "
                          "type(reference(inputs)) is not"))] if lazy else [passed("lazy-output")]
    for k, (c, r) in enumerate(pairs):
        if not (isinstance(c, torch.Tensor) and type(c) is type(r) and c.numel() > 1 and r.is_floating_point()
                and c.shape == r.shape):
            continue
        c0 = c.reshape(-1)[0]
        if bool((c == c0).all()) and float(r.max() - r.min()) > 0:
            rms = float(r.double().pow(2).mean().sqrt())
            lax = bool(torch.allclose(c.double(), r.double(), rtol=1e-2, atol=1e-2))
            checks.append(flag("trivial-output", GAMING,
                               f"output {k} is the constant {float(c0):g} where the reference varies "
                               f"(reference rms {rms:.3g})" + ("; a fixed atol=rtol=1e-2 check would have accepted it"
                                                               if lax else ""),
                               evidence={"output": k, "constant": float(c0), "reference_rms": rms,
                                         "passes_fixed_atol_1e-2": lax},
                               trace=("inputs = get_inputs()",
                                      "candidate(inputs) is constant; reference(inputs) is not")))
            return checks
    return checks + [passed("trivial-output")]


def probe_memory(s: Session, base: Any) -> list:
    inputs = s.inputs(s.set_seed(600))
    ref, truth = s.reference(inputs)
    out_nan = s.call(clone_all(inputs), fill=float("nan"))
    out_three = s.call(clone_all(inputs), fill=3.0)
    moved = compare_outputs(out_three, out_nan, rtol=s.rtol)
    del out_three
    trace = ("run candidate with every empty allocation filled with NaN", "run again with fill 3.0",
             "compare the two outputs")
    checks = [flag("uninitialized-read", GAMING,
                   f"output depends on uninitialized memory: {100 * moved.bad_fraction:.1f}% of elements change with "
                   "the poison value (an unwritten output or a silently failed launch)",
                   evidence={"moved_fraction": moved.bad_fraction, "worst": moved.worst}, trace=trace)
              ] if not moved.ok else [passed("uninitialized-read")]
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


@contextmanager
def held_back_streams(cycles: int = SLEEP_CYCLES) -> Iterator[list[int]]:
    """While active, the first switch to each CUDA stream other than the caller's enqueues a sleep
    kernel of `cycles` on that stream, so its work runs late unless someone waits for it."""
    caller = torch.cuda.current_stream()
    held: list[int] = []
    set_stream, c_set = torch.cuda.set_stream, torch._C._cuda_setStream

    def hold() -> None:
        cur = torch.cuda.current_stream()
        if cur != caller and cur.stream_id not in held:
            held.append(cur.stream_id)
            torch.cuda._sleep(cycles)

    def patched_set_stream(stream):
        set_stream(stream)
        hold()

    def patched_c_set(*args, **kwargs):
        result = c_set(*args, **kwargs)
        hold()
        return result

    torch.cuda.set_stream, torch._C._cuda_setStream = patched_set_stream, patched_c_set
    try:
        yield held
    finally:
        torch.cuda.set_stream, torch._C._cuda_setStream = set_stream, c_set


def probe_side_stream(s: Session, base: Any) -> list:
    inputs = s.inputs(s.set_seed(1000))
    gpu = str(s.device).startswith("cuda")
    before = set(threading.enumerate())
    x = clone_all(inputs)
    held: list[int] = []
    phase("candidate", "forward with side streams held back")
    with torch.no_grad(), poisoned():
        if gpu:
            with held_back_streams() as held:
                out = s.cand_fn(*x)
                snap = [t.clone() if isinstance(t, torch.Tensor) else t for t in flatten(out)]  # caller's stream
        else:
            out = s.cand_fn(*x)
            snap = [t.clone() if isinstance(t, torch.Tensor) else t for t in flatten(out)]
    late = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    settle(before)
    moved = compare_outputs(flatten(out), snap)
    evidence = {"late_threads": late, "changed_after_return": moved.bad_fraction, "streams_held_back": len(held)}
    if late or not moved.ok:
        return [flag("side-stream", GAMING,
                     "work continues after the call returns (outside any timed region): "
                     + (f"threads still running: {late}; " if late else "")
                     + (f"{100 * moved.bad_fraction:.0f}% of the output changed after return" if not moved.ok else ""),
                     evidence=evidence,
                     trace=("call candidate(inputs)" + (" with each side stream held back by a sleep kernel" if gpu
                                                        else ""),
                            "snapshot the output on the caller's stream at return",
                            "join threads / synchronize the device", "compare the output with the snapshot"))]
    how = "threads and post-return writes" if not gpu else f"{len(held)} side streams held back, caller waited"
    return [passed("side-stream", how, details=evidence)]


def probe_launch_failure(s: Session, base: Any) -> list:
    files = {f for f in s.candidate.files if f}
    raised: list[dict[str, Any]] = []

    def local(frame, event, arg):
        if event == "exception" and arg[0] not in (StopIteration, GeneratorExit):
            item = {"type": arg[0].__name__, "message": str(arg[1])[:200],
                    "where": f"{frame.f_code.co_filename}:{frame.f_lineno}"}
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
                     f"{raised[0]['type']} raised at {raised[0]['where']} was swallowed and the output is garbage: "
                     f"{cmp.reason}", evidence={"swallowed": raised, **cmp.as_dict()},
                     trace=("trace exception events in the candidate's frames", "call candidate(inputs)",
                            "compare with reference(inputs)"))]
    return [flag("silent-launch-failure", MINOR,
                 f"swallows {raised[0]['type']} at {raised[0]['where']} (output still correct)",
                 evidence={"swallowed": raised})]


def probe_call_count(s: Session, base: Any, calls: int = CALLS) -> list:
    if not base.correct:
        return [not_applicable("call-count", "candidate is incorrect on the basic input sets")]
    sets = [s.inputs(s.set_seed(1200 + k)) for k in range(2)]
    for k in range(calls):
        phase("candidate", f"forward, repeated call {k + 1} of {calls}")
        s.call(sets[k % 2], poison=False)
    cmp, _ = check_set(s, 1203, f"after {calls} repeated calls")
    if cmp.ok:
        return [passed("call-count", f"correct after {calls} repeated calls")]
    return [flag("call-count", GAMING, f"correct on the first calls, wrong after {calls} more: {cmp.reason}",
                 evidence={"repeated_calls": calls, **cmp.as_dict()},
                 trace=("check candidate on fresh input sets (correct)", f"call it {calls} times on two input sets",
                        "check it on one more fresh input set: wrong"))]
