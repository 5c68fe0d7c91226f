"""Step 5, shared resources: an untimed slot access becomes requests to banks, ports and queues.

Bounded model at shape n: one wave of n word requests (lane r reads word r·(stride+pad) of a
slot) goes through nb single-port banks, each with a request queue of depth Q, into a response
queue of depth Qr that the consumer drains (eagerly, or only after the whole wave is issued).
Transitions, interleaved: issue the next request into its bank's queue; serve the head of a bank
queue into the response queue; drain one response (the step that matches the coarse access).
Each cycle the arbiter grants banks in index order; a declared arbitration bound A (every
non-empty bank is granted within A cycles) is an assumption of the whole result.

The relation to step 4 is an inductive invariant: requests are conserved (queued + responses +
drained = issued), every queue stays within its depth, and a bank queue holds no more than was
issued to that bank. Step matching holds easily (conflict freedom: no port grants two requests in
one cycle); the weight is on progress — no reachable state is stuck before the wave is drained —
which needs eager draining or a response queue that holds the whole wave.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from functools import lru_cache

from formloop.expr import all_of, any_of, ceildiv, const, decision, floordiv, implies, minimum, mod, param, total, where
from formloop.template import Constraint, Template
from formloop.verify.local import (
    Fault, LocalModel, Revision, Step, Timeline, by_menu, k1_obligation, k3_obligation, local_obligation,
    template_nodes, variables,
)
from formloop.verify.proofgraph import Node

MAX_BANKS = 4
PORTS = 1

nb = decision("nb", (1, 2, 4), side="chip", doc="shared-memory banks")
Q = decision("Q", (1, 2, 4), side="chip", doc="request queue depth per bank")
Qr = decision("Qr", (1, 2, 4, 8), side="chip", doc="response queue depth")
eager = decision("eager", (0, 1), doc="1 if the consumer drains responses as they arrive")
pad = decision("pad", (0, 1), doc="words of padding per row (skews lanes across banks)")
stride = param("stride", doc="words between the addresses of consecutive lanes")
A = param("A", kind="chip", doc="declared arbitration bound: a non-empty bank is granted within A cycles")
qcap = param("qcap", kind="chip", doc="queue entries the chip provides (all bank queues plus the response queue)")

PROGRAMS = {
    "default": "issue r -> queue[bank(r)] if not full; each cycle grant banks in index order, one per port, "
               "while the response queue has room; drain a response if eager or the wave is issued",
    "round_robin": "issue r -> queue[bank(r)] if not full; each cycle grant banks round-robin from the last granted, "
                   "one per port, while the response queue has room; drain a response if eager or the wave is issued",
}
FAULTS = {
    "port_conflict": Fault("port_conflict", 5,
                           "the arbiter grants two queued requests of one single-port bank per cycle",
                           "step_matching.serve"),
    "deadlock_queue": Fault("deadlock_queue", 5, "the consumer ignores eager and drains only after the whole wave",
                            "progress"),
}
ASSUMES = ("arbitration",)
GUARANTEES = ("loads_land_before_barrier",)


def _odd(x):
    return (x - floordiv(x, 2) * 2).eq(1)


@lru_cache(maxsize=32)
def template(n: int, rev: Revision = Revision()) -> Template:
    x = stride + pad
    two_adic = where(_odd(x), 1, where(_odd(floordiv(x, 2)), 2, where(_odd(floordiv(x, 4)), 4, 8)))
    degree = ceildiv(n, floordiv(nb, minimum(two_adic, nb)))   # requests per bank in the worst bank
    no_deadlock = eager.eq(1) | (Qr >= n)
    cost = degree * A + where(eager.eq(0), n, 0)
    return Template(
        name=f"chain-5-resources-n{n}", doc="banks, ports and bounded queues under a declared arbitration bound",
        decisions=(nb, Q, Qr, eager, pad), params=(stride, A, qcap),
        scope=(Constraint("room", qcap >= 2, "scope", "at least one bank entry and one response entry"),),
        constraints=(
            Constraint("no_deadlock", no_deadlock, "flow", "drain eagerly or hold the whole wave"),
            Constraint("queues_fit", Q * nb + Qr <= qcap, "capacity", "queue entries the chip provides"),
        ),
        preconditions=(Constraint("pre_no_deadlock", no_deadlock, "flow", "no reachable stuck state"),),
        cost=cost, unit="cycles per wave", terms={"conflict_degree": degree},
        options={"n": str(n), "program": rev.program},
    )


# -- the queue system as expressions -----------------------------------------------------------------

class _State:
    def __init__(self, tag: str):
        self.I, self.R, self.D = variables(f"I_{tag} R_{tag} D_{tag}")
        self.q = list(variables(" ".join(f"q{b}_{tag}" for b in range(MAX_BANKS))))

    def symbols(self, tag: str) -> dict:
        return {f"I_{tag}": self.I, f"R_{tag}": self.R, f"D_{tag}": self.D,
                **{f"q{b}_{tag}": q for b, q in enumerate(self.q)}}


def _bank(e, r):
    return by_menu(e["nb"], nb.decision.menu, lambda c: mod(r * (e["stride"] + e["pad"]), c))


def _row(e, r):
    return by_menu(e["nb"], nb.decision.menu, lambda c: floordiv(r * (e["stride"] + e["pad"]), c))


def _banks(e, n):
    """Bank of every lane's word, built once per query (formula construction dominates the cost)."""
    return [_bank(e, r) for r in range(n)]


def _next_bank(banks, I):
    out = const(0)
    for r in reversed(range(len(banks))):
        out = where(I.eq(r), banks[r], out)
    return out


def _sel(qs, k):
    out = qs[0]
    for b in range(1, MAX_BANKS):
        out = where(k.eq(b), qs[b], out)
    return out


def _inv(e, banks, I, qs, R, D):
    n = len(banks)
    facts = [I >= 0, I <= n, D >= 0, R >= 0, R <= e["Qr"], (total(*qs) + R + D).eq(I)]
    for b in range(MAX_BANKS):
        issued_b = total(*[where((I > r) & banks[r].eq(b), 1, 0) for r in range(n)])
        facts += [qs[b] >= 0, qs[b] <= e["Q"], implies(e["nb"] <= b, qs[b].eq(0)), qs[b] <= issued_b]
    return all_of(*facts)


def _grants(e, qs, R, rev: Revision):
    g, used = [], const(0)
    for b in range(MAX_BANKS):
        one = (qs[b] > 0) & (R + used < e["Qr"])
        if rev.fault == "port_conflict":
            gb = where((qs[b] > 1) & (R + used + 1 < e["Qr"]), 2, where(one, 1, 0))
        else:
            gb = where(one, 1, 0)
        g.append(gb)
        used = used + gb
    return g


def _drain_enabled(e, n, s, rev: Revision):
    lazy_only = rev.fault == "deadlock_queue"
    return (s.R > 0) & (s.I.eq(n) if lazy_only else (e["eager"].eq(1) | s.I.eq(n)))


# -- replay: explore every reachable state of one concrete design --------------------------------

MAX_STATES = 200_000


def simulate(w: dict, n: int, rev: Revision) -> Timeline:
    nbv, Qv, Qrv, eg = int(w["nb"]), int(w["Q"]), int(w["Qr"]), int(w["eager"])
    x = int(w["stride"]) + int(w["pad"])
    bank = [(r * x) % nbv for r in range(n)]
    tl = Timeline()
    addr = {(r * x % nbv, r * x // nbv) for r in range(n)}
    if len(addr) < n:
        tl.flag("step_matching.data", "two lanes map to one (bank, row)")
    start = (0, (0,) * nbv, 0, 0)
    parent: dict = {start: None}
    todo = deque([start])
    while todo and len(parent) < MAX_STATES:
        s = todo.popleft()
        I, qs, R, D = s
        grants, used = [], 0
        for b in range(nbv):
            one = qs[b] > 0 and R + used < Qrv
            gb = 2 if (rev.fault == "port_conflict" and qs[b] > 1 and R + used + 1 < Qrv) else int(one)
            grants.append(gb)
            used += gb
        if max(grants, default=0) > PORTS:
            tl.flag("step_matching.serve", f"bank {grants.index(max(grants))} is granted {max(grants)} requests "
                                           "in one cycle "
                                           f"with {PORTS} port (queues {list(qs)}, responses {R})")
            _path(tl, parent, s)
        moves = []
        if I < n and qs[bank[I]] < Qv:
            q2 = list(qs)
            q2[bank[I]] += 1
            moves.append((f"issue r{I} -> bank {bank[I]}", (I + 1, tuple(q2), R, D)))
        for b in range(nbv):
            if qs[b] > 0 and R < Qrv:
                q2 = list(qs)
                q2[b] -= 1
                moves.append((f"serve bank {b}", (I, tuple(q2), R + 1, D)))
        lazy_only = rev.fault == "deadlock_queue"
        if R > 0 and (I == n if lazy_only else (eg == 1 or I == n)):
            moves.append(("drain", (I, qs, R - 1, D + 1)))
        if not moves and D < n:
            tl.flag("progress", f"stuck after {I} issues with queues {list(qs)} and {R} responses, {D} drained")
            _path(tl, parent, s)
        for label, s2 in moves:
            if s2 not in parent:
                parent[s2] = (s, label)
                todo.append(s2)
    return tl


def _path(tl: Timeline, parent: dict, s) -> None:
    if tl.events:
        return
    steps = []
    while parent[s] is not None:
        prev, label = parent[s]
        steps.append((label, s))
        s = prev
    for i, (label, st) in enumerate(reversed(steps)):
        tl.events.append((i, label, {"issued": st[0], "queues": list(st[1]), "responses": st[2], "drained": st[3]}))


# -- obligations ----------------------------------------------------------------------------------

def model(n: int, revs: Mapping[int, Revision]) -> LocalModel:
    rev = revs.get(5, Revision())
    t = template(n, rev)
    p = f"step5@n{n}"
    nodes = (*template_nodes(p, t),
             Node(f"{p}.program", "definition",
                  PROGRAMS[rev.program] + f"\nn={n} ports={PORTS}" + rev.fault_text(FAULTS)))
    prog = (f"{p}.program", f"{p}.decisions", f"step4@n{n}.program")
    pre = (f"{p}.pre",)
    replay = lambda w: simulate(w, n, rev).replay()  # noqa: E731

    def init(e):
        zero = [const(0)] * MAX_BANKS
        return _inv(e, _banks(e, n), const(0), zero, const(0), const(0))

    def issue(e):
        s = _State("s")
        bk = _banks(e, n)
        k = _next_bank(bk, s.I)
        enabled = (s.I < n) & (_sel(s.q, k) < e["Q"])
        after = [s.q[b] + where(k.eq(b), 1, 0) for b in range(MAX_BANKS)]
        return implies(_inv(e, bk, s.I, s.q, s.R, s.D) & enabled,
                       _inv(e, bk, s.I + 1, after, s.R, s.D)), s.symbols("s")

    def serve(e):
        s = _State("s")
        bk = _banks(e, n)
        g = _grants(e, s.q, s.R, rev)
        after = [s.q[b] - g[b] for b in range(MAX_BANKS)]
        return implies(_inv(e, bk, s.I, s.q, s.R, s.D),
                       all_of(*[gb <= PORTS for gb in g], _inv(e, bk, s.I, after, s.R + total(*g), s.D))), \
            s.symbols("s")

    def data(e):
        return all_of(*[_bank(e, r1).ne(_bank(e, r2)) | _row(e, r1).ne(_row(e, r2))
                        for r1 in range(n) for r2 in range(r1 + 1, n)])

    def drain(e):
        s = _State("s")
        bk = _banks(e, n)
        return implies(_inv(e, bk, s.I, s.q, s.R, s.D) & _drain_enabled(e, n, s, rev),
                       _inv(e, bk, s.I, s.q, s.R - 1, s.D + 1)), s.symbols("s")

    def rank(e):
        s = _State("s")
        bk = _banks(e, n)
        rk = lambda I, qs, D: 3 * n - 2 * I + total(*qs) - D  # noqa: E731
        k = _next_bank(bk, s.I)
        inv = _inv(e, bk, s.I, s.q, s.R, s.D)
        now = rk(s.I, s.q, s.D)
        issued = [s.q[b] + where(k.eq(b), 1, 0) for b in range(MAX_BANKS)]
        issue_ok = implies((s.I < n) & (_sel(s.q, k) < e["Q"]), rk(s.I + 1, issued, s.D) < now)
        served = lambda b: [s.q[c] - (1 if c == b else 0) for c in range(MAX_BANKS)]  # noqa: E731
        serve_ok = all_of(*[implies((s.q[b] > 0) & (s.R < e["Qr"]), rk(s.I, served(b), s.D) < now)
                            for b in range(MAX_BANKS)])
        drain_ok = implies(_drain_enabled(e, n, s, rev), rk(s.I, s.q, s.D + 1) < rk(s.I, s.q, s.D))
        return implies(inv, all_of(rk(s.I, s.q, s.D) >= 0, issue_ok, serve_ok, drain_ok)), s.symbols("s")

    def progress(e):
        s = _State("s")
        bk = _banks(e, n)
        k = _next_bank(bk, s.I)
        can_issue = (s.I < n) & (_sel(s.q, k) < e["Q"])
        can_serve = any_of(*[all_of(e["nb"] > b, s.q[b] > 0, s.R < e["Qr"]) for b in range(MAX_BANKS)])
        can_drain = _drain_enabled(e, n, s, rev)
        stuck = all_of(_inv(e, bk, s.I, s.q, s.R, s.D), s.D < n, ~any_of(can_issue, can_serve, can_drain))
        return ~stuck, s.symbols("s")

    def service(e):
        j, = variables("j")
        return implies((j >= 0) & (j < e["Q"]), (j + 1) * e["A"] <= e["Q"] * e["A"]), {"j": j}

    def completion(e):
        s = _State("s")
        bk = _banks(e, n)
        return implies(_inv(e, bk, s.I, s.q, s.R, s.D) & s.D.eq(n),
                       all_of(s.I.eq(n), s.R.eq(0), total(*s.q).eq(0))), s.symbols("s")

    ob = lambda name, cond, text, claim, prem=prog, assume=t.preconditions: local_obligation(  # noqa: E731
        5, t, name, cond, text, prem, claim, replay, n, assume)
    obligations = (
        ob("initialization", "initialization", "the empty system satisfies the invariant", init),
        ob("step_matching.issue", "step_matching", "an issue is internal and keeps the invariant", issue),
        ob("step_matching.serve", "step_matching",
           "a cycle's grants use at most one port per bank and keep the invariant",
           serve),
        ob("step_matching.data", "step_matching", "each lane's word lives at a distinct (bank, row)", data),
        ob("step_matching.drain", "step_matching", "a drain delivers one response and keeps the invariant", drain),
        ob("rank", "rank", "rank 3n - 2I + sum(q) - D is a natural number and falls on every transition", rank),
        ob("progress", "progress", "no reachable state is stuck before the wave is drained (no deadlock)",
           progress, (*prog, *pre)),
        ob("progress.service", "progress",
           "under the arbitration bound A a queued request is granted within Q*A cycles",
           service, (*prog, "assume.arbitration")),
        ob("completion", "completion", "when every response is drained, every request was issued and served once",
           completion),
        k1_obligation(5, t, p, ["flow"], n),
        k3_obligation(5, t, p, {"nb": 1, "Q": 1, "Qr": 1, "eager": 1, "pad": 0}, n),
    )
    return LocalModel(t, nodes, obligations)


STEP = Step(
    number=5, name="shared resources",
    coarse="an untimed slot access", fine="requests to banks, ports and bounded queues",
    hard="progress: no deadlock, and service under the declared arbitration bound",
    faults=FAULTS, variants={"program": tuple(PROGRAMS), "cost": ("default",), "premise": ("default",)},
    assumes=ASSUMES, guarantees=GUARANTEES, model=model, doc=__doc__ or "",
)
