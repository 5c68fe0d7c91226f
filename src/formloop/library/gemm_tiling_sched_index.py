"""Index rules of the persistent and stream-K schedules (gemm_tiling_sched_kernel), declared once
as expressions, their obligations (proved for every size with Z3, `formloop.verify.cover`), the
faults they catch, and the replay interpreter a counterexample is run on.

  persistent  program p < P computes tiles p, p+P, ... below `tiles`; owner(t) = t mod P
  stream-K    T = tiles·I k-steps (I a tile), runs of c = ⌈T/P⌉: run p holds steps [p·c, min(T, p·c+c));
              step (t, k) is t·I + k; owner = ⌊(t·I+k)/c⌋
  fix-up      a tile is shared when q0 = ⌊t·I/c⌋ ≠ q1 = ⌊(t·I+I−1)/c⌋; every run with steps in a
              shared tile writes a partial to slot 2p + (0 if p·c ≥ t·I else 1); the merge (run by
              the last arriver m ∈ [q0, q1]) adds the partials of q0..q1 once each

Faults (each a plausible slip, each caught with a replayed trace):
  k-split-off-by-one      a run's end is p·c + c + 1: neighbouring runs overlap by one k-step
  skipped-tile            the persistent loop stops at tiles − 1: the last tile is never computed
  double-counted-partial  the merger adds its own accumulator to the sum of every slot (its own included)
  shared-slot             every partial goes to slot 2p: a run's first and last partials collide
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from formloop.errors import InvalidInput
from formloop.expr import ceildiv, const, floordiv, maximum, minimum, mod, param, where
from formloop.verify.cover import check_cover, check_fixup
from formloop.verify.outcome import ObligationResult
from formloop.verify.solver import Replay

tiles = param("tiles", doc="output tiles of the launch")
I = param("I", doc="k-steps of one tile, ceil(K / Tk)")  # noqa: E741
P = param("P", doc="programs of the launch")
p = param("p", lower=None, doc="a program")
t = param("t", lower=None, doc="an output tile")
k = param("k", lower=None, doc="a k-step of a tile")
m = param("m", lower=None, doc="the program that merges a shared tile (its last arriver)")
t2 = param("t_2", lower=None, doc="a second output tile (slot distinctness)")

FAULTS = {
    "k-split-off-by-one": "a stream-K run's end is one k-step too far (runs overlap)",
    "skipped-tile": "the persistent loop stops one tile early",
    "double-counted-partial": "the merger adds its own partial twice",
    "shared-slot": "a run's first and last partials share one workspace slot",
}


def stream_k_rules(fault: str | None = None) -> dict:
    total = tiles * I
    per = ceildiv(total, P)
    lo = p * per
    hi = minimum(total, lo + per + (1 if fault == "k-split-off-by-one" else 0))
    step = t * I + k
    t_lo = t * I
    q0, q1 = floordiv(t_lo, per), floordiv(t_lo + I - 1, per)
    shared = q0 < q1
    nonempty = maximum(lo, t_lo) < minimum(hi, t_lo + I)
    summed = where(shared & (q0 <= p) & (p <= q1), 1, 0)
    if fault == "double-counted-partial":
        summed = summed + where(shared & p.eq(m), 1, 0)
    slot = 2 * p + (const(0) if fault == "shared-slot" else where(lo >= t_lo, 0, 1))
    # (t, k) is the kernel's split of a step into tile and k-step: k < I by the segment walk.
    # Lemmas of the fix-up proofs (integer facts, each proved on its own by the checker): tile starts
    # are ordered, and a step inside run p's c-long window belongs to run p.
    lemmas = [~(t < t2) | (t_lo + I <= t2 * I), ~(t2 < t) | (t2 * I + I <= t_lo)]
    lemmas += [~((p * per <= x) & (x < p * per + per)) | floordiv(x, per).eq(p)
               for x in (t_lo, t_lo + I - 1, t2 * I, t2 * I + I - 1)]
    return {"member": (lo <= step) & (step < hi) & (k >= 0) & (k < I), "owner": floordiv(step, per),
            "lemmas": lemmas, "written": nonempty & shared,
            "summed": summed, "merger_ok": (q0 <= m) & (m <= q1), "slot": slot}


def persistent_rules(fault: str | None = None) -> dict:
    bound = tiles - 1 if fault == "skipped-tile" else tiles
    return {"member": (t >= p) & mod(t - p, P).eq(0) & (t < bound), "owner": mod(t, P)}


# --- the replay interpreter: the launch run step by step on concrete sizes -------------------------

def replay_persistent(w: Mapping[str, int], fault: str | None = None) -> Replay:
    n, progs = int(w["tiles"]), int(w["P"])
    stop = n - 1 if fault == "skipped-tile" else n
    visits: Counter = Counter()
    trace = []
    for q in range(progs):
        for tile in range(q, stop, progs):
            visits[tile] += 1
            trace.append(("tile", q, tile))
    return _judge({tile: [0] * visits[tile] for tile in visits}, n, 1, trace, "persistent")


def replay_stream_k(w: Mapping[str, int], fault: str | None = None) -> Replay:
    """Every run's segments, partial writes, arrivals (in program order) and the merges; then each
    tile's sum as a multiset of k-steps, judged against {0..I-1} once each."""
    n, steps, progs = int(w["tiles"]), int(w["I"]), int(w["P"])
    total = n * steps
    per = -(-total // progs)
    sums: dict[int, list[int]] = {}
    ws: dict[int, tuple[int, list[int]]] = {}
    arrivals: dict[int, list[tuple[int, list[int]]]] = {}
    trace: list[tuple] = []
    for q in range(progs):
        lo = q * per
        hi = min(total, lo + per + (1 if fault == "k-split-off-by-one" else 0))
        it = lo
        while it < hi:
            tile, first = it // steps, it - it % steps
            end = min(hi, first + steps)
            acc = list(range(it - first, end - first))
            trace.append(("segment", q, tile, it - first, end - first))
            owners = {s // per for s in range(first, first + steps)}
            if len(owners) == 1:
                sums.setdefault(tile, []).extend(acc)
                trace.append(("store", q, tile))
            else:
                slot = 2 * q + (0 if fault == "shared-slot" or q * per >= first else 1)
                ws[slot] = (tile, acc)
                arrivals.setdefault(tile, []).append((q, acc))
                trace.append(("write", q, tile, slot))
            it = end
    for tile, arr in arrivals.items():
        first = tile * steps
        q0, q1 = first // per, (first + steps - 1) // per
        merger, own = arr[-1]
        got: list[int] = []
        for q in range(q0, q1 + 1):
            slot = 2 * q + (0 if fault == "shared-slot" or q * per >= first else 1)
            held_tile, part = ws.get(slot, (None, []))
            got += part if held_tile == tile else [("stale", held_tile)]  # type: ignore[list-item]
        if fault == "double-counted-partial":
            got += own
        sums.setdefault(tile, []).extend(got)
        trace.append(("merge", merger, tile, tuple(range(q0, q1 + 1))))
    return _judge(sums, n, steps, trace, "stream-K")


def _judge(sums: Mapping[int, list], n: int, steps: int, trace: list, what: str) -> Replay:
    defects, notes = set(), []
    for tile in range(n):
        got = Counter(sums.get(tile, []))
        missing = [s for s in range(steps) if got[s] == 0]
        dup = sorted(s for s, c in got.items() if isinstance(s, int) and c > 1)
        stale = [s for s in got if not isinstance(s, int)]
        if missing:
            trace.append(("missing", tile, tuple(missing)))
            defects.add("missing")
            notes.append(f"tile {tile} never sums k-steps {missing}")
        if dup:
            defects.update(("duplicate", "miscounted"))
            notes.append(f"tile {tile} sums k-steps {dup} more than once")
        if stale:
            defects.update(("overwritten", "miscounted"))
            notes.append(f"tile {tile} reads a slot that another tile's partial overwrote")
    extra = sorted(tile for tile in sums if not 0 <= tile < n)
    if extra:
        defects.add("phantom")
        notes.append(f"tiles {extra} lie outside the {n} tiles")
    if {"missing", "duplicate"} & defects and "miscounted" not in defects:
        defects.add("miscounted")
    head = f"{what} launch of {n} tiles x {steps} k-steps: "
    return Replay(tuple(sorted(defects)), tuple(trace[-40:]), head + ("; ".join(notes) or "every k-step once"))


def obligations(*, fault: str | None = None, timeout_s: float = 10.0) -> list[ObligationResult]:
    """Exactly-once coverage of every tile (persistent) and every (tile, k-step) (stream-K), and the
    stream-K fix-up, for every tiles, I, P >= 1; with `fault` injected when given."""
    if fault is not None and fault not in FAULTS:
        raise InvalidInput("fault", fault, sorted(FAULTS))
    pr, sk = persistent_rules(fault), stream_k_rules(fault)
    out = check_cover("persistent", units=((t, tiles),), program=p, programs=P, member=pr["member"],
                      owner=pr["owner"], replay=lambda w: replay_persistent(w, fault), timeout_s=timeout_s)
    out += check_cover("stream-k", units=((t, tiles), (k, I)), program=p, programs=P, member=sk["member"],
                       owner=sk["owner"], replay=lambda w: replay_stream_k(w, fault), timeout_s=timeout_s)
    out += check_fixup("stream-k", tile=t, tiles=tiles, program=p, programs=P, merger=m, merger_ok=sk["merger_ok"],
                       written=sk["written"], summed=sk["summed"], slot=sk["slot"],
                       lemmas=sk["lemmas"], replay=lambda w: replay_stream_k(w, fault), timeout_s=timeout_s)
    return out
