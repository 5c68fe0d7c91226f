"""The replay interpreter: executes programs and traces on concrete matrices of product tokens.

It is the independent half of the trusted base and shares no code with the encoders (smt.py,
events.py): it builds its own warp programs, enforces barriers its own way, and judges results
by comparing token multisets with the definition C[i,j] = Σ_k A[i,k]·B[k,j]. A token is a triple
(i, k, j) for A[i,k]·B[k,j]; slot cells hold ("A", i, k) or ("B", k, j) values, or nothing.

Two kinds of program are interpreted:
- the slotted pipeline of a thread block (`replay_trace`, one given interleaving;
  `explore_interleavings`, every interleaving by exhaustive search over states), on a W×W
  output computed by W warps over R k-tiles of depth one; warp w loads A[w,u] and B[u,w];
- the tiled loop nest over M, N, K (`replay_tiling`): which elements of C receive which terms.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


def _term(i, k, j) -> str:
    return f"A[{i},{k}]·B[{k},{j}]"


# --- the slotted pipeline ------------------------------------------------------------------------

def _programs(S: int, P: int, beta: int, warps: int, phases: int, leading: bool) -> list[list[tuple]]:
    progs = []
    for w in range(warps):
        ops: list[tuple] = []
        u = 0
        while u < P and u < phases:
            ops.append(("load", w, u, u % S))
            u += 1
        for p in range(phases):
            nxt = p + P
            if nxt < phases:
                ops.append(("load", w, nxt, nxt % S))
            if leading:
                ops.append(("arrive", w, "A", p))
            ops.append(("compute", w, p, p % S))
            if beta == 1:
                ops.append(("arrive", w, "B", p))
        progs.append(ops)
    return progs


@dataclass
class _Machine:
    """Slot memory of one block: slots[s][0][w] is warp w's A cell, slots[s][1][w] its B cell."""

    warps: int
    slots: list = field(default_factory=list)
    acc: dict = field(default_factory=dict)
    defects: list = field(default_factory=list)

    def load(self, w: int, tile: int, slot: int) -> None:
        self.slots[slot][0][w] = ("A", w, tile)
        self.slots[slot][1][w] = ("B", tile, w)

    def compute(self, w: int, tile: int, slot: int) -> list[tuple]:
        """Accumulate C[w, j] for every j; return the defects of this read."""
        found = []
        for j in range(self.warps):
            a, b = self.slots[slot][0][w], self.slots[slot][1][j]
            self.acc.setdefault((w, j), []).append((a, b))
            for cell, expect, owner in ((a, ("A", w, tile), w), (b, ("B", tile, j), j)):
                if cell != expect:
                    kind = "uninitialized" if cell is None else ("overwritten" if _tile_of(cell) > tile else "stale")
                    found.append((kind, w, j, tile, slot, owner, cell, a, b))
        return found


def _tile_of(cell) -> int:
    return cell[2] if cell[0] == "A" else cell[1]


def _cell(cell) -> str:
    if cell is None:
        return "?"
    return f"A[{cell[1]},{cell[2]}]" if cell[0] == "A" else f"B[{cell[1]},{cell[2]}]"


def _pair(a, b) -> str:
    return f"{_cell(a)}·{_cell(b)}"


@dataclass(frozen=True)
class TraceReplay:
    """What one interleaving did: defect kinds, the account in words, a note per trace step."""

    kinds: frozenset
    text: str
    notes: tuple
    valid: bool = True


def replay_trace(trace, *, S: int, P: int, beta: int, warps: int, phases: int, leading: bool = True,
                 focus: frozenset | set = frozenset()) -> TraceReplay:
    """Execute `trace` (every event of every warp, in order) and say what went wrong, if anything.

    `kinds` collects every defect kind of every read (uninitialized, stale, overwritten); the
    account describes the first read whose defect is in `focus`, else the first defective read.
    The trace is first checked against the warp programs and the barrier rule; a trace that
    breaks either is reported invalid (kinds = {"invalid-trace"}) instead of being executed."""
    progs = _programs(S, P, beta, warps, phases, leading)
    events = [tuple(e) for e in trace]
    pcs = [0] * warps
    arrived: Counter = Counter()
    for n, ev in enumerate(events):
        w = ev[1]
        if not 0 <= w < warps or pcs[w] >= len(progs[w]) or progs[w][pcs[w]] != ev:
            expect = progs[w][pcs[w]] if 0 <= w < warps and pcs[w] < len(progs[w]) else "nothing"
            return _invalid(f"step {n}: {ev} is not warp {w}'s next operation (expected {expect})")
        if pcs[w] > 0 and progs[w][pcs[w] - 1][0] == "arrive":
            bar = progs[w][pcs[w] - 1][2:]
            if arrived[bar] < warps:
                return _invalid(f"step {n}: warp {w} passes barrier {bar[0]}{bar[1]} before every warp arrived")
        if ev[0] == "arrive":
            arrived[ev[2:]] += 1
        pcs[w] += 1
    if pcs != [len(p) for p in progs]:
        return _invalid("the trace ends before every warp finished its program")

    m = _Machine(warps, [[[None] * warps, [None] * warps] for _ in range(S)])
    notes, defects = [], []
    for ev in events:
        if ev[0] == "load":
            _, w, tile, slot = ev
            old = m.slots[slot][1][w]
            m.load(w, tile, slot)
            notes.append(f"writes {_cell(('A', w, tile))}, {_cell(('B', tile, w))} over {_cell(old)}"
                         if old is not None else "")
        elif ev[0] == "compute":
            found = m.compute(*ev[1:])
            notes.append("; ".join(f"sees {_cell(d[6])} ({d[0]})" for d in found))
            defects += found
        else:
            notes.append("")
    first = next((d for d in defects if d[0] in focus), defects[0] if defects else None)
    kinds, text = _judge(m, warps, phases, first)
    return TraceReplay(frozenset(kinds | {d[0] for d in defects}), text, tuple(notes))


def _invalid(why: str) -> TraceReplay:
    return TraceReplay(frozenset({"invalid-trace"}), f"invalid trace: {why}", (), valid=False)


def _judge(m: _Machine, warps: int, phases: int, first) -> tuple[set[str], str]:
    """Compare every C[i,j] with Σ_k A[i,k]·B[k,j] as token multisets."""
    kinds: set[str] = set()
    summary = []
    for (i, j), reads in sorted(m.acc.items()):
        got = Counter(tuple(x) for x in reads)
        want = Counter(((("A", i, k), ("B", k, j)) for k in range(phases)))
        missing, foreign = want - got, got - want
        if missing or foreign:
            summary.append(((i, j), missing, foreign))
    if first is None and not summary:
        return set(), f"every C[i,j] accumulates exactly its {phases} terms"
    if first is not None:
        kind, w, j, tile, slot, owner, cell, a, b = first
        kinds.add(kind)
        want = _term(w, tile, j)
        what = {"overwritten": f"slot {slot} was overwritten by warp {owner} before this read",
                "stale": f"warp {owner} has not yet loaded its part of k-tile {tile} into slot {slot}",
                "uninitialized": f"slot {slot} cell of warp {owner} was never written "
                                 "(reads of uninitialized slot elements)"}[kind]
        head = f"C[{w},{j}] accumulates {_pair(a, b)} instead of {want}: {what}"
    else:
        head = "results differ from the definition"
    for _, _, foreign in summary:
        for (a, b) in foreign:
            if a is None or b is None:
                kinds.add("uninitialized")
    parts = []
    for (i, j), missing, foreign in summary[:1]:
        n_miss, n_for = sum(missing.values()), sum(foreign.values())
        parts.append(f"C[{i},{j}]: {_count(n_miss, 'term')} missing ({_terms(missing)}), "
                     f"{_count(n_for, 'foreign term')} added ({_terms(foreign)})")
    if len(summary) > 1:
        parts.append(f"{len(summary)} of {warps * warps} elements of C are wrong")
    return kinds, head + ("; " + "; ".join(parts) if parts else "")


def _terms(tokens: Counter, limit: int = 3) -> str:
    shown = [_pair(a, b) for (a, b) in sorted(tokens.elements(), key=str)]
    return ", ".join(shown[:limit]) + (", …" if len(shown) > limit else "")


def _count(n: int, noun: str) -> str:
    words = {1: "one", 2: "two", 3: "three"}
    return f"{words.get(n, n)} {noun}{'' if n == 1 else 's'}"


def explore_interleavings(*, S: int, P: int, beta: int, warps: int, phases: int, leading: bool = True,
                          max_states: int = 2_000_000) -> dict[str, tuple]:
    """Execute every interleaving (depth-first over machine states, each state once) and return,
    for each defect kind some interleaving reaches, the first trace prefix that reaches it."""
    progs = _programs(S, P, beta, warps, phases, leading)
    init = (tuple([0] * warps), tuple((tuple([None] * warps), tuple([None] * warps)) for _ in range(S)))
    seen = {init}
    found: dict[str, tuple] = {}
    stack = [(init, ())]
    while stack:
        (pcs, slots), path = stack.pop()
        for w in range(warps):
            pc = pcs[w]
            if pc >= len(progs[w]):
                continue
            if pc > 0 and progs[w][pc - 1][0] == "arrive":
                bar = progs[w][pc - 1]
                if not all(_passed(progs[v], pcs[v], bar) for v in range(warps)):
                    continue
            op = progs[w][pc]
            new_slots = slots
            if op[0] == "load":
                _, _, tile, slot = op
                cells = [list(slots[slot][0]), list(slots[slot][1])]
                cells[0][w], cells[1][w] = ("A", w, tile), ("B", tile, w)
                new_slots = slots[:slot] + ((tuple(cells[0]), tuple(cells[1])),) + slots[slot + 1:]
            elif op[0] == "compute":
                _, _, tile, slot = op
                reads = [(slots[slot][0][w], ("A", w, tile))]
                reads += [(slots[slot][1][j], ("B", tile, j)) for j in range(warps)]
                for cell, expect in reads:
                    if cell != expect:
                        later = cell is not None and _tile_of(cell) > tile
                        kind = "uninitialized" if cell is None else ("overwritten" if later else "stale")
                        found.setdefault(kind, path + (op,))
            new_pcs = pcs[:w] + (pc + 1,) + pcs[w + 1:]
            state = (new_pcs, new_slots)
            if state not in seen:
                seen.add(state)
                if len(seen) > max_states:
                    raise RuntimeError(f"more than {max_states} states; shrink the bounded model")
                stack.append((state, path + (op,)))
    return found


def _passed(prog: list[tuple], pc: int, bar: tuple) -> bool:
    """Has the warp running `prog`, now at `pc`, executed its arrival at barrier `bar`?"""
    key = bar[2:]
    return any(op[0] == "arrive" and op[2:] == key for op in prog[:pc])


# --- the tiled loop nest -------------------------------------------------------------------------

@dataclass(frozen=True)
class AxisLoop:
    """One loop axis as the program runs it: `blocks` tiles of `tile` indices, tile b starting at
    b*stride; an access at index x happens only if x < extent when `guarded`."""

    extent: int
    tile: int
    stride: int
    blocks: int
    guarded: bool = True

    def indices(self) -> Counter:
        out: Counter = Counter()
        for b in range(self.blocks):
            for r in range(self.tile):
                x = b * self.stride + r
                if not self.guarded or x < self.extent:
                    out[x] += 1
        return out


@dataclass(frozen=True)
class TilingReplay:
    """Defects of a loop nest: `lines` holds (defect kind, axis, account) for each defect kind
    (missing, duplicate, outside, padding) seen along each axis."""

    kinds: frozenset
    text: str
    lines: tuple = ()

    def describe(self, kinds, axis: str | None = None) -> str:
        """The account of defects of `kinds` (along `axis` if it has any there), or a statement
        that there are none and what else was seen."""
        hits = [t for k, a, t in self.lines if k in kinds]
        on_axis = [t for k, a, t in self.lines if k in kinds and a == axis]
        if hits:
            return "; ".join(on_axis or hits)
        others = "; ".join(t for _, _, t in self.lines)
        shown = f" (it does show: {others})" if others else f": {self.text}"
        return f"replay shows no {' or '.join(sorted(kinds))} defect" + shown


def replay_tiling(m: AxisLoop, n: AxisLoop, k: AxisLoop, *, focus: tuple[str, int] | None = None) -> TilingReplay:
    """Which terms each C[i,j] receives from the loop nest over blocks (M, N) and k-tiles (K).

    The nest is a product of three independent loops, so the multiplicity of A[i,k]·B[k,j] in
    C[i,j] is rows(i)·cols(j)·ks(k); it must be 1 for every in-range (i, k, j) and there must be
    no access outside the extents. `focus` = (axis, index) names the element to describe first."""
    loops = {"M": m, "N": n, "K": k}
    counts = {a: loop.indices() for a, loop in loops.items()}
    at = {"M": 0, "N": 0, "K": 0}
    if focus is not None:
        at[focus[0]] = focus[1]
    order = sorted(loops, key=lambda a: focus is None or a != focus[0])
    lines: list[tuple[str, str, str]] = []

    def pick(axis: str, xs: list[int]) -> int:
        return at[axis] if at[axis] in xs else xs[0]

    for axis in order:
        c, extent = counts[axis], loops[axis].extent
        i, j, kk = at["M"], at["N"], at["K"]
        missing = [x for x in range(extent) if c.get(x, 0) == 0]
        extra = [x for x in range(extent) if c.get(x, 0) > 1]
        beyond = sorted(x for x in c if not 0 <= x < extent)
        if missing:
            x = pick(axis, missing)
            if axis == "K":
                eg = ", ".join(_term(i, y, j) for y in missing[:2]) + (", …" if len(missing) > 2 else "")
                lines.append(("missing", axis, f"C[{i},{j}] misses {_count(len(missing), 'reduction term')} ({eg}), "
                                               "as does every element of C"))
            else:
                cell = (x, j) if axis == "M" else (i, x)
                what = "rows" if axis == "M" else "columns"
                lines.append(("missing", axis, f"C[{cell[0]},{cell[1]}] receives none of its {k.extent} terms, e.g. "
                                               f"{_term(cell[0], 0, cell[1])} is missing ({len(missing)} {what} of C "
                                               "are never written)"))
        if extra:
            x = pick(axis, extra)
            ii, kx, jj = (x if axis == "M" else i), (x if axis == "K" else kk), (x if axis == "N" else j)
            times = {2: "twice", 3: "three times"}.get(c[x], f"{c[x]} times")
            lines.append(("duplicate", axis, f"C[{ii},{jj}] receives {_term(ii, kx, jj)} {times} ({len(extra)} indices "
                                       f"along {axis} are computed more than once)"))
        if beyond:
            x = pick(axis, beyond)
            if axis == "K":
                lines.append(("padding", axis, f"C[{i},{j}] accumulates padding term {_term(i, x, j)} "
                                               f"(k = {x} is beyond K = {extent})"))
            else:
                cell = (x, j) if axis == "M" else (i, x)
                what = "rows" if axis == "M" else "columns"
                lines.append(("outside", axis, f"a block writes C[{cell[0]},{cell[1]}], outside C "
                                               f"({m.extent}×{n.extent}); {len(beyond)} {what} beyond the edge "
                                               "are written"))
    if not lines:
        return TilingReplay(frozenset(), f"every C[i,j] of the {m.extent}×{n.extent}×{k.extent} GEMM receives "
                                         f"each of its {k.extent} terms exactly once")
    return TilingReplay(frozenset(k for k, _, _ in lines), "; ".join(t for _, _, t in lines), tuple(lines))
