"""The online-softmax identity, proved symbolically: tile updates and split merges compute
softmax attention over the whole row.

Scores s_k and values v_k of one query row are reals; `exp` is an uninterpreted function about
which the proof assumes only exp(x) > 0, exp(0) = 1 and exp(a)·exp(b) = exp(a + b). Any
exponential satisfies these, in particular exp2(c·x) with the softmax scale and log2(e) folded into
c, which is what the kernels evaluate; nothing is sampled.

A state (m, l, o) of the kernel *represents* a set X of positions when
    l = exp(−m)·F_X  and  o = exp(−m)·G_X,   F_X = Σ_{k∈X} exp(s_k),  G_X = Σ_{k∈X} exp(s_k)·v_k,
and m bounds every score of X (so every exponent the kernel evaluates is ≤ 0: no overflow).
The chain of obligations, each one Z3 query whose negation must be unsatisfiable:
  rescale-base, rescale-step  a tile's sums at reference r are exp(−r)·(F_T, G_T) (induction on
                              the tile's positions); F_T > 0 for a non-empty tile
  tile-first                  from the initial state (l = o = 0; its −inf max only ever multiplies
                              zeros, since exp2(−inf) = 0) one tile step represents the tile
  tile-step                   a tile step maps a state representing X to one representing X ⊎ T
  merge-step                  folding a split's state into the running merge represents the union
  merge-empty                 folding an empty split (l = o = 0, its max below the running one: −inf in the
                              kernel, exp2(−inf) = 0) leaves the running merge as it was
  normalize                   o / l of a state representing the whole (non-empty) row is
                              Σ exp(s_k)·v_k / Σ exp(s_k): softmax attention
With the index obligations (every position in exactly one split and tile, tails masked), induction
over tiles and then over splits gives: the kernel's output equals softmax attention over the row.

The axioms enter as ground instances over the query's own exp terms (one round: exp(a)·exp(b) =
exp(a + b) for every pair of arguments present), so an unsatisfiable query is a proof under the
universal axioms. A satisfiable one is a candidate counterexample: its scores are replayed on a
concrete row in float64 with the real exp (formloop.verify.attention_replay) and only a replay that
shows the wrong output makes it a counterexample."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import z3

from formloop.errors import InvalidInput
from formloop.verify.attention_replay import SoftmaxArithmetic, replay_softmax
from formloop.verify.outcome import ObligationResult
from formloop.verify.solver import Query, Question, Replay, decide

SOFTMAX_OBLIGATIONS = ("rescale-base", "rescale-step", "tile-first", "tile-step", "merge-step", "merge-empty",
                       "normalize")
EXP = z3.Function("exp", z3.RealSort(), z3.RealSort())
REPLAY_RTOL = 1e-9


def _max(a, b):
    return z3.If(a >= b, a, b)


def _exp_args(terms: Sequence[z3.ExprRef]) -> list[z3.ExprRef]:
    seen: list[z3.ExprRef] = []

    def walk(t):
        if z3.is_app(t) and t.decl().eq(EXP) and not any(z3.eq(t.arg(0), a) for a in seen):
            seen.append(t.arg(0))
        for c in t.children():
            walk(c)
    for t in terms:
        walk(t)
    return seen


def axiom_instances(terms: Sequence[z3.ExprRef]) -> list[z3.BoolRef]:
    """exp > 0, exp(0) = 1 and exp(a)·exp(b) = exp(a+b) over every pair of exp arguments in `terms`."""
    args = _exp_args(terms)
    facts: list[z3.BoolRef] = [EXP(z3.RealVal(0)) == 1]
    facts += [EXP(a) > 0 for a in args]
    for a, b in itertools.product(args, repeat=2):
        facts += [EXP(a) * EXP(b) == EXP(a + b), EXP(a + b) > 0]
    return facts


@dataclass(frozen=True)
class Claim:
    """One obligation: hypotheses, the claim, the symbols a witness reports, and how to build a
    concrete row from a witness (splits → tiles → scores, with one value per position)."""

    name: str
    hypotheses: tuple
    claim: z3.BoolRef
    reported: tuple
    row: Callable[[dict], tuple[list, list]] | None = None
    statement: str = ""


def _claims(arith: SoftmaxArithmetic) -> list[Claim]:
    r, s, v, F, G, t, m = z3.Reals("r s v F G t m")
    P, Q = EXP(-r) * F, EXP(-r) * G  # a tile's sums at reference r, by the rescale lemma
    out = [
        Claim("rescale-base", (), z3.And(0 == EXP(-r) * 0), (r,), None,
              "the empty tile's sums are exp(-r)·0"),
        Claim("rescale-step", (s <= r, F >= 0), z3.And(
            P + EXP(s - r) == EXP(-r) * (F + EXP(s)), Q + EXP(s - r) * v == EXP(-r) * (G + EXP(s) * v),
            F + EXP(s) > 0, s - r <= 0), (r, s, v), None,
            "adding position s to a tile keeps its sums at reference r equal to exp(-r)·(F, G), positive"),
    ]
    # tile step: the running state (m, l, o) represents X; the tile has max t and sums F_T, G_T.
    FX, GX, FT, GT = z3.Reals("F_X G_X F_T G_T")

    def step(m_old, l_old, o_old, m_new):
        alpha = EXP(m_old - m_new)
        p_sum, pv_sum = EXP(-m_new) * FT, EXP(-m_new) * GT  # the tile's sums at m_new (rescale lemma)
        return (alpha * l_old if arith.rescale_sum else l_old) + p_sum, \
            (alpha * o_old if arith.rescale_acc else o_old) + pv_sum

    # The first tile: m = -inf only ever multiplies l = o = 0, and the new max is the tile's.
    l_first, o_first = step(m, 0, 0, t)
    out.append(Claim("tile-first", (FT > 0,), z3.And(l_first == EXP(-t) * FT, o_first == EXP(-t) * GT),
                     (m, t), None, "one tile step from l = o = 0 represents the tile"))
    m_new = _max(m, t)
    l_new, o_new = step(m, EXP(-m) * FX, EXP(-m) * GX, m_new)
    represents = z3.And(l_new == EXP(-m_new) * (FX + FT), o_new == EXP(-m_new) * (GX + GT))
    bounded = z3.And(m - m_new <= 0, t - m_new <= 0)
    out.append(Claim("tile-step", (FX > 0, FT > 0), z3.And(represents, bounded), (m, t),
                     lambda w: ([[[w["m"]], [w["t"]]]], [1.0, 0.0]),
                     "a tile step maps a state representing X to one representing X ⊎ T, exponents <= 0"))
    # merge step: the running merge (M, L, O) represents X1; split j's state (mj, lj, oj) represents X2.
    M, mj, F1, G1, F2, G2 = z3.Reals("M m_j F_1 G_1 F_2 G_2")
    M_new = _max(M, mj)
    w_run = EXP(M - M_new)
    w_split = EXP(mj - (M if arith.stale_merge_max else M_new))
    L_new = w_run * EXP(-M) * F1 + w_split * EXP(-mj) * F2
    O_new = w_run * EXP(-M) * G1 + w_split * EXP(-mj) * G2
    out.append(Claim("merge-step", (F1 > 0, F2 > 0), z3.And(
        L_new == EXP(-M_new) * (F1 + F2), O_new == EXP(-M_new) * (G1 + G2), M - M_new <= 0, mj - M_new <= 0,
        mj - (M if arith.stale_merge_max else M_new) <= 0), (M, mj),
        lambda w: ([[[w["M"]]], [[w["m_j"]]]], [1.0, 0.0]),
        "folding split j into the running merge represents X1 ⊎ X2, exponents <= 0"))
    # an empty split (a trailing split past the last tile): l_j = o_j = 0 and m_j at most the running max
    M_e = _max(M, mj)
    w_e = EXP(mj - (M if arith.stale_merge_max else M_e))
    L_e = EXP(M - M_e) * EXP(-M) * F1 + w_e * 0
    O_e = EXP(M - M_e) * EXP(-M) * G1 + w_e * 0
    out.append(Claim("merge-empty", (F1 > 0, mj <= M), z3.And(L_e == EXP(-M) * F1, O_e == EXP(-M) * G1, M_e == M),
                     (M, mj), None, "folding an empty split leaves the running merge unchanged"))
    Lf, Of = EXP(-M) * F1, EXP(-M) * G1
    out.append(Claim("normalize", (F1 > 0,), z3.And(Lf > 0, Of * F1 == G1 * Lf), (M,), None,
                     "o / l of a state representing the row is sum exp(s)·v / sum exp(s)"))
    return out


def check_softmax(arith: SoftmaxArithmetic | None = None, *, names: Sequence[str] = SOFTMAX_OBLIGATIONS,
                  timeout_s: float = 10.0) -> list[ObligationResult]:
    """The online-softmax obligations of `arith` (the kernels' arithmetic, a fault applied or not)."""
    arith = arith or SoftmaxArithmetic()
    unknown = sorted(set(names) - set(SOFTMAX_OBLIGATIONS))
    if unknown:
        raise InvalidInput("softmax obligation", unknown, SOFTMAX_OBLIGATIONS)
    return [_check(c, arith, timeout_s) for c in _claims(arith) if c.name in names]


def _check(c: Claim, arith: SoftmaxArithmetic, timeout_s: float) -> ObligationResult:
    """One claim through `formloop.verify.solver.decide`: the witness's reported scores are small
    integers when a refuting model has them (a witness under extra constraints is still a witness;
    integers make the replay's discrepancy visible in float64), and it counts only when the row it
    builds, replayed with the real exp, gives the wrong output."""
    facts = [*c.hypotheses, z3.Not(c.claim)]
    hints = []
    for bound in (4, 16):
        ints = [z3.Int(f"{x}_int") for x in c.reported]
        hints.append(tuple(f for x, k in zip(c.reported, ints) for f in (z3.ToReal(k) == x, k >= -bound, k <= bound)))
    query = Query([*axiom_instances(facts), *facts], {str(x): x for x in c.reported}, hints=tuple(hints))

    def replay(w: dict) -> Replay:
        if c.row is None:
            return Replay((), (), "z3 refutes the claim but no concrete row replays it: no semantic witness")
        splits, values = c.row({k: float(v) for k, v in w.items()})
        rep = replay_softmax(arith, splits, values)
        wrong = rep.rel_error > REPLAY_RTOL or not rep.finite
        return Replay((c.name,) if wrong else (), tuple(rep.trace), rep.text)

    how = Question(c.name, c.name, timeout_s, details={
        "statement": c.statement, "arithmetic": arith.as_dict(),
        "axioms": "ground instances of exp>0, exp(0)=1, exp(a)exp(b)=exp(a+b)"})
    return decide(query, replay, how)
