"""Step 4, double buffering: one buffer per tile becomes generations rotating through S slots.

Bounded model at shape n: n k-tiles, slots S, prefetch distance P, trailing barrier beta.

    prologue:     load tiles q < min(P, n) into slot q mod S
    iteration p:  load tile p+P into slot (p+P) mod S   (if p+P < n)
                  leading barrier
                  compute tile p from slot p mod S
                  trailing barrier                      (if beta = 1)

Barriers cut the run into epochs; accesses in one epoch are unordered (threads race), accesses in
different epochs are ordered. Iteration p loads in epoch (1+beta)·p and computes in epoch
(1+beta)·p + 1; prologue loads are in epoch 0. Step matching for a compute is generation
correctness: the slot holds tile p, with no other generation landing from p's load up to the
read. It holds exactly when P <= S - 2 + beta, the lifetime line of the tiling template, written
once here and used as the solver's constraint and the verifier's precondition. The backward map
reads slots as step-2 buffers (b_q = q mod S, write at q's load epoch, last read at its compute
epoch); step 3's transfer decisions are carried unchanged.
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from formloop.expr import all_of, decision, floordiv, implies, maximum, param, where
from formloop.library.chain import storage
from formloop.template import Constraint, Template
from formloop.verify.local import (
    Fault, LocalModel, Revision, Step, Timeline, by_menu, feasibility_obligation, k1_obligation, k3_obligation,
    local_obligation, pairs, template_nodes,
)
from formloop.verify.proofgraph import Node

S = decision("S", (1, 2, 3), doc="shared-memory slots (pipeline stages)")
P = decision("P", (0, 1, 2), doc="prefetch distance: tile p+P is loaded while tile p is consumed")
beta = decision("beta", (0, 1), doc="1 if a trailing barrier follows each compute")
tile_bytes = param("tile_bytes", doc="bytes of one staged k-tile (A and B parts)")
Ms = param("Ms", kind="chip", doc="shared memory a block may use, bytes")
t_load = param("t_load", kind="chip", doc="cycles to load one k-tile")
t_comp = param("t_comp", kind="chip", doc="cycles to compute on one k-tile")
t_bar = param("t_bar", kind="chip", lower=0, doc="cycles per barrier")

LIFETIME = P <= S - 2 + beta
WEAK = P <= S - 1  # ignores the trailing barrier: admits racy designs

PROGRAMS = {
    "default": "prologue: load q < min(P,n) into slot q%S; for p in range(n): if p+P < n: load p+P into slot (p+P)%S; "
               "barrier; compute p from slot p%S; if beta: barrier",
}
FAULTS = {
    "wrong_generation": Fault("wrong_generation", 4, "the consumer reads slot (p+1) % S instead of p % S",
                              "step_matching.compute"),
    "weak_lifetime": Fault("weak_lifetime", 4, "the lifetime premise is P <= S - 1 (trailing barrier ignored)",
                           "step_matching.compute", "premise"),
}
PREMISES = {"default": (), "strong": (Constraint("strong", beta.eq(1), "strong",
                                                 "always keep the trailing barrier (a too-strong contract)"),)}
ASSUMES = ("loads_land_before_barrier",)


@lru_cache(maxsize=8)
def template(rev: Revision = Revision()) -> Template:
    life = WEAK if rev.fault == "weak_lifetime" else LIFETIME
    per_tile = where(P.eq(0), t_load + t_comp, maximum(t_load, t_comp)) + (1 + beta) * t_bar
    return Template(
        name="chain-4-double-buffer", doc="slot rotation, prefetch distance and trailing barrier",
        decisions=(S, P, beta), params=(tile_bytes, Ms, t_load, t_comp, t_bar),
        scope=(Constraint("one_slot_fits", tile_bytes <= Ms, "scope", "a single slot fits in shared memory"),),
        constraints=(
            Constraint("capacity", S * tile_bytes <= Ms, "capacity", "the S slots fit in shared memory"),
            Constraint("lifetime", life, "schedule", "a slot is refilled only after its last read"),
            *PREMISES[rev.premise],
        ),
        preconditions=(Constraint("pre_lifetime", life, "schedule", "generation correctness"),),
        cost=per_tile, unit="cycles per k-tile", terms={"per_tile": per_tile},
    )


def backward_map(n: int) -> dict:
    """π into the step-2 design at shape n: slots are buffers, epochs are times."""
    out: dict = {"nbuf": S}
    for q in range(n):
        out[f"b{q}"] = q - floordiv(q, S) * S
        out[f"t{q}"] = where(P > q, 0, (1 + beta) * (q - P))
        out[f"l{q}"] = (1 + beta) * q + 1
    for u, v in pairs(n):
        out[f"z{u}_{v}"] = 1
    return out


# -- the schedule as expressions (S, P, beta symbolic) ---------------------------------------------

def _load_epoch(e, q):
    return where(e["P"] > q, 0, (1 + e["beta"]) * (q - e["P"]))


def _comp_epoch(e, p):
    return (1 + e["beta"]) * p + 1


def _slot(e, q):
    return by_menu(e["S"], S.decision.menu, lambda c: q % c)


def _read_slot(e, p, rev: Revision):
    return _slot(e, p + 1) if rev.fault == "wrong_generation" else _slot(e, p)


# -- replay ---------------------------------------------------------------------------------------

def simulate(w: dict, n: int, rev: Revision) -> Timeline:
    """Execute epochs in order; accesses inside one epoch are tried in both orders."""
    Sv, Pv, bv = int(w["S"]), int(w["P"]), int(w["beta"])
    tl = Timeline()
    read_slot = (lambda p: (p + 1) % Sv) if rev.fault == "wrong_generation" else (lambda p: p % Sv)
    loads = [((0 if q < Pv else (1 + bv) * (q - Pv)), "load", q, q % Sv) for q in range(n)]
    comps = [((1 + bv) * p + 1, "compute", p, read_slot(p)) for p in range(n)]
    prologue = [q for q in range(min(Pv, n))]
    if len({q % Sv for q in prologue}) < len(prologue):
        tl.flag("initialization", f"prologue tiles {prologue} share a slot (S = {Sv})")
    for first in ("load", "compute"):
        slot: dict[int, int] = {}
        done: set[int] = set()
        for epoch, kind, x, s in sorted(loads + comps, key=lambda a: (a[0], a[1] != first, a[2])):
            if kind == "load":
                pending = [p for p in range(x) if read_slot(p) == s and p not in done]
                if pending:
                    tl.flag("step_matching.load", f"load of tile {x} into slot {s} in epoch {epoch} while compute "
                                                  f"of tile {pending[0]} still needs it")
                slot[s] = x
            else:
                if slot.get(s) != x:
                    tl.flag("step_matching.compute", f"compute of tile {x} in epoch {epoch} reads slot {s} "
                                                     f"holding tile {slot.get(s, 'none')}")
                done.add(x)
    tl.events.extend((ep, kind, {"tile": x, "slot": s}) for ep, kind, x, s in sorted(loads + comps))
    return tl


# -- obligations ----------------------------------------------------------------------------------

def model(n: int, revs: Mapping[int, Revision]) -> LocalModel:
    rev = revs.get(4, Revision())
    t = template(rev)
    p = f"step4@n{n}"
    nodes = (*template_nodes(p, t),
             Node(f"{p}.program", "definition", PROGRAMS[rev.program] + f"\nn={n}" + rev.fault_text(FAULTS)),
             Node(f"{p}.backward_map", "definition", "pi: b[q] = q % S, t[q] = load epoch of q, "
                                                     "l[q] = compute epoch of q, "
                                                     "z = tile order, nbuf = S"))
    prog = (f"{p}.program", f"{p}.decisions", f"step3@n{n}.program")
    pre = (f"{p}.pre",)
    replay = lambda w: simulate(w, n, rev).replay()  # noqa: E731
    LE, CE, SL = _load_epoch, _comp_epoch, _slot
    RS = lambda e, q: _read_slot(e, q, rev)  # noqa: E731

    def init(e):
        return all_of(*[implies(q2 < e["P"], SL(e, q1).ne(SL(e, q2))) for q1, q2 in pairs(n)])

    def load(e):
        return all_of(*[implies(RS(e, p).eq(SL(e, q)), CE(e, p) < LE(e, q)) for q in range(n) for p in range(q)])

    def compute(e):
        out = []
        for p in range(n):
            others = [~all_of(SL(e, q).eq(RS(e, p)), LE(e, p) <= LE(e, q), LE(e, q) <= CE(e, p))
                      for q in range(n) if q != p]
            out.append(all_of(SL(e, p).eq(RS(e, p)), LE(e, p) < CE(e, p), *others))
        return all_of(*out)

    def barrier(e):
        return 1 + e["beta"] >= 1

    def rank(e):
        return all_of(*[CE(e, q) < CE(e, q + 1) for q in range(n - 1)], CE(e, 0) >= 0)

    def progress(e):
        return all_of(*[LE(e, q) < CE(e, q) for q in range(n)])

    def completion(e):
        return all_of(*[LE(e, q) <= CE(e, n - 1) for q in range(n)])

    ob = lambda name, cond, text, claim, prem=prog, assume=t.preconditions: local_obligation(  # noqa: E731
        4, t, name, cond, text, prem, claim, replay, n, assume)
    obligations = (
        ob("initialization", "initialization", "prologue tiles occupy distinct slots", init, (*prog, *pre)),
        ob("step_matching.load", "step_matching",
           "a load refills a slot only after every earlier reader of it finished",
           load, (*prog, *pre)),
        ob("step_matching.compute", "step_matching", "a compute reads the generation the coarse program names",
           compute, (*prog, *pre, "assume.loads_land_before_barrier")),
        ob("step_matching.barrier", "step_matching", "barriers are internal and every thread meets the same count",
           barrier),
        ob("rank", "rank", "compute epochs strictly increase, so the remaining-epoch count falls", rank),
        ob("progress", "progress", "every tile's load is issued in an epoch before its compute", progress),
        ob("completion", "completion", "every load is consumed by the last compute", completion),
        feasibility_obligation(4, t, p, storage.template(n, revs.get(2, Revision())), f"step2@n{n}",
                               backward_map(n), f"{p}.backward_map", n, fine_groups=["schedule"]),
        k1_obligation(4, t, p, ["schedule"], n),
        k3_obligation(4, t, p, {"S": 1, "P": 0, "beta": 1}, n),
    )
    return LocalModel(t, nodes, obligations)


STEP = Step(
    number=4, name="double buffering",
    coarse="one buffer per tile", fine="generations rotating through S slots, loaded P tiles ahead",
    hard="step matching of a compute: generation correctness (P <= S - 2 + beta)",
    faults=FAULTS, variants={"program": tuple(PROGRAMS), "cost": ("default",), "premise": tuple(PREMISES)},
    assumes=ASSUMES, guarantees=("generation",), model=model, doc=__doc__ or "",
)
