"""The problem harness: is a candidate correct, how fast is it, how far from speed of light?

Correctness runs on several fresh input sets drawn on the device under a secret seed (reported, so
a run can be replayed), never on zeros; every uninitialized allocation the candidate makes is
poisoned (NaN) so stale memory cannot pass for a result; inputs must come back unchanged; outputs are
compared with the reference and its float64 truth where they live (formloop.measure.compare). The
reference for correctness is the problem's math in its declared precision (fp32: TF32 off,
formloop.measure.mathmode); the timed reference runs under PyTorch's defaults (the notes say both). Timing
is the one timer's (formloop.measure.timer): a CUDA graph over rotating operand sets on a GPU,
labelled 'gpu'; host wall time labelled 'cpu' without one (Triton kernels then run in Triton's
interpreter), never compared with a GPU speed-of-light floor. Two checks guard the timing itself:
the output the timed graph writes is checked (a call that skips its work while being captured
fails), and one more fresh input set is checked after timing (a candidate that stops working after
the calls a checker makes fails). A candidate faster than the SOL bound is reported with a warning
that points to `formloop integrity`; without a chip given, a timed GPU run is held against the spec
of the device it ran on (by its name: H200 -> h200), and a CPU run says that it has no floor."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from formloop.errors import InvalidInput
from formloop.hw.chips import chip_for_device, chip_names
from formloop.measure.compare import Comparison, flatten
from formloop.measure.integrity import check_sol_ceiling, generous_floor_s
from formloop.measure.mathmode import describe
from formloop.measure.memory import changed_inputs, clone_all
from formloop.measure.rounds import run_rounds
from formloop.measure.sandbox import phase
from formloop.measure.session import PRECISIONS, Session
from formloop.measure.timer import MODES, Timing, TimingPolicy, operand_sets_for, time_calls
from formloop.verify.outcome import Verdict

CPU_OPERAND_SETS = 2   # no cache to defeat on a CPU; two sets still expose a call-count cheat


@dataclass
class HarnessResult:
    problem: str
    candidate: str
    device: str
    seed: int
    weights: str
    sets: list[Comparison]
    mutated: list[dict[str, Any]]
    ref_time: Timing | None = None
    cand_time: Timing | None = None
    timed_output: Comparison | None = None   # what the timed call wrote (graph) / returned (eager)
    after_timing: Comparison | None = None   # one more fresh input set after the timed calls
    sol_floor_s: float | None = None
    sol_note: str = ""
    sol_chip: str | None = None            # the chip of the floor: given, or the CUDA device's own
    sol_generous_s: float | None = None    # the most generous precision's floor: what the warning uses
    protocol: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        guards = [c for c in (self.timed_output, self.after_timing) if c is not None]
        return all(c.ok for c in self.sets) and not self.mutated and all(c.ok for c in guards)

    @property
    def speedup(self) -> float | None:
        if self.ref_time and self.cand_time and self.ref_time.source == self.cand_time.source:
            return self.ref_time.seconds / self.cand_time.seconds
        return None

    @property
    def sol_fraction(self) -> float | None:
        """t_SOL / t_candidate: only for GPU timings (a CPU time against a GPU floor means nothing)."""
        if self.sol_floor_s and self.cand_time and self.cand_time.source == "gpu":
            return self.sol_floor_s / self.cand_time.seconds
        return None

    def as_dict(self) -> dict[str, Any]:
        opt = lambda x: x.as_dict() if x is not None else None  # noqa: E731
        return {"status": "completed", "problem": self.problem, "candidate": self.candidate, "device": self.device,
                "seed": self.seed, "weights": self.weights, "correct": self.correct,
                "inputs_unchanged": not self.mutated, "mutated": self.mutated, "sets": [c.as_dict() for c in self.sets],
                "timed_output": opt(self.timed_output), "after_timing": opt(self.after_timing),
                "reference_time": opt(self.ref_time), "candidate_time": opt(self.cand_time),
                "speedup": self.speedup, "sol_chip": self.sol_chip, "sol_floor_s": self.sol_floor_s,
                "sol_generous_s": self.sol_generous_s,
                "sol_note": self.sol_note,
                "sol_fraction": self.sol_fraction, "protocol": self.protocol, "notes": self.notes,
                "warnings": self.warnings, "replay": f"formloop harness PROBLEM CANDIDATE --seed {self.seed}"}


def sol_floor(problem: Any, chip: str, dtype: str | None = None,
              clock_mhz: float | None = None) -> tuple[float | None, str, float | None]:
    """The problem's SOL time floor on `chip`, counted from its reference at dispatch level (meta
    tensors: nothing allocated): (floor at the report's precision, its note, the most generous floor
    over the precisions the report offers: what the faster-than-SOL warning holds a time against)."""
    from formloop.sol.auto import sol_for_problem
    from formloop.sol.problem import Problem

    if not isinstance(problem, Problem):
        return None, "no SOL floor: SOL needs a problem file (formloop.sol.problem.load_problem)", None
    report = sol_for_problem(problem, chip, dtype=dtype, clock_mhz=clock_mhz)
    generous, name = generous_floor_s(report)
    lower = ", a LOWER bound (uncounted operators)" if report.lower_bound else ""
    return float(report.time_floor_s), (f"SOL floor on {report.chip} at {report.clock_mhz:g} MHz, "
                                        f"{report.precision_words}, {report.bound}-bound (model)"
                                        f"{lower}; warning below 90% of {generous * 1e3:.4g} ms ({name})"), generous


def device_chip(device: str, timed: bool) -> tuple[str | None, str]:
    """The chip a run without --chip is held against: the CUDA device's own spec, by its name."""
    if not timed:
        return None, "no SOL floor: not timed (give --chip to print one)"
    if not str(device).startswith("cuda"):
        return None, ("no SOL floor: timed on the CPU (source 'cpu'); the SOL floor is a GPU bound "
                      "(give --chip to print one)")
    name = torch.cuda.get_device_name(torch.device(device))
    chip = chip_for_device(name)
    if chip is None:
        return None, f"no SOL floor: no chip spec matches the device {name!r} (give --chip: {', '.join(chip_names())})"
    return chip, f"chip {chip} taken from the device {name!r}"


def _sol(s: Session, result: HarnessResult, chip: str | None, dtype: str | None, clock_mhz: float | None,
         timed: bool) -> None:
    """The SOL floor of the problem (at the session's shapes) and the faster-than-SOL warning."""
    given = bool(chip)
    how = "given"
    if not given:
        chip, how = device_chip(s.device, timed)
        if chip is None:
            result.sol_note = how
            return
    phase("harness", "SOL floor")
    if dtype is None and s.precision is not None:  # the floor of the precision that ran (--precision bf16)
        dtype = next(name for name, dt in PRECISIONS.items() if dt == s.precision)
    try:
        with s.overrides(s.base_overrides):
            floor, note, generous = sol_floor(s.problem, chip, dtype, clock_mhz)
    except Exception as exc:  # noqa: BLE001 - a floor the run did not ask for never fails the run
        if given:
            raise
        result.sol_chip, result.sol_note = chip, f"no SOL floor ({how}): {exc}"
        return
    result.sol_chip, result.sol_floor_s, result.sol_generous_s = chip, floor, generous
    result.sol_note = note if given else f"{note}; {how}"
    warning = sol_warning(result.cand_time, generous, result.sol_note)
    if warning:
        result.warnings.append(warning)


def check_set(s: Session, index: int, label: str = "") -> tuple[Comparison, list[dict[str, Any]]]:
    """One correctness check on fresh input set `index`: (comparison, mutated inputs)."""
    inputs = s.inputs(s.set_seed(index))
    _drained()   # each step's queued GPU work is charged to that step (the sandbox times steps by their messages)
    ref, truth = s.reference(inputs)      # the reference's output stays alive: no freed-buffer reuse
    mine = clone_all(inputs)
    _drained()
    prefix = f"{label}: " if label else ""
    try:
        out = s.call(mine)
    except (MemoryError, torch.OutOfMemoryError):
        raise  # the run is out of memory, not the candidate merely wrong: the sandbox names it
    except Exception as exc:
        return Comparison(False, f"{prefix}candidate raised {type(exc).__name__}: {exc}"), []
    phase("problem", "comparison with the reference and its double-precision truth (a blocked truth runs here)")
    cmp = s.compare(out, ref, truth)
    if prefix and not cmp.ok:
        cmp = Comparison(**{**cmp.as_dict(), "reason": prefix + cmp.reason})
    return cmp, changed_inputs(inputs, mine)


def _drained() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _set_bytes(values: Any) -> int:
    return sum(t.numel() * t.element_size() for t in flatten(values) if isinstance(t, torch.Tensor))


def _nan_fill(protect: list) -> Any:
    """A poison for the timed graph's last output that never touches an input it aliases."""
    ptrs = {t.untyped_storage().data_ptr() for t in flatten(protect) if isinstance(t, torch.Tensor)}

    def fill(out: Any) -> None:
        for t in flatten(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.untyped_storage().data_ptr() not in ptrs:
                t.fill_(float("nan"))
    return fill


def _refill(buffers: list[list], seeds: list[int], s: Session) -> None:
    """Write each set's drawn values into every buffer's copy of it again (the memory stays where it is):
    one draw per set."""
    for k, seed in enumerate(seeds):
        fresh = flatten(s.inputs(seed))
        for sets in buffers:
            for buf, value in zip(flatten(sets[k]), fresh):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(value)


def _timing(s: Session, mode: str, policy: TimingPolicy, result: HarnessResult) -> None:
    phase("harness", "timing")
    gpu = str(s.device).startswith("cuda")
    first = s.inputs(s.set_seed(1000))
    bytes_per_set = _set_bytes(first) + _set_bytes(s.reference(first, truth=False)[0])
    if gpu:
        from formloop.measure.device import device_facts
        n = operand_sets_for(bytes_per_set, device_facts(torch.cuda.current_device())["l2_bytes"], policy)
    else:
        n = CPU_OPERAND_SETS
    seeds = [s.set_seed(1000 + k) for k in range(n)]
    buffers = [[first] + [s.inputs(x) for x in seeds[1:]]]
    buffers.append([clone_all(x) for x in buffers[0]])
    rounds = max(1, policy.rounds) if gpu else 1
    pool = torch.cuda.graph_pool_handle() if gpu else None
    modes: dict[str, str] = {}

    def time_one(side: str, buf: int):
        if side == "candidate":
            phase("candidate", "timed calls")
            run = time_calls(s.cand_fn, buffers[buf], device=s.device, mode=modes.get("both", mode), policy=policy,
                             poison=_nan_fill(buffers[buf]), pool=pool)
        else:
            phase("problem", "timed reference calls")
            run = time_calls(s.ref_model, buffers[buf], device=s.device, mode=modes.get("both", mode), policy=policy,
                             pool=pool)
        modes.setdefault(side, run.timing.mode)
        return run

    def before_round(r: int) -> None:
        if r:
            _refill(buffers, seeds, s)

    with torch.no_grad():
        timed = run_rounds(rounds, time_one, before_round)
        if gpu and modes["reference"] != modes["candidate"]:  # one side could not be captured: both eager
            modes["both"] = "eager"
            timed = run_rounds(rounds, time_one, before_round)
            result.notes.append(f"timed eagerly: the {'reference' if modes['reference'] == 'eager' else 'candidate'}"
                                " could not be captured in a CUDA graph")
    (result.cand_time, run, _), (result.ref_time, _, _) = timed["candidate"], timed["reference"]
    result.protocol["timing_rounds"] = rounds
    if rounds > 1:
        result.notes.append(f"timing: {rounds} rounds, candidate and reference on swapped input buffers "
                            "(formloop.measure.rounds)")
    del buffers
    expected, truth = s.reference(s.inputs(seeds[run.last_set]))
    timed_cmp = s.compare(run.last_output, expected, truth)
    what = "output of the timed CUDA graph" if run.timing.mode == "graph" else "output of the last timed call"
    result.timed_output = timed_cmp if timed_cmp.ok else Comparison(**{**timed_cmp.as_dict(),
                                                                         "reason": f"{what}: {timed_cmp.reason}"})


def evaluate(problem: Any, candidate: Any, *, sets: int = 3, seed: int | None = None, timing: bool = True,
             chip: str | None = None, dtype: str | None = None, clock_mhz: float | None = None,
             rtol: float | None = None, precision: str | None = None, eval_mode: bool = False,
             tolerance: str = "formloop", timing_mode: str = "auto", policy: TimingPolicy | None = None,
             overrides: Mapping[str, Any] | None = None, session: Session | None = None,
             tf32_baseline: bool = False) -> HarnessResult:
    """Correctness on `sets` fresh input sets, input immutability, then timing, the timed-output and
    after-timing checks, and the SOL fraction (with a warning when it exceeds physics).

    The reference for correctness is the problem's math in its declared precision (fp32 with TF32
    off, formloop.measure.mathmode); timing runs under PyTorch's defaults. `tf32_baseline` is for a
    baseline timed as users run it (torch.compile of the reference, which runs convs on cuDNN TF32
    like eager): when it fails the fp32 reference it is checked again against the reference under
    PyTorch's defaults, and if it passes there it is timed, the fp32 verdict kept in the notes and
    protocol. Candidates never get this."""
    if not isinstance(sets, int) or not 1 <= sets <= 100:
        raise InvalidInput("sets", sets, "an integer 1 ... 100")
    if timing_mode not in MODES:
        raise InvalidInput("timing mode", timing_mode, MODES)
    phase("harness", "loading the problem and the candidate")
    s = session or Session(problem, candidate, seed=seed, rtol=rtol, precision=precision, eval_mode=eval_mode,
                           rule=tolerance, overrides=overrides)
    comparisons, mutated = [], []
    for i in range(sets):
        phase("harness", f"correctness, input set {i}")
        cmp, changes = check_set(s, i)
        comparisons.append(cmp)
        mutated += [{**m, "set": i} for m in changes]
    result = HarnessResult(s.name, s.candidate.name, s.device, s.seed, s.weights, comparisons, mutated)
    result.protocol = {"precision": str(s.precision or "as get_inputs"), "eval_mode": s.eval_mode,
                       "tolerance": s.rule, "rtol": s.rtol, "no_grad": True, "timing_mode": timing_mode,
                       "reference_math": s.reference_math}
    if tf32_baseline and not result.correct and not mutated and s.reference_math == "fp32":
        _tf32_recheck(s, result, sets)
    result.notes.append(describe(s.reference_math))
    if s.truth_model is None:
        result.notes.append("no float64 truth (the reference could not be copied): compared with the reference itself")
    elif s.truth_note:
        result.notes.append(s.truth_note)
    if timing and result.correct:
        _timing(s, timing_mode, policy or TimingPolicy(), result)
        phase("harness", "after-timing check")
        result.after_timing, late = check_set(s, sets + 1, "after timing")
        result.mutated += [{**m, "set": "after timing"} for m in late]
    _sol(s, result, chip, dtype, clock_mhz, timed=result.cand_time is not None)
    return result


def _tf32_recheck(s: Session, result: HarnessResult, sets: int) -> None:
    """A baseline that failed the fp32 reference, checked against the reference under PyTorch's
    defaults (cuDNN TF32): passing there, it is kept (and timed), the fp32 failure named."""
    failed = next(c for c in result.sets if not c.ok)
    s.reference_math = "defaults"
    again = [check_set(s, i)[0] for i in range(sets)]
    if not all(c.ok for c in again):
        s.reference_math = "fp32"
        return
    result.protocol["reference_math"] = "defaults"
    result.protocol["fp32_reference"] = {"ok": False, "reason": failed.reason}
    result.sets = again
    result.notes.append("baseline: misses the rule against the fp32 reference (TF32 off) -- " + failed.reason
                        + " -- and passes against the reference under PyTorch's defaults (cuDNN TF32): "
                          "timed as users run it, its output carries TF32 error")


def sol_warning(timing: Timing | None, floor_s: float | None, floor_note: str = "") -> str | None:
    """The harness's warning for a GPU time more than the SOL-ceiling margin below the floor."""
    if timing is None or not floor_s:
        return None
    ceiling = check_sol_ceiling(timing.seconds, floor_s, source=timing.source, floor_note=floor_note)
    if ceiling.verdict is not Verdict.COUNTEREXAMPLE:
        return None
    return (f"faster than the SOL bound: {ceiling.reason}; run `formloop integrity` on this problem and candidate "
            "before believing the speedup")
