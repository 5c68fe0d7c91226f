"""Step 1, reduction partition: one sum of K products becomes R partial sums and a combine.

Coarse transaction: y = Σ_{k<K} A[i,k]·B[k,j], one atomic sum. Fine program: the k range is cut
into tiles of Tk indices; group r accumulates the products of the tiles it owns into partial[r]
(an internal step: the coarse sum makes no progress), and a final combine adds the partials (the
step that matches the coarse sum). The hard condition is completion agreement: every product is
counted exactly once (cover + unique) and no product from outside [0, K) enters (the tail guard).
The obligations keep K symbolic (any K ≥ 1), so this step's proof does not depend on a shape.
"""
from __future__ import annotations

from collections.abc import Mapping

from formloop.expr import all_of, any_of, ceildiv, const, decision, floordiv, implies, mod, param
from formloop.template import Constraint, Template
from formloop.verify.local import (
    Fault, LocalModel, Obligation, Revision, Step, Timeline, by_menu, k1_obligation, k3_obligation,
    local_obligation, template_nodes, variables,
)
from formloop.verify.proofgraph import Node

R = decision("R", (1, 2, 4, 8), doc="groups the reduction is split into; their partial sums are combined")
Tk = decision("Tk", (8, 16, 32, 64), doc="reduction indices per tile; a group owns whole tiles")
guard = decision("guard", (0, 1), doc="1 if the tile loop tests k < K (needed when Tk does not divide K)")
K = param("K", doc="reduction extent")
t_mac = param("t_mac", kind="chip", doc="cycles per multiply-add")
t_guard = param("t_guard", kind="chip", lower=0, doc="cycles the k < K test adds per multiply-add")
t_comb = param("t_comb", kind="chip", lower=0, doc="cycles to fold one partial sum into the result")

TAIL = guard.eq(1) | (floordiv(K, Tk) * Tk).eq(K)

PROGRAMS = {
    "default": "for r in range(R): for t in range(r, ceil(K/Tk), R): for kk in range(Tk): "
               "k = t*Tk + kk; if not guard or k < K: partial[r] += A[i,k]*B[k,j]; y = sum(partial)",
    "blocked": "c = ceil(ceil(K/Tk)/R); for r in range(R): for t in range(r*c, min((r+1)*c, ceil(K/Tk))): "
               "for kk in range(Tk): k = t*Tk + kk; if not guard or k < K: partial[r] += A[i,k]*B[k,j]; "
               "y = sum(partial)",
}
COSTS = {
    "default": ceildiv(ceildiv(K, Tk), R) * Tk * (t_mac + guard * t_guard) + R * t_comb,
    "no_combine": ceildiv(ceildiv(K, Tk), R) * Tk * (t_mac + guard * t_guard),
}
FAULTS = {
    "double_count": Fault("double_count", 1, "group r walks tiles with stride R-1: a product is counted twice",
                          "exact_once.unique"),
    "unguarded_tail": Fault("unguarded_tail", 1, "the program drops the k < K test even when guard = 1",
                            "step_matching.accumulate"),
}


def template(rev: Revision = Revision()) -> Template:
    return Template(
        name="chain-1-partition",
        doc="reduction partition of one GEMM output",
        decisions=(R, Tk, guard),
        params=(K, t_mac, t_guard, t_comb),
        scope=(),
        constraints=(
            Constraint("no_idle_group", R <= ceildiv(K, Tk), "partition", "every group owns at least one tile"),
            Constraint("tail", TAIL, "tail", "an unguarded loop only when Tk divides K"),
        ),
        preconditions=(Constraint("tail_guard", TAIL, "tail", "no product from outside [0, K)"),),
        cost=COSTS[rev.cost],
        unit="cycles",
        options={"program": rev.program},
    )


# -- the program's iteration space as expressions ------------------------------------------------

TK_MENU, R_MENU = Tk.decision.menu, R.decision.menu


def _n_tiles(env):
    return by_menu(env["Tk"], TK_MENU, lambda c: floordiv(env["K"] + c - 1, c))


def _times_tk(env, x):
    return by_menu(env["Tk"], TK_MENU, lambda c: x * c)


def _owns(rev: Revision, env, r, t):
    """Group r owns tile t under the program variant (and the injected fault, if any)."""
    Rv, nt = env["R"], _n_tiles(env)
    if rev.program == "blocked":
        c = floordiv(nt + Rv - 1, Rv)
        return all_of(t >= 0, t < nt, floordiv(t, c).eq(r))
    if rev.fault == "double_count":
        return all_of(t >= r, t < nt, by_menu(Rv, R_MENU, lambda c: mod(t - r, max(1, c - 1))).eq(0))
    return all_of(t >= r, t < nt, by_menu(Rv, R_MENU, lambda c: mod(t - r, c)).eq(0))


def _tests_tail(rev: Revision, env):
    return const(False) if rev.fault == "unguarded_tail" else env["guard"].eq(1)


def _iteration(rev: Revision, env, tag: str):
    """Variables (r, t, kk) of one executed iteration and the condition that it is executed."""
    r, t, kk = variables(f"r_{tag} t_{tag} kk_{tag}")
    k = _times_tk(env, t) + kk
    executed = all_of(r >= 0, r < env["R"], _owns(rev, env, r, t), kk >= 0, kk < env["Tk"],
                      implies(_tests_tail(rev, env), k < env["K"]))
    return (r, t, kk), k, executed


def _owner(rev: Revision, env, t):
    """π: the group the design assigns tile t to (the backward map of a reduction index)."""
    if rev.program == "blocked":
        nt = _n_tiles(env)
        return floordiv(t, floordiv(nt + env["R"] - 1, env["R"]))
    return by_menu(env["R"], R_MENU, lambda c: mod(t, c))


# -- replay: run the loop nest on one concrete design ---------------------------------------------

MAX_SCAN = 4096  # replay scans every k up to this K; beyond it, the k the witness names


def simulate(w: dict, rev: Revision) -> Timeline:
    """Run the loop nest's membership tests for the products the witness names (every product
    when K is small): which (group, tile) iterations add A[i,k]·B[k,j], and is that once?"""
    Rv, T, g, Kv = int(w["R"]), int(w["Tk"]), int(w["guard"]), int(w["K"])
    nt = -(-Kv // T)
    tl = Timeline()
    if rev.program == "blocked":
        c = -(-nt // Rv)
        tiles = {r: range(r * c, min((r + 1) * c, nt)) for r in range(Rv)}
        owner = lambda tile: tile // c  # noqa: E731
    else:
        stride = max(1, Rv - 1) if rev.fault == "double_count" else Rv
        tiles = {r: range(r, nt, stride) for r in range(Rv)}
        owner = lambda tile: tile % Rv  # noqa: E731
    tests = g == 1 and rev.fault != "unguarded_tail"
    focus = set(range(Kv + T)) if Kv <= MAX_SCAN else set()
    for a, b in (("t", "kk"), ("t1", "kk1"), ("t2", "kk2")):
        if a in w and b in w:
            focus.add(int(w[a]) * T + int(w[b]))
    if "k" in w:
        focus.add(int(w["k"]))
    flagged: set[int] = set()
    for k in sorted(x for x in focus if x >= 0):
        before = len(tl.defects)
        tile = k // T
        adders = [r for r in range(Rv) if tile in tiles[r] and not (tests and k >= Kv)]
        for r in adders:
            tl.events.append((k, "accumulate", {"group": r, "tile": tile, "k": k}))
        if k >= Kv:
            if adders:
                tl.flag("step_matching.accumulate", f"group {adders[0]} adds A[i,{k}]*B[{k},j] but K = {Kv}")
                flagged.add(k)
            continue
        if len(adders) > 1:
            tl.flag("exact_once.unique",
                    f"A[i,{k}]*B[{k},j] is added {len(adders)} times, by groups {adders} (tile {tile})")
        if not adders:
            tl.flag("exact_once.cover", f"A[i,{k}]*B[{k},j] is never added")
        elif owner(tile) not in adders:
            tl.flag("exact_once.cover", f"A[i,{k}]*B[{k},j] is not added by group {owner(tile)}, which pi assigns it "
                                        f"(added by {adders})")
        if len(tl.defects) > before:
            flagged.add(k)
    tl.events = [e for e in tl.events if e[0] in flagged] or tl.events[:16]
    tl.events.append((Kv, "combine", {"groups": Rv, "K": Kv}))
    return tl


# -- obligations ---------------------------------------------------------------------------------

def model(shape: int, revs: Mapping[int, Revision]) -> LocalModel:
    rev = revs.get(1, Revision())
    t = template(rev)
    p = "step1"
    nodes = (*template_nodes(p, t), Node(f"{p}.program", "definition", PROGRAMS[rev.program] + rev.fault_text(FAULTS)),
             Node(f"{p}.backward_map", "definition", "pi(k) = (group owner(k // Tk), tile k // Tk, offset k % Tk)"))
    prog = (f"{p}.program", f"{p}.decisions", "workload.contract")
    pre = (f"{p}.pre",)
    replay = lambda w: simulate(w, rev).replay()  # noqa: E731

    def init(env):
        # The relation at the start: no iteration has run, every partial is the empty sum, and
        # each group's loop starts on a tile it owns (or is empty).
        r, = variables("r_init")
        first = r * floordiv(_n_tiles(env) + env["R"] - 1, env["R"]) if rev.program == "blocked" else r
        return implies(all_of(r >= 0, r < env["R"], first < _n_tiles(env)), _owns(rev, env, r, first)), {"r": r}

    def accumulate(env):
        (r, t, kk), k, executed = _iteration(rev, env, "a")
        return ~(executed & ((k < 0) | (k >= env["K"]))), {"r": r, "t": t, "kk": kk}

    def rank(env):
        # rank = (R - r, nt - t, Tk - kk) lexicographically; the next iteration is smaller.
        (r, t, kk), _, executed = _iteration(rev, env, "a")
        (r2, t2, kk2), _, executed2 = _iteration(rev, env, "b")
        nt = _n_tiles(env)
        later = any_of(r2 > r, r2.eq(r) & (t2 > t), all_of(r2.eq(r), t2.eq(t), kk2 > kk))
        lex_smaller = any_of(env["R"] - r2 < env["R"] - r, r2.eq(r) & (nt - t2 < nt - t),
                             all_of(r2.eq(r), t2.eq(t), env["Tk"] - kk2 < env["Tk"] - kk))
        bounded = all_of(env["R"] - r2 >= 0, nt - t2 >= 0, env["Tk"] - kk2 >= 0)
        return implies(all_of(executed, executed2, later), lex_smaller & bounded), \
            {"r": r, "t": t, "kk": kk, "r2": r2, "t2": t2, "kk2": kk2}

    def progress(env):
        # A state that has not finished can step: loop strides and tile sizes are positive and
        # the tile count is finite.
        return all_of(env["R"] >= 1, env["Tk"] >= 1, _n_tiles(env) >= 1)

    def cover(env):
        k, = variables("k")
        tile = by_menu(env["Tk"], TK_MENU, lambda c: floordiv(k, c))
        executed = _owns(rev, env, _owner(rev, env, tile), tile) & implies(_tests_tail(rev, env), k < env["K"])
        return implies((k >= 0) & (k < env["K"]), executed), {"k": k}

    def unique(env):
        i1, k1, e1 = _iteration(rev, env, "a")
        i2, k2, e2 = _iteration(rev, env, "b")
        distinct = any_of(*[a.ne(b) for a, b in zip(i1, i2)])
        return ~all_of(e1, e2, distinct, k1.eq(k2), k1 >= 0, k1 < env["K"]), \
            {"r1": i1[0], "t1": i1[1], "kk1": i1[2], "r2": i2[0], "t2": i2[1], "kk2": i2[2]}

    obligations: list[Obligation] = [
        local_obligation(1, t, "initialization", "initialization",
                         "partials start empty; each group starts on a tile it owns",
                         prog, init, replay, None),
        local_obligation(1, t, "step_matching.accumulate", "step_matching",
                         "an accumulate step adds only a product with 0 <= k < K (internal step, relation kept)",
                         (*prog, *pre), accumulate, replay, None, t.preconditions),
        local_obligation(1, t, "rank", "rank",
                         "each accumulate step lowers the lexicographic rank (R-r, nt-t, Tk-kk) >= 0",
                         prog, rank, replay, None),
        local_obligation(1, t, "progress", "progress",
                         "an unfinished loop nest can always step (positive strides, finite trip count)",
                         prog, progress, replay, None),
        local_obligation(1, t, "exact_once.cover", "completion",
                         "every product with k < K is added by the group pi assigns it",
                         (*prog, *pre, f"{p}.backward_map"), cover, replay, None, t.preconditions),
        local_obligation(1, t, "exact_once.unique", "completion", "no product is added by two iterations",
                         (*prog, *pre), unique, replay, None, t.preconditions),
        k1_obligation(1, t, p, ["tail"], None),
        k3_obligation(1, t, p, {"R": 1, "Tk": 8, "guard": 1}, None),
    ]
    return LocalModel(t, nodes, tuple(obligations))


STEP = Step(
    number=1, name="reduction partition",
    coarse="one sum of K products", fine="partial sums over groups, then a combine",
    hard="completion agreement: every product exactly once",
    faults=FAULTS, variants={"program": tuple(PROGRAMS), "cost": tuple(COSTS), "premise": ("default",)},
    assumes=(), guarantees=("exact_once",), model=model, shaped=False, doc=__doc__ or "",
)
