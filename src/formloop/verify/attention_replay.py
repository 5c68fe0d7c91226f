"""The replay interpreter of the attention templates: executes their walks over KV positions and
their online-softmax arithmetic on concrete numbers.

It is the independent half of the attention proofs and shares no code with the encoders
(kv_cover.py, softmax_merge.py): it runs the loops a kernel runs (splits, tiles, lanes, masks) at
one concrete length and counts how often each (query, key) pair is visited, and it runs the
kernel's update and merge formulas in float64 with the real exp on a concrete row and compares the
result with softmax attention computed directly."""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# --- the online-softmax arithmetic ----------------------------------------------------------------


@dataclass(frozen=True)
class SoftmaxArithmetic:
    """The update and merge formulas a kernel uses, as data (a fault flips one flag).

    rescale_acc / rescale_sum: the tile step multiplies the output accumulator / the running sum by
    exp(m_old − m_new); stale_merge_max: the merge weighs split j by exp(m_j − M_old), the running
    max before split j was folded in, while the running sums are rescaled to the new max."""

    rescale_acc: bool = True
    rescale_sum: bool = True
    stale_merge_max: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SoftmaxReplay:
    output: float
    reference: float
    rel_error: float
    finite: bool
    text: str
    trace: tuple = ()


def _exp_or_zero(x: float) -> float:
    return 0.0 if x == -math.inf else math.exp(x)


def replay_softmax(arith: SoftmaxArithmetic, splits: Sequence[Sequence[Sequence[float]]],
                   values: Sequence[float]) -> SoftmaxReplay:
    """Run the kernel's arithmetic on a row given as splits → tiles → scores (values in the same
    order) and compare the output with Σ exp(s)·v / Σ exp(s)."""
    flat = [s for split in splits for tile in split for s in tile]
    if len(flat) != len(values) or not flat:
        raise ValueError("one value per score, and at least one score")
    trace, states, n = [], [], 0
    for j, split in enumerate(splits):
        m, l, o = -math.inf, 0.0, 0.0
        for t, tile in enumerate(split):
            m_new = max(m, max(tile))
            alpha = _exp_or_zero(m - m_new)  # exp2(-inf) = 0 on the first tile
            p = [math.exp(s - m_new) for s in tile]
            pv = sum(pi * values[n + i] for i, pi in enumerate(p))
            n += len(tile)
            l = (alpha * l if arith.rescale_sum else l) + sum(p)
            o = (alpha * o if arith.rescale_acc else o) + pv
            m = m_new
            trace.append(("tile", j, t, list(tile), m, l, o))
        states.append((m, l, o))
    M, L_, O = states[0]
    for j, (mj, lj, oj) in enumerate(states[1:], start=1):
        M_new = max(M, mj)
        w_run = math.exp(M - M_new)
        w_split = math.exp(mj - (M if arith.stale_merge_max else M_new))
        L_, O = w_run * L_ + w_split * lj, w_run * O + w_split * oj
        M = M_new
        trace.append(("merge", j, M, L_, O))
    out = O / L_ if L_ else math.nan
    top = max(flat)
    weights = [math.exp(s - top) for s in flat]
    ref = math.fsum(w * v for w, v in zip(weights, values)) / math.fsum(weights)
    finite = math.isfinite(out)
    rel = abs(out - ref) / max(abs(ref), 1e-300) if finite else math.inf
    shape = " | ".join(" ".join(str(list(t)) for t in split) for split in splits)
    verdict = "matches" if finite and rel <= 1e-9 else "differs from"
    text = (f"row with scores {shape} (splits | tiles) and values {list(values)}: the kernel's arithmetic gives "
            f"{out:.12g}, which {verdict} softmax attention {ref:.12g} (relative error {rel:.3g})")
    return SoftmaxReplay(out, ref, rel, finite, text, tuple(trace))


# --- walks over key positions ---------------------------------------------------------------------


@dataclass(frozen=True)
class Loop:
    """One tile loop as a kernel runs it: starts lo, lo+tile, … while < hi; lane c of a start touches
    position start + c when it is below `cut` (None: no mask)."""

    lo: int
    hi: int
    tile: int
    cut: int | None = None

    def positions(self) -> list[int]:
        out = []
        for start in range(self.lo, self.hi, self.tile):
            out += [start + c for c in range(self.tile) if self.cut is None or start + c < self.cut]
        return out


@dataclass(frozen=True)
class WalkReplay:
    """What a walk did: defect kinds (missing, duplicate, outside, future) and the account."""

    kinds: frozenset
    text: str
    visits: int = 0


def replay_split_walk(length: int, loops: Sequence[Loop], *, focus: int | None = None) -> WalkReplay:
    """One query row of decode: every split's loop over the key positions [0, length)."""
    counts: Counter = Counter()
    origin: dict[int, list[int]] = {}
    for j, loop in enumerate(loops):
        for k in loop.positions():
            counts[k] += 1
            origin.setdefault(k, []).append(j)
    missing = [k for k in range(length) if counts[k] == 0]
    dup = [k for k in range(length) if counts[k] > 1]
    outside = sorted(k for k in counts if not 0 <= k < length)
    lines = []
    pick = lambda xs: focus if focus in xs else xs[0]  # noqa: E731
    if missing:
        k = pick(missing)
        lines.append(("missing", f"key {k} of {length} is read by no split ({len(missing)} keys are dropped from the "
                                 f"softmax)"))
    if dup:
        k = pick(dup)
        lines.append(("duplicate", f"key {k} is read by splits {origin[k]} ({len(dup)} keys count more than once "
                                   f"in the softmax)"))
    if outside:
        k = pick(outside)
        lines.append(("outside", f"split {origin[k][0]} reads key {k}, beyond the {length} keys of the cache"))
    return _walk(lines, f"every key of {length} is read by exactly one split", sum(counts.values()))


def replay_rope_walk(length: int, splits: Sequence[tuple[Loop, Loop | None, bool]], *,
                     focus: int | None = None) -> WalkReplay:
    """One query row of decode with the rope inside (the new key, position length − 1, from registers): per
    split its cache tiles (a loop of whole tiles), its partial tile (or None) and whether it folds the new key.
    Defects: a key read by no source, by two, a key past the row, and a cache read of the row length − 1
    (the stale row: the new key is written there by this very launch)."""
    counts: Counter = Counter()
    origin: dict[int, list[str]] = {}
    stale = []
    for j, (tiles, partial, owns) in enumerate(splits):
        for name, loop in (("tiles", tiles), ("partial tile", partial)):
            for k in loop.positions() if loop is not None else ():
                counts[k] += 1
                origin.setdefault(k, []).append(f"split {j} ({name})")
                if k == length - 1:
                    stale.append(f"split {j} ({name})")
        if owns:
            counts[length - 1] += 1
            origin.setdefault(length - 1, []).append(f"split {j} (new key)")
    missing = [k for k in range(length) if counts[k] == 0]
    dup = [k for k in range(length) if counts[k] > 1]
    outside = sorted(k for k in counts if not 0 <= k < length)
    pick = lambda xs: focus if focus in xs else xs[0]  # noqa: E731
    lines = []
    if missing:
        lines.append(("missing", f"key {pick(missing)} of {length} is read by no split ({len(missing)} keys dropped)"))
    if dup:
        k = pick(dup)
        lines.append(("duplicate", f"key {k} is read by {origin[k]} ({len(dup)} keys count more than once)"))
    if outside:
        k = pick(outside)
        lines.append(("outside", f"{origin[k][0]} reads key {k}, beyond the {length} keys of the row"))
    if stale:
        lines.append(("stale", f"{stale[0]} reads key {length - 1} from the cache, where this launch writes the new "
                               f"key (the row's old bits, possibly NaN)"))
    return _walk(lines, f"every key of {length} is read by exactly one source, the new one from registers",
                 sum(counts.values()))


def replay_causal_walk(length: int, block_rows: int, blocks: Sequence[tuple[int, Sequence[Loop], Sequence[Loop]]],
                       *, focus: tuple[int, int] | None = None) -> WalkReplay:
    """Causal prefill over `length` tokens. Each block is (first row, loops whose mask does not depend
    on the row, loops masked per row): in the latter Loop.cut is the causal offset, lane position k
    counts for row q when k < min(q + 1 + offset, length) (offset 0: key k <= query q)."""
    counts: Counter = Counter()
    stored_outside = []
    for r0, shared, per_row in blocks:
        for q in range(r0, r0 + block_rows):
            if q >= length:  # the store of rows past the end is masked
                continue
            for loop in shared:
                for k in loop.positions():
                    counts[(q, k)] += 1
            for loop in per_row:
                row_loop = Loop(loop.lo, loop.hi, loop.tile, min(q + 1 + (loop.cut or 0), length))
                for k in row_loop.positions():
                    counts[(q, k)] += 1
        if r0 >= length:
            stored_outside.append(r0)
    want = {(q, k) for q in range(length) for k in range(q + 1)}
    missing = sorted(p for p in want if counts[p] == 0)
    dup = sorted(p for p in want if counts[p] > 1)
    future = sorted(p for p in counts if p not in want and 0 <= p[1] < length)
    outside = sorted(p for p in counts if not 0 <= p[1] < length)
    pick = lambda xs: focus if focus in xs else xs[0]  # noqa: E731
    lines = []
    if missing:
        q, k = pick(missing)
        lines.append(("missing", f"query {q} never sees key {k} <= {q} ({len(missing)} causal pairs dropped)"))
    if dup:
        q, k = pick(dup)
        lines.append(("duplicate", f"query {q} sees key {k} {counts[(q, k)]} times ({len(dup)} pairs counted "
                                   f"more than once)"))
    if future:
        q, k = pick(future)
        lines.append(("future", f"query {q} sees key {k} > {q}: a future token contributes ({len(future)} pairs)"))
    if outside:
        q, k = pick(outside)
        lines.append(("outside", f"query {q} reads key {k}, beyond the {length} tokens"))
    if stored_outside:
        lines.append(("outside", f"a block starting at row {stored_outside[0]} lies past the {length} rows"))
    return _walk(lines, f"every query of {length} sees each key <= itself exactly once and no later key",
                 sum(counts.values()))


def _walk(lines, ok_text: str, visits: int) -> WalkReplay:
    if not lines:
        return WalkReplay(frozenset(), ok_text, visits)
    return WalkReplay(frozenset(k for k, _ in lines), "; ".join(t for _, t in lines), visits)


# --- the lemmas the walks and the paged cache rest on, at one concrete point ----------------------

REPLAY_LIMIT = 1 << 20  # positions (or heads) a lemma's replay enumerates at most


def replay_tile_loop(lo: int, hi: int, tile: int, cut: int | None, k: int) -> WalkReplay:
    """Run Loop(lo, hi, tile, cut) and check position k against the lemma: touched once iff
    lo <= k < min(lo + tile·⌈(hi−lo)/tile⌉, cut)."""
    if hi - lo > REPLAY_LIMIT:
        return WalkReplay(frozenset(), f"lo={lo}, hi={hi}: too long to replay")
    times = Loop(lo, hi, tile, cut).positions().count(k)
    end = lo + tile * -(-(hi - lo) // tile)
    want = 1 if lo <= k < (end if cut is None else min(end, cut)) else 0
    text = f"the loop over [{lo}, {hi}) in tiles of {tile}{'' if cut is None else f' cut at {cut}'} touches {k} " \
           f"{times} time(s), the lemma says {want}"
    return WalkReplay(frozenset({"lemma"} if times != want else ()), text)


def replay_head_packing(Hkv: int, G: int, packed: int, h: int) -> WalkReplay:
    """Enumerate the programs (a, g) and lanes r of the GQA packing and check that query head h is
    run exactly once, by a program reading key/value head h // G."""
    if Hkv * G > REPLAY_LIMIT or packed < 1 or G % packed:
        return WalkReplay(frozenset(), f"Hkv={Hkv}, G={G}, QP={packed}: outside the packing's scope")
    runs = [(a, g, r) for a in range(Hkv) for g in range(G // packed) for r in range(packed)
            if a * G + g * packed + r == h]
    ok = len(runs) == 1 and runs[0][0] == h // G
    return WalkReplay(frozenset(() if ok else {"lemma"}),
                      f"Hkv={Hkv}, G={G}, QP={packed}: query head {h} is run by (a, g, r) = {runs}")


def replay_paged_address(k: int, page: int, pages: int, entry: int) -> WalkReplay:
    """Key k of a paged cache whose block table names page `entry` for k's page: its slot
    entry·page + k % page must lie in the cache, on that page, at k's offset."""
    slot = entry * page + k % page
    ok = 0 <= slot < pages * page and slot // page == entry and slot % page == k % page
    return WalkReplay(frozenset(() if ok else {"lemma"}),
                      f"key {k}, page size {page}, table entry {entry} of {pages} pages: slot {slot}")


def replay_tile_in_page(page: int, t: int, tile: int, k: int) -> WalkReplay:
    """Key k of tile t (keys t·tile onward) read as the tile's first key's page at offset
    (t·tile) % page + (k − t·tile): the page and offset the block table names for k?"""
    first = t * tile
    ok = first // page == k // page and first % page + (k - first) == k % page
    return WalkReplay(frozenset(() if ok else {"lemma"}),
                      f"page size {page}, tile {t} of {tile} keys: key {k} is read on page {first // page} at offset "
                      f"{first % page + (k - first)}, its own page {k // page} offset {k % page}")
