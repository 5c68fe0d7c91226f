"""Index obligations of the attention walks over key positions: for every length and every tile
and split size at once (Z3, all symbolic).

The walks are data (built by the attention programs in formloop.library):
  tile loop  a kernel's loop over one key range: starts lo, lo+T, … while < hi; lane c touches
             start + c when below a cut (or always, unmasked). Lemma: it touches [lo, min(lo +
             T·⌈(hi−lo)/T⌉, cut)), each position by one (start, lane).
  SplitWalk  decode: ⌈L/T⌉ tiles cut into KS splits of per = ⌈tiles/KS⌉ consecutive tiles; split j
             walks [lo_j, hi_j), lo_j = min(L, j·per·T), hi_j = min(L, j·per·T + per·T), masked at hi_j.
  CausalWalk causal prefill: q-block b holds rows [b·Br, b·Br + Br) ∩ [0, L); phase 1 walks
             [0, b·Br) unmasked in Bc tiles, phase 2 walks [b·Br, min(L, b·Br + Br)) masked at k <= q.
Obligations (each the negation of the claim; unsatisfiable = proved for every L >= 1, and for
the walks every T, KS, Br, Bc >= 1):
  tile-loop             the lemma above (symbolic lo, hi, cut; one query per tile size)
  kv-coverage, kv-exact-once, kv-no-phantom   every key in [0, L) in exactly one split; none outside
  split-first-nonempty  split 0 holds a key, so the merge's largest max is finite; trailing splits may be
                        empty (softmax_merge's merge-empty: an empty split's partial leaves the merge unchanged)
  rope-coverage, rope-exact-once, rope-no-phantom, rope-no-stale   decode with the rope inside (SplitWalk.rope_sources):
                        split j reads the cache over [lo_j, min(hi_j, L − 1)) in whole tiles and the partial
                        tile masked at the cut (in the loop, or after it alone on a paged cache's copy-engine
                        path), and the split that holds L − 1 folds the new key from registers; every key in
                        [0, L) comes from exactly one of those sources, none past L, and no cache read of L − 1
  causal-coverage, causal-exact-once, causal-no-future   every (q, k) with k <= q < L visited once;
                        no pair with k > q or k >= L contributes
  head-packing, paged-address, tile-in-page   GQA heads packed onto programs one-to-one; a paged
                        key's slot lies in the cache; a copy-engine tile's keys share one page
Index ranges compose by the tile-loop lemma: each split (or phase) is a tile loop. A satisfiable
query gives a witness (at the design's tile sizes when the defect occurs there, smallest length
first); it becomes a counterexample only when the replay interpreter (formloop.verify.attention_replay), running the
walk's loops (or the lemma's arithmetic) on those numbers, shows the defect. Every query goes
through `formloop.verify.solver.decide`, the one place a Z3 answer becomes a verdict.

Why not `verify.index.check_partition`: the walks are proved with the tile size and the split
count symbolic (one query for every T and KS, not one per menu value), and they also state
no-phantom (no key at or past L is read), which a partition of [0, L) does not."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import z3

from formloop.verify.attention_replay import (
    Loop, WalkReplay, replay_causal_walk, replay_head_packing, replay_paged_address, replay_rope_walk,
    replay_split_walk, replay_tile_in_page, replay_tile_loop,
)
from formloop.verify.outcome import ObligationResult
from formloop.verify.solver import Query, Question, Replay, decide

KV_OBLIGATIONS = ("kv-coverage", "kv-exact-once", "kv-no-phantom", "split-first-nonempty")
ROPE_OBLIGATIONS = ("rope-coverage", "rope-exact-once", "rope-no-phantom", "rope-no-stale")
CAUSAL_OBLIGATIONS = ("causal-coverage", "causal-exact-once", "causal-no-future")
CONFIRMS = {"coverage": {"missing"}, "exact-once": {"duplicate"}, "no-phantom": {"outside"},
            "no-future": {"future", "outside"}, "first-nonempty": {"empty-split"}, "lemma": {"lemma"},
            "no-stale": {"stale"}}


def _min(a, b):
    return z3.If(a <= b, a, b)


# --- walks as data ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SplitWalk:
    """Decode's walk. Faults: `floor_tiles` (⌊L/T⌋ tiles: the tail is dropped), `overlap` (split j > 0
    starts `overlap` tiles early), `guarded` False (no mask at hi_j: whole tiles are read)."""

    floor_tiles: bool = False
    overlap: int = 0
    guarded: bool = True
    # the walk with the rope inside (attention_decode_jit ROPE; rope_sources, z3_rope): the cache is walked over
    # [0, L − 1), its whole tiles and its partial tile masked at the cut (one masked loop; on a paged cache's
    # copy-engine path the partial tile runs after the loop, alone: the same keys from the same tiles), the new
    # key folded from registers by its split. Faults:
    # "uncut" (the cache walk runs to hi_j, L − 1 included), "partial-dropped" (the partial tile is skipped)
    rope_fault: str | None = None

    def per_split(self, L: int, T: int, KS: int) -> int:
        tiles = L // T if self.floor_tiles else -(-L // T)
        return -(-tiles // KS)

    def ranges(self, L: int, T: int, KS: int) -> list[tuple[int, int]]:
        per = self.per_split(L, T, KS)
        return [(min(L, max(0, j * per * T - (self.overlap * T if j else 0))), min(L, j * per * T + per * T))
                for j in range(KS)]

    def loops(self, L: int, T: int, KS: int) -> list[Loop]:
        return [Loop(lo, hi, T, hi if self.guarded else None) for lo, hi in self.ranges(L, T, KS)]

    def rope_sources(self, L: int, T: int, KS: int) -> list[tuple[Loop, Loop | None, bool]]:
        """Per split, as the kernel runs it: (whole tiles, the partial tile or None, folds the new key)."""
        out = []
        for lo, hi in self.ranges(L, T, KS):
            hc = hi if self.rope_fault == "uncut" else min(hi, L - 1)
            full = lo + max(hc - lo, 0) // T * T
            partial = Loop(full, hc, T, hc) if full < hc and self.rope_fault != "partial-dropped" else None
            out.append((Loop(lo, full, T), partial, lo <= L - 1 < hi))
        return out

    def z3_rope(self, j, k, L, T, per) -> tuple:
        """(tiles, partial tile, new key): split j reads key k from that source (the kernel's formulas)."""
        lo, hi = self.z3_range(j, L, T, per)
        hc = hi if self.rope_fault == "uncut" else _min(hi, L - 1)
        full = lo + T * (z3.If(hc > lo, hc - lo, 0) / T)
        tiles = z3.And(lo <= k, k < full)
        partial = z3.And(full <= k, k < hc) if self.rope_fault != "partial-dropped" else z3.BoolVal(False)
        new = z3.And(lo <= L - 1, L - 1 < hi, k == L - 1)
        return tiles, partial, new

    def z3_range(self, j, L, T, per) -> tuple:
        start = j * per * T - z3.If(j > 0, self.overlap * T, 0)
        lo = _min(L, z3.If(start > 0, start, 0))
        hi = _min(L, j * per * T + per * T)
        if not self.guarded:  # an unmasked split reads whole tiles (tile-loop lemma, no cut)
            n = (hi - lo + T - 1) / T
            hi = z3.If(lo < hi, lo + T * n, hi)
        return lo, hi


@dataclass(frozen=True)
class CausalWalk:
    """Prefill's walk. `shift` moves the causal bound: key k counts for query q when k <= q + shift
    (0 is correct)."""

    shift: int = 0

    def blocks(self, L: int, Br: int, Bc: int) -> list[tuple[int, list[Loop], list[Loop]]]:
        return [(r0, [Loop(0, r0, Bc)], [Loop(r0, min(L, r0 + Br), Bc, self.shift)]) for r0 in range(0, L, Br)]


# --- obligations -----------------------------------------------------------------------------------

def _decide(name: str, facts: Sequence, report: Sequence, replay: Callable[[dict], WalkReplay], kind: str,
            timeout_s: float, details: dict, *, prefer: Sequence = (),
            extra: Mapping[str, z3.ExprRef] | None = None) -> ObligationResult:
    """One obligation whose negation is `facts`: a witness reports `report` (smallest first, at the
    `prefer` equalities when a model has them) and the `extra` terms by name; it counts only when
    `replay` shows a defect of `kind`."""
    symbols = {**{str(v): v for v in report}, **(extra or {})}

    def confirmed(w: dict) -> Replay:
        rep = replay(w)
        return Replay((name,) if rep.kinds & CONFIRMS[kind] else (), (), rep.text)

    how = Question(name, name, timeout_s, smallest=tuple(str(v) for v in report), details=details)
    return decide(Query(list(facts), symbols, hints=(tuple(prefer),) if prefer else ()), confirmed, how)


def check_tile_loop(tile: int, *, masked: bool = True, timeout_s: float = 10.0) -> ObligationResult:
    """The tile-loop lemma at one tile size T (one query per menu value: with T symbolic the query
    is nonlinear and Z3 times out): for every lo <= hi and cut the loop touches exactly
    [lo, min(lo + T·⌈(hi−lo)/T⌉, cut)) (no cut when unmasked), each position by one (start, lane)."""
    lo, hi, cut, k, i1, c1, i2, c2, n = z3.Ints("lo hi cut k i1 c1 i2 c2 starts")
    facts = [lo >= 0, hi >= lo, tile * (n - 1) < hi - lo, hi - lo <= tile * n]
    end = lo + tile * n
    bound = _min(end, cut) if masked else end

    def touches(i, c):
        return z3.And(i >= 0, lo + i * tile < hi, c >= 0, c < tile, k == lo + i * tile + c,
                      k < cut if masked else True)
    own_i, own_c = (k - lo) / tile, (k - lo) % tile  # the backward map: the one (start, lane) that holds k
    in_range = z3.And(k >= lo, k < bound)
    facts.append(z3.Or(z3.And(in_range, z3.Not(touches(own_i, own_c))),
                       z3.And(touches(i1, c1), z3.Not(in_range)),
                       z3.And(touches(i1, c1), touches(i2, c2), z3.Or(i1 != i2, c1 != c2))))
    replay = lambda w: replay_tile_loop(w["lo"], w["hi"], tile, w["cut"] if masked else None, w["k"])  # noqa: E731
    return _decide(f"tile-loop[T={tile}{'' if masked else ',unmasked'}]", facts, (hi, k), replay, "lemma",
                   timeout_s, {"tile": tile, "masked": masked, "scope": "0 <= lo <= hi, every cut"},
                   extra={"lo": lo, "cut": cut})


def check_split_walk(walk: SplitWalk = SplitWalk(), *, obligations: Sequence[str] = KV_OBLIGATIONS,
                     prefer: tuple[int, int] | None = None, timeout_s: float = 10.0) -> list[ObligationResult]:
    """The decode walk's obligations for every L, T, KS >= 1. `prefer` = (T, KS) of a design: witnesses
    there when possible."""
    out = []
    for ob in obligations:
        L, k, T, KS, per, tiles, j1, j2 = z3.Ints("L k T KS per_split tiles j1 j2")
        facts = [L >= 1, T >= 1, KS >= 1]
        facts += [tiles == L / T] if walk.floor_tiles else [T * (tiles - 1) < L, L <= T * tiles]
        facts += [KS * (per - 1) < tiles, tiles <= KS * per]

        def inside(j):
            lo, hi = walk.z3_range(j, L, T, per)
            return z3.And(j >= 0, j < KS, lo <= k, k < hi)
        if ob == "kv-coverage":  # the backward map names the one split that should hold k
            facts += [k >= 0, k < L, z3.Not(inside((k / T) / per)), z3.Not(inside(j1))]
        elif ob == "kv-exact-once":
            facts += [k >= 0, k < L, inside(j1), inside(j2), j1 != j2]
        elif ob == "kv-no-phantom":
            facts += [z3.Or(k < 0, k >= L), inside(j1)]
        elif ob == "split-first-nonempty":
            lo0, hi0 = walk.z3_range(0, L, T, per)
            facts += [lo0 >= hi0]
        else:
            raise ValueError(f"unknown obligation {ob}; known: {KV_OBLIGATIONS}")
        if ob == "split-first-nonempty":
            replay = lambda w: _nonempty_replay(walk, w["L"], w["T"], w["KS"])  # noqa: E731
        else:
            replay = lambda w: replay_split_walk(  # noqa: E731
                w["L"], walk.loops(w["L"], w["T"], w["KS"]), focus=w["k"])
        want = [T == prefer[0], KS == prefer[1]] if prefer else []
        out.append(_decide(ob, facts, (L, k, T, KS), replay, ob.removeprefix("kv-").removeprefix("split-"),
                           timeout_s, {"scope": "every L, T, KS >= 1", "walk": walk.__dict__}, prefer=want))
    return out


def _nonempty_replay(walk: SplitWalk, L: int, T: int, KS: int) -> WalkReplay:
    lo, hi = walk.ranges(L, T, KS)[0]
    if lo >= hi:
        return WalkReplay(frozenset({"empty-split"}), f"at L={L}, T={T}, KS={KS} split 0 has no key: every split's "
                                                      f"max may be -inf and the merge's weights are NaN")
    return WalkReplay(frozenset(), f"at L={L}, T={T}, KS={KS} split 0 holds keys [{lo}, {hi})")


def check_rope_walk(walk: SplitWalk = SplitWalk(), *, obligations: Sequence[str] = ROPE_OBLIGATIONS,
                    prefer: tuple[int, int] | None = None, timeout_s: float = 10.0) -> list[ObligationResult]:
    """Decode with the rope inside, for every L, T, KS >= 1: each key of [0, L) from exactly one source (a split's
    whole tiles, its partial tile, or the new key L − 1 from registers by the split holding it), none past L, and
    no cache read of L − 1 (that row is written by the same launch). `prefer` = (T, KS) of a design."""
    out = []
    for ob in obligations:
        L, k, T, KS, per, tiles, j1, j2 = z3.Ints("L k T KS per_split tiles j1 j2")
        facts = [L >= 1, T >= 1, KS >= 1, T * (tiles - 1) < L, L <= T * tiles, KS * (per - 1) < tiles,
                 tiles <= KS * per]

        def sources(j):
            return [z3.And(j >= 0, j < KS, s) for s in walk.z3_rope(j, k, L, T, per)]

        def reads(j):
            return z3.Or(*sources(j))
        if ob == "rope-coverage":  # the backward map names the one split that should hold k
            facts += [k >= 0, k < L, z3.Not(reads((k / T) / per)), z3.Not(reads(j1))]
        elif ob == "rope-exact-once":
            a, b, c = sources(j1)
            facts += [k >= 0, k < L, z3.Or(z3.And(reads(j1), reads(j2), j1 != j2),
                                           z3.And(a, b), z3.And(a, c), z3.And(b, c))]
        elif ob == "rope-no-phantom":
            facts += [z3.Or(k < 0, k >= L), reads(j1)]
        elif ob == "rope-no-stale":
            a, b, _ = sources(j1)
            facts += [k == L - 1, z3.Or(a, b)]
        else:
            raise ValueError(f"unknown obligation {ob}; known: {ROPE_OBLIGATIONS}")
        replay = lambda w: replay_rope_walk(w["L"], walk.rope_sources(w["L"], w["T"], w["KS"]),  # noqa: E731
                                            focus=w["k"])
        want = [T == prefer[0], KS == prefer[1]] if prefer else []
        out.append(_decide(ob, facts, (L, k, T, KS), replay, ob.removeprefix("rope-"), timeout_s,
                           {"scope": "every L, T, KS >= 1", "walk": walk.__dict__}, prefer=want))
    return out


def check_causal_walk(walk: CausalWalk = CausalWalk(), *, obligations: Sequence[str] = CAUSAL_OBLIGATIONS,
                      aligned: bool = True, prefer: tuple[int, int] | None = None,
                      timeout_s: float = 10.0) -> list[ObligationResult]:
    """The causal walk's obligations for every L, Br, Bc >= 1 and every block, under the template's
    precondition that Bc divides Br (`aligned`; False drops it, to show it is needed)."""
    out = []
    for ob in obligations:
        L, b, q, k, Br, Bc, n1, n2, ratio = z3.Ints("L b q k Br Bc phase1_tiles phase2_tiles ratio")
        facts = [Br >= 1, Bc >= 1, L >= 1, b >= 0]
        if aligned:
            facts.append(Br == Bc * ratio)
        r0 = b * Br
        facts += [r0 < L, q >= r0, q < r0 + Br, q < L]
        facts += [Bc * (n1 - 1) < r0, r0 <= Bc * n1]  # phase 1: range(0, r0, Bc), unmasked (tile-loop lemma)
        hi = _min(L, r0 + Br)
        facts += [Bc * (n2 - 1) < hi - r0, hi - r0 <= Bc * n2]  # phase 2: range(r0, hi, Bc), masked per row
        in1 = z3.And(k >= 0, k < Bc * n1)
        in2 = z3.And(k >= r0, k < r0 + Bc * n2, k < _min(q + 1 + walk.shift, L))
        count = z3.If(in1, 1, 0) + z3.If(in2, 1, 0)
        if ob == "causal-coverage":
            facts += [k >= 0, k <= q, count == 0]
        elif ob == "causal-exact-once":
            facts += [k >= 0, k <= q, count >= 2]
        elif ob == "causal-no-future":
            facts += [z3.Or(k > q, k < 0, k >= L), count >= 1]
        else:
            raise ValueError(f"unknown obligation {ob}; known: {CAUSAL_OBLIGATIONS}")
        want = [Br == prefer[0], Bc == prefer[1]] if prefer else []
        replay = lambda w: replay_causal_walk(w["L"], w["Br"], walk.blocks(w["L"], w["Br"], w["Bc"]),  # noqa: E731
                                              focus=(w["q"], w["k"]))
        out.append(_decide(ob, facts, (L, q, k, Br, Bc), replay, ob.removeprefix("causal-"), timeout_s,
                           {"scope": "every L, Br, Bc >= 1 with Bc | Br" if aligned else "every L, Br, Bc >= 1",
                            "shift": walk.shift}, prefer=want))
    return out


def check_head_packing(packed: int, *, timeout_s: float = 10.0) -> ObligationResult:
    """GQA packing at QP = `packed` query heads per program (one query per menu value): program
    (a, g) runs query heads a·G + g·QP + r for r < QP, g < G/QP, and reads key/value head a. Claim,
    for every Hkv >= 1 and group G divisible by QP: each head h < Hkv·G is run by exactly one
    (a, g, r), and a = h // G (the grouped-query semantics)."""
    Hkv, G, h, a1, g1, r1, a2, g2, r2 = z3.Ints("Hkv G h a1 g1 r1 a2 g2 r2")
    facts = [Hkv >= 1, G >= 1, G % packed == 0, h >= 0, h < Hkv * G]

    def runs(a, g, r):
        return z3.And(a >= 0, a < Hkv, g >= 0, g * packed < G, r >= 0, r < packed, h == a * G + g * packed + r)
    own = (h / G, (h % G) / packed, (h % G) % packed)
    facts.append(z3.Or(z3.Not(runs(*own)), z3.And(runs(a1, g1, r1), a1 != h / G),
                       z3.And(runs(a1, g1, r1), runs(a2, g2, r2), z3.Or(a1 != a2, g1 != g2, r1 != r2))))
    replay = lambda w: replay_head_packing(w["Hkv"], w["G"], packed, w["h"])  # noqa: E731
    return _decide(f"head-packing[QP={packed}]", facts, (G, h, Hkv), replay, "lemma", timeout_s,
                   {"packed": packed, "scope": "every Hkv >= 1 and group G divisible by QP"})


def check_paged_address(*, timeout_s: float = 10.0) -> ObligationResult:
    """Paged cache: key k lives at slot table[k // P]·P + k % P. For every page size P >= 1, length and
    block table whose entry for k's page names a page of the cache (checked at launch), the slot is
    inside the cache and is the one the table names for k (its page and its offset)."""
    table = z3.Function("block_table", z3.IntSort(), z3.IntSort())
    L, k, pages, P = z3.Ints("L k pages P")
    entry = table(k / P)
    slot = entry * P + k % P
    facts = [L >= 1, k >= 0, k < L, pages >= 1, P >= 1, entry >= 0, entry < pages,
             z3.Not(z3.And(slot >= 0, slot < pages * P, slot / P == entry, slot % P == k % P))]
    replay = lambda w: replay_paged_address(w["k"], w["P"], w["pages"], w["entry"])  # noqa: E731
    return _decide("paged-address", facts, (L, k, P, pages), replay, "lemma", timeout_s,
                   {"scope": "every P >= 1, L >= 1, cache of >= 1 pages, block table in range"},
                   extra={"entry": entry})


def check_tile_in_page(tile: int, *, aligned: bool = True, timeout_s: float = 10.0) -> ObligationResult:
    """The copy-engine path of a paged cache moves a whole tile from one page: the tile starting at
    key t·T is read at rows (page of t·T, offset (t·T) % P) onward. For every page size P that T
    divides (the template's precondition; `aligned` False drops it) and every tile, each key k of
    the tile has the page of the tile's first key and the offset (t·T) % P + (k − t·T) = k % P: the
    slot the block table names for k (one query per tile size)."""
    P, m, t, k = z3.Ints("P m t k")
    first = t * tile
    facts = [m >= 1, t >= 0, k >= first, k < first + tile, P == tile * m if aligned else P >= 1,
             z3.Not(z3.And(first / P == k / P, first % P + (k - first) == k % P))]
    replay = lambda w: replay_tile_in_page(w["P"], w["t"], tile, w["k"])  # noqa: E731
    return _decide(f"tile-in-page[T={tile}]", facts, (P, k, t), replay, "lemma", timeout_s,
                   {"tile": tile, "scope": "every page size P divisible by T, every tile" if aligned else
                    "every page size P >= 1"})
