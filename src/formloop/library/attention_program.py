"""The attention programs as the verifier reads them, their named faults, and the proof plans of
attention-decode and attention-prefill.

A program is three pieces of data, each read by a Z3 encoder and by the replay interpreter:
  walk        which key positions each program touches (decode: SplitWalk, prefill: CausalWalk;
              formloop.verify.kv_cover), with the tile-loop lemma at every menu tile size
  arithmetic  the online-softmax update and merge formulas (SoftmaxArithmetic;
              formloop.verify.softmax_merge proves them symbolically)
  layout      GQA head packing, the paged cache's address map, TMA tiles inside one page
The kernels in attention_decode_kernel / attention_prefill_kernel compute the same ranges and
formulas; their tests check them against brute force and an fp32 reference.

Faults (each a plausible implementation mistake; each must be caught with a replayed defect):
  split-overlap        split j > 0 starts one tile early: keys counted twice        (kv-exact-once)
  dropped-tail         ⌊L/Bn⌋ tiles: the last partial tile is never read             (kv-coverage)
  unguarded-tail       no mask at a split's end: keys past L are read                (kv-no-phantom)
  stale-max            the merge weighs a split against the max before it was folded (merge-step)
  missing-rescale      the accumulator is not rescaled when the running max rises    (tile-step)
  causal-off-by-one    the causal mask admits k <= q + 1: the next token leaks       (causal-no-future)
  causal-diagonal      the causal mask is k < q: a query never sees itself           (causal-coverage)
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from formloop.dtypes import dtype_bytes
from formloop.errors import InvalidInput
from formloop.template import Template
from formloop.verify.attention_replay import SoftmaxArithmetic
from formloop.verify.certificate import ProofPlan
from formloop.verify.kv_cover import (
    CausalWalk, SplitWalk, check_causal_walk, check_head_packing, check_paged_address, check_rope_walk,
    check_split_walk, check_tile_in_page, check_tile_loop,
)
from formloop.verify.outcome import ObligationResult
from formloop.verify.softmax_merge import SOFTMAX_OBLIGATIONS, check_softmax

DECODE_FAULTS = {
    "split-overlap": ("split j > 0 starts one tile early (keys counted twice)", ("kv-exact-once",)),
    "dropped-tail": ("floor-divided tile count (the last partial tile is never read)", ("kv-coverage",)),
    "unguarded-tail": ("no mask at the end of a split (keys past L are read)", ("kv-no-phantom",)),
    "stale-max": ("the merge weighs split j against the running max before folding it in", ("merge-step",)),
    "missing-rescale": ("the accumulator is not rescaled when the running max rises", ("tile-step",)),
    "rope-uncut": ("rope inside: the cache walk runs to the split's end, reading the row of the new key too",
                   ("rope-exact-once", "rope-no-stale")),
    "rope-partial-dropped": ("rope inside: the partial tile after the whole ones is skipped", ("rope-coverage",)),
}
PREFILL_FAULTS = {
    "causal-off-by-one": ("causal mask k <= q + 1 (the next token leaks into the row)", ("causal-no-future",)),
    "causal-diagonal": ("causal mask k < q (a query never sees its own key)", ("causal-coverage",)),
    "missing-rescale": ("the accumulator is not rescaled when the running max rises", ("tile-step",)),
}
FAULTS = {**DECODE_FAULTS, **PREFILL_FAULTS}
"""name -> (what is wrong, the obligations responsible for catching it)."""

PREFER_DECODE = (64, 16)    # (Bn, KS): witnesses are reported at this design when the defect occurs there
PREFER_PREFILL = (128, 64)  # (Br, Bc)
PREFILL_SOFTMAX = tuple(n for n in SOFTMAX_OBLIGATIONS if n != "merge-step")  # prefill has no split merge


@dataclass(frozen=True)
class AttentionProgram:
    """One attention program as the verifier reads it (a fault, if any, applied)."""

    kind: str  # "decode" or "prefill"
    walk: SplitWalk | CausalWalk
    arithmetic: SoftmaxArithmetic = field(default_factory=SoftmaxArithmetic)
    fault: str | None = None
    rope_walk: SplitWalk = SplitWalk()  # its rope_* methods: decode with the rope inside (attention_decode_jit ROPE)


def decode_program(fault: str | None = None) -> AttentionProgram:
    if fault is not None and fault not in DECODE_FAULTS:
        raise InvalidInput("decode fault", fault, sorted(DECODE_FAULTS))
    walk = {"split-overlap": SplitWalk(overlap=1), "dropped-tail": SplitWalk(floor_tiles=True),
            "unguarded-tail": SplitWalk(guarded=False)}.get(fault, SplitWalk())
    arith = {"stale-max": SoftmaxArithmetic(stale_merge_max=True),
             "missing-rescale": SoftmaxArithmetic(rescale_acc=False)}.get(fault, SoftmaxArithmetic())
    rope = SplitWalk(rope_fault=fault.removeprefix("rope-") if fault and fault.startswith("rope-") else None)
    return AttentionProgram("decode", walk, arith, fault, rope)


def prefill_program(fault: str | None = None) -> AttentionProgram:
    if fault is not None and fault not in PREFILL_FAULTS:
        raise InvalidInput("prefill fault", fault, sorted(PREFILL_FAULTS))
    walk = {"causal-off-by-one": CausalWalk(shift=1), "causal-diagonal": CausalWalk(shift=-1)}.get(fault, CausalWalk())
    arith = SoftmaxArithmetic(rescale_acc=False) if fault == "missing-rescale" else SoftmaxArithmetic()
    return AttentionProgram("prefill", walk, arith, fault)


def check_program(prog: AttentionProgram, *, tiles: Sequence[int] = (64,), packs: Sequence[int] = (4,),
                  timeout_s: float = 10.0) -> list[ObligationResult]:
    """Every obligation of one program: the walk's (family-wide), the softmax chain, the tile-loop
    lemma at `tiles`, and for decode the head packing at `packs` and the paged address map."""
    out: list[ObligationResult] = []
    for t in tiles:
        out.append(check_tile_loop(t, masked=True, timeout_s=timeout_s))
        if prog.kind == "prefill":
            out.append(check_tile_loop(t, masked=False, timeout_s=timeout_s))
    if prog.kind == "decode":
        out += check_split_walk(prog.walk, prefer=PREFER_DECODE, timeout_s=timeout_s)  # type: ignore[arg-type]
        out += check_rope_walk(prog.rope_walk, prefer=PREFER_DECODE, timeout_s=timeout_s)
        out += check_softmax(prog.arithmetic, timeout_s=timeout_s)
        out += [check_head_packing(qp, timeout_s=timeout_s) for qp in packs]
        out.append(check_paged_address(timeout_s=timeout_s))
        out += [check_tile_in_page(t, timeout_s=timeout_s) for t in tiles]
    else:
        out += check_causal_walk(prog.walk, prefer=PREFER_PREFILL, timeout_s=timeout_s)  # type: ignore[arg-type]
        out += check_softmax(prog.arithmetic, names=PREFILL_SOFTMAX, timeout_s=timeout_s)
    return out


def check_fault(name: str, *, timeout_s: float = 10.0) -> list[ObligationResult]:
    """The family's program with fault `name` injected, against all of its obligations."""
    if name not in FAULTS:
        raise InvalidInput("fault", name, sorted(FAULTS))
    prog = decode_program(name) if name in DECODE_FAULTS else prefill_program(name)
    return check_program(prog, timeout_s=timeout_s)


def _menu(template: Template, name: str) -> tuple:
    return next(d.decision.menu for d in template.decisions if d.name == name)


def _fixed(template: Template, chip_values: Mapping[str, float]) -> dict:
    fixed = {p.name: chip_values[p.name] for p in template.params if p.payload.kind == "chip"}
    fixed["e"] = dtype_bytes(template.options["dtype"])  # the walls read the element size
    return fixed


def decode_plan(template: Template, chip_values: Mapping[str, float]) -> ProofPlan:
    """attention-decode's proof: the walk for every L, Bn, KS (and with the rope inside: the cache walk cut at
    L − 1, the new key from registers); the tile-loop lemma and the TMA
    tile-in-page rule at every Bn of the menu; head packing at every QP; the paged address map; the
    online-softmax chain."""
    prog = decode_program()
    tiles, packs = _menu(template, "Bn"), sorted(_menu(template, "QP"))
    return ProofPlan(
        fixed=_fixed(template, chip_values),
        fixed_reason="the walls read the H200's shared memory, warps and register budget and the 2-byte element; "
                     "they are fixed so K1/K3 stay decidable; B, Hq, Hkv, D, L and the page size stay symbolic",
        bounds={"index extents": "every L, Bn, KS >= 1 (walk); one tile-loop query per Bn, one packing query per QP",
                "softmax": "scores and values real, exp uninterpreted with exp>0, exp(0)=1, exp(a)exp(b)=exp(a+b)"},
        checks=(lambda run: check_program(prog, tiles=tiles, packs=packs, timeout_s=run.timeout_s),),
    )


def prefill_plan(template: Template, chip_values: Mapping[str, float]) -> ProofPlan:
    """attention-prefill's proof: the causal walk for every L, Br, Bc with Bc | Br; the tile-loop
    lemma (masked and unmasked) at every Bc of the menu; the online-softmax chain."""
    prog = prefill_program()
    return ProofPlan(
        fixed=_fixed(template, chip_values),
        fixed_reason="the walls read the H200's shared memory and register budget and the 2-byte element; "
                     "they are fixed so K1/K3 stay decidable; B, Hq, Hkv, D, L stay symbolic",
        bounds={"index extents": "every L, Br, Bc >= 1 with Bc | Br (walk); one tile-loop query per Bc",
                "softmax": "scores and values real, exp uninterpreted with exp>0, exp(0)=1, exp(a)exp(b)=exp(a+b)"},
        checks=(lambda run: check_program(prog, tiles=_menu(template, "Bc"), timeout_s=run.timeout_s),),
    )
