"""Step 2, physical storage: a logical operand tile becomes an occupancy of a reusable buffer.

Bounded model at shape n: the n k-tiles v = 0..n-1 that step 1's accumulation consumes in order.
Each tile is written into buffer b_v at time t_v (its first destructive write) and last read at
l_v, in a horizon [0, H], H = 2n. Events at one time are unordered. Two tiles in one buffer are
ordered by z_uv (1: u before v) and must satisfy the separation inequalities of seed 000 §2.3.2,

    l_u + τ <= t_v + (H + τ)(1 - z_uv),      l_v + τ <= t_u + (H + τ) z_uv,

written once below (`separation`) and used both as MILP rows (solver) and as the verifier's
lifetime precondition. Step matching for a read is the lifetime condition: the buffer still holds
the value the coarse read consumes.
"""
from __future__ import annotations

from collections.abc import Mapping

from functools import lru_cache

from formloop.expr import all_of, any_of, decision, implies, param
from formloop.template import Constraint, Template
from formloop.verify.local import (
    Fault, LocalModel, Revision, Step, Timeline, k1_obligation, k3_obligation, local_obligation, pairs,
    template_nodes,
)
from formloop.verify.proofgraph import Node

BUFFERS = (0, 1, 2)
TAU = 1  # declared separation between the last read of one occupant and the next write

nbuf = param("nbuf", kind="chip", doc="buffers the chip provides for operand tiles")

PROGRAMS = {
    "default": "for each tile v: write(b[v]) at t[v]; read(b[v]) at l[v]; events at one time unordered",
}
FAULTS = {
    "early_overwrite": Fault("early_overwrite", 2, "the separation is declared with tau = 0: a buffer may be "
                             "rewritten in the same step as its last read", "step_matching.read", "premise"),
}
PREMISES = ("default",)


def horizon(n: int) -> int:
    return 2 * n


def names(n: int) -> dict[str, list]:
    return {"b": [f"b{v}" for v in range(n)], "t": [f"t{v}" for v in range(n)], "l": [f"l{v}" for v in range(n)],
            "z": {(u, v): f"z{u}_{v}" for u, v in pairs(n)}}


def separation(b: dict, t: dict, l: dict, z: dict, n: int, tau: int) -> list[Constraint]:
    """The two inequalities per pair of tiles that share a buffer (one expression, two readers)."""
    H = horizon(n)
    out = []
    for u, v in pairs(n):
        share = b[u].eq(b[v])
        out.append(Constraint(f"sep{u}_{v}_a", implies(share, l[u] + tau <= t[v] + (H + tau) * (1 - z[u, v])),
                              "separation", f"tiles {u},{v} share a buffer: {u} first when z = 1"))
        out.append(Constraint(f"sep{u}_{v}_b", implies(share, l[v] + tau <= t[u] + (H + tau) * z[u, v]),
                              "separation", f"tiles {u},{v} share a buffer: {v} first when z = 0"))
    return out


def order(t: dict, l: dict, n: int) -> list[Constraint]:
    out = [Constraint(f"ready{v}", t[v] + 1 <= l[v], "order", "a tile is read after it is written") for v in range(n)]
    out += [Constraint(f"seq{v}", l[v] + 1 <= l[v + 1], "order", "step 1 consumes tiles in order")
            for v in range(n - 1)]
    return out


@lru_cache(maxsize=64)
def template(n: int, rev: Revision = Revision()) -> Template:
    H = horizon(n)
    nm = names(n)
    b = {v: decision(nm["b"][v], BUFFERS, doc=f"buffer holding tile {v}") for v in range(n)}
    t = {v: decision(nm["t"][v], range(H + 1), doc=f"first destructive write of tile {v}") for v in range(n)}
    l = {v: decision(nm["l"][v], range(H + 1), doc=f"last read of tile {v}") for v in range(n)}
    z = {uv: decision(name, (0, 1), doc=f"1 if tile {uv[0]} occupies a shared buffer before tile {uv[1]}")
         for uv, name in nm["z"].items()}
    tau = 0 if rev.fault == "early_overwrite" else TAU
    sep, seq = separation(b, t, l, z, n, tau), order(t, l, n)
    cap = [Constraint(f"cap{v}", b[v] <= nbuf - 1, "capacity", "only nbuf buffers exist") for v in range(n)]
    pre = [Constraint(f"pre_{c.name}", c.expr, c.group, c.doc) for c in (*sep, *seq)]
    return Template(
        name=f"chain-2-storage-n{n}", doc="buffer assignment and order of tiles sharing a buffer",
        decisions=(*b.values(), *t.values(), *l.values(), *z.values()), params=(nbuf,),
        scope=(), constraints=(*sep, *seq, *cap), preconditions=tuple(pre),
        cost=l[n - 1], unit="steps", options={"n": str(n), "tau": str(tau)},
    )


# -- replay ---------------------------------------------------------------------------------------

def simulate(w: dict, n: int) -> Timeline:
    """Run the event list under both orders of simultaneous events (writes first, reads first)."""
    tl = Timeline()
    events = [(w[f"t{v}"], "write", v) for v in range(n)] + [(w[f"l{v}"], "read", v) for v in range(n)]
    for first in ("write", "read"):
        mem: dict[int, int] = {}
        read_done: set[int] = set()
        for time, kind, v in sorted(events, key=lambda e: (e[0], e[1] != first)):
            buf = w[f"b{v}"]
            if kind == "write":
                held = mem.get(buf)
                if held is not None and held != v and held not in read_done:
                    tl.flag("step_matching.write", f"write of tile {v} at {time} destroys tile {held} in buffer {buf} "
                                                   "before its last read")
                mem[buf] = v
            else:
                if mem.get(buf) != v:
                    tl.flag("step_matching.read",
                            f"read of tile {v} at {time} finds {mem.get(buf, 'nothing')} in buffer {buf}")
                read_done.add(v)
    reads = [v for _, _, v in sorted(e for e in events if e[1] == "read")]
    if reads != sorted(reads) or len({w[f"l{v}"] for v in range(n)}) < n:
        tl.flag("step_matching.order", f"tiles are read in the order {reads}, step 1 consumes 0..{n - 1}")
    if any(w[f"l{v}"] > horizon(n) or w[f"t{v}"] > horizon(n) for v in range(n)):
        tl.flag("progress", "an event lies outside the horizon")
    if any(w[f"l{v}"] > w[f"l{n - 1}"] for v in range(n)):
        tl.flag("completion", "a read happens after the last tile is consumed")
    tl.events.extend((tm, kind, {"tile": v, "buffer": w[f"b{v}"]}) for tm, kind, v in sorted(events))
    return tl


# -- obligations ----------------------------------------------------------------------------------

def model(n: int, revs: Mapping[int, Revision]) -> LocalModel:
    rev = revs.get(2, Revision())
    t = template(n, rev)
    p = f"step2@n{n}"
    nm = names(n)
    nodes = (*template_nodes(p, t),
             Node(f"{p}.program", "definition", PROGRAMS[rev.program] + f"\nn={n} H={horizon(n)}"))
    prog = (f"{p}.program", f"{p}.decisions", "step1.program")
    pre = (f"{p}.pre",)
    replay = lambda w: simulate(w, n).replay()  # noqa: E731
    B = lambda e, v: e[nm["b"][v]]  # noqa: E731
    T = lambda e, v: e[nm["t"][v]]  # noqa: E731
    L = lambda e, v: e[nm["l"][v]]  # noqa: E731

    def clobbers(e, u, v):
        """Tile u's write lands while tile v is live (v written, not yet last-read)."""
        return all_of(B(e, u).eq(B(e, v)), T(e, v) <= T(e, u), T(e, u) <= L(e, v))

    def init(e):
        return all_of(*[T(e, v) >= 0 for v in range(n)])

    def write(e):
        return ~any_of(*[clobbers(e, u, v) for u in range(n) for v in range(n) if u != v])

    def read(e):
        return all_of(*[all_of(T(e, v) < L(e, v), *[~clobbers(e, u, v) for u in range(n) if u != v])
                        for v in range(n)])

    def in_order(e):
        return all_of(*[L(e, v) < L(e, v + 1) for v in range(n - 1)])

    def rank(e):
        # Writes make no coarse progress; the rank (events not yet done, 2n at the start) drops by
        # one per event: every event has a time in the horizon, so each is done once.
        return all_of(*[(T(e, v) >= 0) & (L(e, v) >= 0) for v in range(n)])

    def progress(e):
        return all_of(*[(T(e, v) <= horizon(n)) & (L(e, v) <= horizon(n)) for v in range(n)])

    def completion(e):
        return all_of(*[L(e, v) <= L(e, n - 1) for v in range(n)])

    ob = lambda name, cond, text, claim, prem=prog, assume=t.preconditions: local_obligation(  # noqa: E731
        2, t, name, cond, text, prem, claim, replay, n, assume)
    obligations = (
        ob("initialization", "initialization", "no tile is live before the start; every buffer starts unowned", init),
        ob("step_matching.write", "step_matching", "a write never destroys a tile that is still to be read", write,
           (*prog, *pre)),
        ob("step_matching.read", "step_matching", "each read returns the tile the coarse read consumes (lifetime)",
           read, (*prog, *pre)),
        ob("step_matching.order", "step_matching", "reads happen in the order step 1 consumes tiles", in_order,
           (*prog, *pre)),
        ob("rank", "rank", "every event lowers the count of remaining events", rank),
        ob("progress", "progress", "every pending event lies in the horizon, so an unfinished run can step", progress),
        ob("completion", "completion", "when the last tile is read, every tile has been read once", completion,
           (*prog, *pre)),
        k1_obligation(2, t, p, ["separation", "order"], n),
        k3_obligation(2, t, p, {**{f"b{v}": 0 for v in range(n)}, **{f"t{v}": 2 * v for v in range(n)},
                                **{f"l{v}": 2 * v + 1 for v in range(n)}, **{nm["z"][uv]: 1 for uv in pairs(n)}}, n),
    )
    return LocalModel(t, nodes, obligations)


STEP = Step(
    number=2, name="physical storage",
    coarse="a logical operand tile", fine="an occupancy of a reusable buffer",
    hard="step matching of a read: lifetime (separation inequalities)",
    faults=FAULTS, variants={"program": tuple(PROGRAMS), "cost": ("default",), "premise": PREMISES},
    assumes=(), guarantees=("lifetime",), model=model, doc=__doc__ or "",
)
