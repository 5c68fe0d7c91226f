"""Index rules of the GEMM tiling families, declared once as expressions.

Every rule below is data. The verifier lowers it to Z3 (`formloop.verify.index`) and proves it for
every extent; the kernel module's Python helpers (`k_split`, `swizzle`, `tile_of`) evaluate it
with numpy; the Triton jit helper `_tile_of` in `gemm_tiling_kernel` is the one hand-written
copy, and tests/test_index_rules.py checks it equals these rules point for point (Triton's
interpreter, bounded domains).

  tile cover  an axis of extent X in tiles of T: ⌈X/T⌉ tiles, tile b holds b·T + r (r < T), an
              access happens only if its index < X, index x belongs to tile ⌊x/T⌋ (`AxisSpec`,
              with the fault knobs the seed's Table 19 injects)
  swizzle     program pid walks G tile rows at a time, column by column (grouped-M order)
  split-K     split s of KS reduces k in [s·c·Tk, min(K, (s+1)·c·Tk)), c = ⌈⌈K/Tk⌉/KS⌉
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from formloop.expr import Expr, ceildiv, const, evaluate, floordiv, minimum, mod, param, substitute
from formloop.verify.index import (
    INDEX_CONFIRMS, INDEX_OBLIGATIONS, IndexAxis, check_bijection, check_index, check_partition,
)
from formloop.verify.outcome import ObligationResult
from formloop.verify.replay import AxisLoop, replay_tiling

# Leaves: extents, tile sizes and launch indices, all integers (names as the kernels use them).
M = param("M", doc="rows of A and C")
N = param("N", doc="columns of B and C")
K = param("K", doc="reduction extent")
Tm = param("Tm", doc="rows of an output tile (BLOCK_M)")
Tn = param("Tn", doc="columns of an output tile (BLOCK_N)")
Tk = param("Tk", doc="depth of a k-tile (BLOCK_K)")
G = param("G", doc="tile rows per swizzle group (GROUP_M)")
KS = param("KS", doc="splits of the k range (SPLIT_K)")
pid = param("pid", lower=0, doc="program id along grid axis 0 (one output tile)")
pid_k = param("pid_k", lower=0, doc="program id along grid axis 1 (one split of the k range)")
num_pid_m = param("num_pid_m", doc="tile rows of the output")
num_pid_n = param("num_pid_n", doc="tile columns of the output")
INDEX = param("x", lower=None, doc="an index along one axis (the subject of an index obligation)")
LEAVES = {leaf.name: leaf for leaf in (M, N, K, Tm, Tn, Tk)}

# -- tile cover -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AxisSpec:
    """How one axis is tiled: `floor` grid instead of ceil, tiles start at b·(T − shrink),
    `guarded` accesses. The defaults are the correct rule; the knobs are injected faults."""

    extent: str
    tile: str
    floor: bool = False
    shrink: int = 0
    guarded: bool = True

    def expr(self) -> IndexAxis:
        X, T = LEAVES[self.extent], LEAVES[self.tile]
        stride = T - self.shrink if self.shrink else T
        blocks = floordiv(X, T) if self.floor else ceildiv(X, stride)
        guard = INDEX < X if self.guarded else const(True)
        return IndexAxis(self.extent, X, T, blocks, stride, guard, floordiv(INDEX, T), INDEX)

    def loop(self, extent: int, tile: int) -> AxisLoop:
        """The same rule at one extent and tile size, for the replay interpreter."""
        axis = self.expr()
        at = {self.extent: extent, self.tile: tile}
        return AxisLoop(extent=extent, tile=tile, stride=_int(axis.stride, at), blocks=_int(axis.blocks, at),
                        guarded=self.guarded)


OUTPUT_AXES = (AxisSpec("M", "Tm"), AxisSpec("N", "Tn"))

# -- the Triton family's launch: grid, swizzle, split-K ---------------------------------------------

GRID = {"num_pid_m": ceildiv(M, Tm), "num_pid_n": ceildiv(N, Tn)}


def swizzle_rule(clamp_last_group: bool = True) -> dict[str, Expr]:
    """pid_m, pid_n of program pid; without `clamp_last_group` (an injected fault) the last group
    is taken to have G rows even when fewer are left."""
    width = G * num_pid_n
    first_m = floordiv(pid, width) * G
    rows = minimum(num_pid_m - first_m, G) if clamp_last_group else G
    return {"pid_m": first_m + mod(mod(pid, width), rows), "pid_n": floordiv(mod(pid, width), rows)}


SWIZZLE = swizzle_rule()


def split_rule(floor_split: bool = False) -> dict[str, Expr]:
    """per_split, k_lo, k_hi of split pid_k; `floor_split` injects the floor-divided split size
    (the last k-tiles are never reduced)."""
    k_tiles = ceildiv(K, Tk)
    per_split = floordiv(k_tiles, KS) if floor_split else ceildiv(k_tiles, KS)
    k_lo = pid_k * per_split * Tk
    return {"per_split": per_split, "k_lo": k_lo, "k_hi": minimum(K, k_lo + per_split * Tk)}


SPLIT = split_rule()


def _int(e: Expr, values: Mapping[str, int]) -> int:
    return int(np.asarray(evaluate(e, values)).item())


def k_split(K: int, Tk: int, KS: int) -> list[tuple[int, int]]:
    """The [k_lo, k_hi) range of each split (an empty split as (k_hi, k_hi))."""
    out = []
    for s in range(KS):
        at = {"K": K, "Tk": Tk, "KS": KS, "pid_k": s}
        lo, hi = _int(SPLIT["k_lo"], at), _int(SPLIT["k_hi"], at)
        out.append((min(lo, hi), hi))
    return out


def swizzle(pid: int, num_pid_m: int, num_pid_n: int, G: int) -> tuple[int, int]:
    """(pid_m, pid_n) of program `pid` in the grouped-M launch order."""
    at = {"pid": pid, "num_pid_m": num_pid_m, "num_pid_n": num_pid_n, "G": G}
    return _int(SWIZZLE["pid_m"], at), _int(SWIZZLE["pid_n"], at)


def tile_of(pid: int, pid_k: int, M: int, N: int, K: int, G: int, KS: int, Tm: int, Tn: int, Tk: int
            ) -> tuple[int, int, int, int]:
    """(pid_m, pid_n, k_lo, per_split) of one program: what the kernels' `_tile_of` must return."""
    at = {"M": M, "N": N, "K": K, "G": G, "KS": KS, "Tm": Tm, "Tn": Tn, "Tk": Tk, "pid": pid, "pid_k": pid_k}
    at.update({k: _int(v, at) for k, v in GRID.items()})
    return (_int(SWIZZLE["pid_m"], at), _int(SWIZZLE["pid_n"], at), _int(SPLIT["k_lo"], at),
            _int(SPLIT["per_split"], at))


# -- obligations ------------------------------------------------------------------------------------

def split_k_partition(tk: int, ks: int, *, floor_split: bool = False, timeout_s: float = 10.0) -> ObligationResult:
    """The KS ranges cover [0, K) exactly once for every K >= 1, so summing the KS partial tiles
    is the full reduction."""
    rule = split_rule(floor_split)
    at = {"Tk": tk, "KS": ks}
    ranges = [(substitute(rule["k_lo"], {**at, "pid_k": s}), substitute(rule["k_hi"], {**at, "pid_k": s}))
              for s in range(ks)]
    return check_partition(f"split_k_partition[Tk={tk},KS={ks}]", ranges, K, param("k", lower=None),
                           timeout_s=timeout_s)


def swizzle_bijective(g: int, *, clamp_last_group: bool = True, timeout_s: float = 10.0) -> ObligationResult:
    """The grouped-M order maps programs [0, num_pid_m·num_pid_n) one-to-one onto the tiles, for
    every grid shape."""
    rule = swizzle_rule(clamp_last_group)
    images = [(substitute(rule["pid_m"], {"G": g}), num_pid_m), (substitute(rule["pid_n"], {"G": g}), num_pid_n)]
    return check_bijection(f"swizzle_bijective[G={g}]", pid, num_pid_m * num_pid_n, images, timeout_s=timeout_s)


def tile_cover(axis: AxisSpec, tile: int, *, timeout_s: float = 10.0) -> list[ObligationResult]:
    """Coverage, exact-once and no-phantom of one output axis at one tile size, for every extent;
    a witness is replayed on the loop nest with the other axes one tile long."""
    def replay(obligation: str, name: str, tile_value: int, extent: int, index: int):
        loops = {a.extent: a.loop(16, 16) for a in (*OUTPUT_AXES, AxisSpec("K", "Tk"))}
        loops[name] = axis.loop(extent, tile_value)
        r = replay_tiling(loops["M"], loops["N"], loops["K"], focus=(name, index))
        return set(r.kinds), r.describe(INDEX_CONFIRMS[obligation], name)

    return [check_index(axis.expr(), ob, tile, replay=replay, timeout_s=timeout_s) for ob in INDEX_OBLIGATIONS]
