"""Step 3, asynchronous transfer: an atomic write becomes an issue event and a later completion.

Bounded model at shape n: the coarse design is a feasible step-2 schedule (buffers b_v, write
times t_v, last reads l_v, orders z), held as parameters; its scope is exactly step 2's
constraints. The fine program issues the copy of tile v at i_v through a mechanism — software
copy loop, copy instruction, or DMA controller — which lands at c_v = i_v + lat(mech). The issue
is internal (the copy engine makes its words visible only at completion: the declared
`atomic_landing` assumption); the completion matches the coarse write; the read matches the
coarse read only if it comes strictly after the completion (readiness, the hard condition).
The backward map sends the fine design to the step-2 design with t_v := c_v.
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from formloop.expr import all_of, const, decision, param, where
from formloop.library.chain import storage
from formloop.template import Constraint, Template
from formloop.verify.local import (
    Fault, LocalModel, Revision, Step, Timeline, feasibility_obligation, k1_obligation, k3_obligation,
    local_obligation, pairs, template_nodes,
)
from formloop.verify.proofgraph import Node

MECHANISMS = ("software", "instruction", "controller")

mech = decision("mech", (0, 1, 2), side="chip",
                doc="transfer mechanism: 0 software copy loop, 1 copy instruction, 2 DMA controller")
LAT = where(mech.eq(0), 3, where(mech.eq(1), 2, 1))           # steps from issue to completion
OVERHEAD = where(mech.eq(0), 2, where(mech.eq(1), 1, 0))      # issue slots taken from compute per tile
AREA = where(mech.eq(2), 4, 0)                                  # chip area of a controller (model units)

PROGRAMS = {
    "default": "for each tile v: issue copy(v -> b[v]) at i[v] via mech; complete at i[v]+lat(mech); "
               "wait for completion of v; read b[v] at l[v]",
    "wait_all": "for each tile v: issue copy(v -> b[v]) at i[v] via mech; complete at i[v]+lat(mech); "
                "wait for every completion issued so far; read b[v] at l[v]",
}
FAULTS = {
    "read_before_complete": Fault("read_before_complete", 3, "the reader waits for the issue, not the completion",
                                  "step_matching.read"),
}
COSTS = ("default", "no_area")
ASSUMES = ("atomic_landing",)


def coarse_write(v: int):
    return param(f"t{v}", lower=0, doc=f"coarse write time of tile {v}")


EARLIEST = -3  # a copy may be issued in a prologue before time 0, at most its latency early


@lru_cache(maxsize=64)
def template(n: int, rev: Revision = Revision()) -> Template:
    H = storage.horizon(n)
    nm = storage.names(n)
    i = {v: decision(f"i{v}", range(EARLIEST, H + 1), doc=f"issue time of the copy of tile {v}") for v in range(n)}
    b = {v: param(nm["b"][v], lower=0, doc=f"coarse buffer of tile {v}") for v in range(n)}
    t = {v: coarse_write(v) for v in range(n)}
    l = {v: param(nm["l"][v], lower=0, doc=f"last read of tile {v}") for v in range(n)}
    z = {uv: param(name, lower=0, doc="coarse order of two tiles sharing a buffer") for uv, name in nm["z"].items()}
    nbuf = storage.nbuf
    # The scope is step 2's specification (exact separation), not whatever revision of step 2 is
    # being checked: whether step 2's constraints stay inside it is a composition side condition.
    spec = [*storage.separation(b, t, l, z, n, storage.TAU), *storage.order(t, l, n)]
    scope = [Constraint(f"coarse_{c.name}", c.expr, "scope", "the coarse design is a feasible step-2 design")
             for c in spec]
    scope += [Constraint(f"coarse_menu{v}", (b[v] <= 2) & (b[v] <= nbuf - 1) & (t[v] <= H) & (l[v] <= H), "scope",
                         "coarse values lie in step 2's menus") for v in range(n)]
    scope += [Constraint(f"coarse_z{u}_{v}", z[u, v] <= 1, "scope", "z is binary") for u, v in pairs(n)]
    c = {v: i[v] + LAT for v in range(n)}
    ready = (lambda v: i[v] + 1 <= l[v]) if rev.fault == "read_before_complete" else (lambda v: c[v] + 1 <= l[v])
    landing = [Constraint(f"land{v}", t[v] <= c[v], "landing", "the copy lands after the buffer is free")
               for v in range(n)]
    readiness = [Constraint(f"ready{v}", ready(v), "readiness", "the read waits for the copy") for v in range(n)]
    pre = [Constraint(f"pre_{x.name}", x.expr, x.group, x.doc) for x in (*landing, *readiness)]
    hold = sum((l[v] - i[v] for v in range(n)), start=const(0))
    cost = hold + n * OVERHEAD + (0 if rev.cost == "no_area" else AREA)
    return Template(
        name=f"chain-3-transfer-n{n}", doc="issue and completion times and the transfer mechanism",
        decisions=(mech, *i.values()), params=(*b.values(), *t.values(), *l.values(), *z.values(), nbuf),
        scope=tuple(scope), constraints=(*landing, *readiness), preconditions=tuple(pre),
        cost=cost, unit="steps", terms={"hold": hold, "overhead": n * OVERHEAD, "area": AREA},
        options={"n": str(n), "program": rev.program},
    )


def backward_map(n: int) -> dict:
    """π: the step-2 design whose write times are the completions (buffers, reads, orders kept)."""
    return {f"t{v}": decision(f"i{v}", range(EARLIEST, storage.horizon(n) + 1)) + LAT for v in range(n)}


# -- replay ---------------------------------------------------------------------------------------

def simulate(w: dict, n: int, rev: Revision) -> Timeline:
    """Run issue/land/read events; simultaneous events are tried in both orders."""
    tl = Timeline()
    lat = (3, 2, 1)[w["mech"]]
    events = []
    for v in range(n):
        events += [(w[f"i{v}"], 0, "issue", v), (w[f"i{v}"] + lat, 1, "land", v), (w[f"l{v}"], 1, "read", v)]
    for first in ("land", "read"):
        mem: dict[int, int] = {}
        read_done: set[int] = set()
        for time, _, kind, v in sorted(events, key=lambda e: (e[0], e[1], e[2] != first)):
            buf = w[f"b{v}"]
            if kind == "land":
                twin = [u for tm, _, k, u in events if k == "land" and tm == time and u != v and w[f"b{u}"] == buf]
                if twin:
                    tl.flag("step_matching.land",
                            f"copies of tiles {v} and {twin[0]} land in buffer {buf} at the same time {time}")
                held = mem.get(buf)
                if held is not None and held != v and held not in read_done:
                    tl.flag("step_matching.land", f"copy of tile {v} lands at {time} over tile {held} in buffer {buf} "
                                                  "before its last read")
                if time < w[f"t{v}"]:
                    tl.flag("step_matching.land",
                            f"copy of tile {v} lands at {time}, before its buffer is free at {w[f't{v}']}")
                mem[buf] = v
            elif kind == "read":
                if mem.get(buf) != v:
                    tl.flag("step_matching.read",
                            f"read of tile {v} at {time} finds {mem.get(buf, 'nothing')} in buffer {buf}"
                                                  f" (issued {w[f'i{v}']}, lands {w[f'i{v}'] + lat})")
                read_done.add(v)
    if any(w[f"i{v}"] + lat > storage.horizon(n) for v in range(n)):
        tl.flag("progress", "a copy lands after the horizon")
    if any(w[f"i{v}"] + lat > w[f"l{n - 1}"] for v in range(n)):
        tl.flag("completion", "a copy is still in flight after the last read")
    tl.events.extend((tm, kind, {"tile": v, "buffer": w[f"b{v}"], "mech": MECHANISMS[w["mech"]]})
                     for tm, _, kind, v in sorted(events))
    return tl


# -- obligations ----------------------------------------------------------------------------------

def model(n: int, revs: Mapping[int, Revision]) -> LocalModel:
    rev, coarse_rev = revs.get(3, Revision()), revs.get(2, Revision())
    t = template(n, rev)
    p, cp = f"step3@n{n}", f"step2@n{n}"
    nodes = (*template_nodes(p, t),
             Node(f"{p}.program", "definition", PROGRAMS[rev.program] + f"\nn={n}" + rev.fault_text(FAULTS)),
             Node(f"{p}.backward_map", "definition", "pi: t[v] := i[v] + lat(mech); b, l, z kept"))
    prog = (f"{p}.program", f"{p}.decisions", f"{cp}.program")
    pre = (f"{p}.pre",)
    replay = lambda w: simulate(w, n, rev).replay()  # noqa: E731
    I = lambda e, v: e[f"i{v}"]  # noqa: E731
    C = lambda e, v: e[f"i{v}"] + LAT  # noqa: E731
    B = lambda e, v: e[f"b{v}"]  # noqa: E731
    Tw = lambda e, v: e[f"t{v}"]  # noqa: E731
    L = lambda e, v: e[f"l{v}"]  # noqa: E731

    def init(e):
        return all_of(*[C(e, v) >= 0 for v in range(n)])

    def issue(e):
        return all_of(*[C(e, v) > I(e, v) for v in range(n)])

    def land(e):
        # The completion matches the coarse write: it lands no earlier than the buffer is free and
        # never over a tile that landed earlier in the same buffer and is still to be read.
        over = lambda u, v: all_of(B(e, u).eq(B(e, v)), C(e, u) <= C(e, v), C(e, v) <= L(e, u))  # noqa: E731
        return all_of(*[all_of(Tw(e, v) <= C(e, v), *[~over(u, v) for u in range(n) if u != v]) for v in range(n)])

    def read(e):
        clobbered = lambda u, v: all_of(B(e, u).eq(B(e, v)), C(e, v) <= C(e, u), C(e, u) <= L(e, v))  # noqa: E731
        return all_of(*[all_of(C(e, v) < L(e, v), *[~clobbered(u, v) for u in range(n) if u != v]) for v in range(n)])

    def rank(e):
        return all_of(*[(I(e, v) >= EARLIEST) & (C(e, v) - I(e, v) >= 1) for v in range(n)])

    def progress(e):
        return all_of(*[C(e, v) <= storage.horizon(n) for v in range(n)])

    def completion(e):
        return all_of(*[C(e, v) <= L(e, n - 1) for v in range(n)])

    ob = lambda name, cond, text, claim, prem=prog, assume=t.preconditions: local_obligation(  # noqa: E731
        3, t, name, cond, text, prem, claim, replay, n, assume)
    atomic = ("assume.atomic_landing",)
    coarse = storage.template(n, coarse_rev)
    obligations = (
        ob("initialization", "initialization", "no copy lands before the start", init, (*prog, *pre)),
        ob("step_matching.issue", "step_matching", "an issue is internal: nothing is visible before the completion",
           issue, (*prog, *atomic)),
        ob("step_matching.land", "step_matching", "a completion lands inside the interval step 2 reserved for its tile",
           land, (*prog, *pre, *atomic, f"{p}.C.landing")),
        ob("step_matching.read", "step_matching", "a read comes strictly after its copy completed (readiness)",
           read, (*prog, *pre)),
        ob("rank", "rank", "issues make no coarse progress and each is followed by its completion", rank),
        ob("progress", "progress", "every issued copy completes within the horizon", progress, (*prog, *pre)),
        ob("completion", "completion", "no copy is in flight after the last read", completion, (*prog, *pre)),
        feasibility_obligation(3, t, p, coarse, cp, backward_map(n), f"{p}.backward_map", n),
        k1_obligation(3, t, p, ["landing", "readiness"], n),
        k3_obligation(3, t, p, {"mech": 2, **{f"i{v}": coarse_write(v) - 1 for v in range(n)}}, n),
    )
    return LocalModel(t, nodes, obligations)


STEP = Step(
    number=3, name="asynchronous transfer",
    coarse="an atomic write", fine="an issue event and a later completion",
    hard="step matching of a read: readiness",
    faults=FAULTS, variants={"program": tuple(PROGRAMS), "cost": COSTS, "premise": ("default",)},
    assumes=ASSUMES, guarantees=("readiness",), model=model, doc=__doc__ or "",
)
