"""The Triton jit functions of attention-decode (attention_decode_kernel documents the program and
plans the launches): the split-KV decode kernel, the second-kernel merge and the fold both use.
ROPE (the Qwen3 layer's fusion RA): the program reads q before its per-head RMSNorm and RoPE (as the
QKV projection wrote it) and normalizes and rotates its QP rows itself; the last key (position L − 1,
the decode step's new token) is not read from the cache: the split that holds it normalizes and
rotates the new k, scores it and folds it and the new v into its running softmax after its tiles,
and writes both into the cache at L − 1 for later steps (`_norm_rope` is qk_rope_kernel's math).
The cache walk over [lo, min(hi, L − 1)) is one masked tile loop, except on the copy-engine path of a
paged cache, which reads whole pages: there the whole tiles run in the loop and the partial tile after
them alone, its values past the split zeroed. A contiguous cache's copy-engine descriptors are
[B·Hkv, L − 1, D] (HEAD3): rows from L − 1 on, the stale row included, arrive as zeros.
PDL (MG = 2): the merge kernel is launched as a programmatic dependent of the split kernel, which
lets it be scheduled at once (griddepcontrol.launch_dependents); the merge's griddepcontrol.wait
returns only when the split kernel has completed and its memory is visible, so the fold reads the
same partials as a plain second launch (both instructions are no-ops without such a launch).

This module imports triton."""
from __future__ import annotations

import triton
import triton.language as tl
from formloop.library.attention_online import online_step
from formloop.library.gemm_dot import store_cast
from formloop.library.pdl import pdl_launch_dependents as gdc_launch_dependents  # triton's own on the GPU
from formloop.library.pdl import pdl_wait as gdc_wait


@triton.jit
def _norm_rope(rows, mask, w_ptr, cos_ptr, sin_ptr, pos_off, eps, D: tl.constexpr):
    """[R, D] fp32: RMSNorm (eps, weight w) of the rows at the [R, 1] pointers `rows`, then RoPE in HF's
    rotate-half form at the table row offset `pos_off` of the fp32 cos/sin tables [P, D/2]:
    out[d] = n[d]·cos[d mod D/2] ∓ n[d ± D/2]·sin[d mod D/2] (minus on the first half)."""
    d = tl.arange(0, D)
    rot = (d + D // 2) % D
    x = tl.load(rows + d[None, :], mask=mask, other=0.0).to(tl.float32)
    xr = tl.load(rows + rot[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, 1) / D + eps)
    w = tl.load(w_ptr + d).to(tl.float32)
    wr = tl.load(w_ptr + rot).to(tl.float32)
    c = tl.load(cos_ptr + pos_off + d % (D // 2))
    s = tl.load(sin_ptr + pos_off + d % (D // 2))
    sign = tl.where(d < D // 2, -1.0, 1.0)
    return (x * (w * c)[None, :] + xr * (sign * wr * s)[None, :]) * rstd[:, None]


@triton.jit
def _fold_partials(ws_ptr, o_ptr, row0, KS, out_base, s_oh, QP: tl.constexpr, KSP: tl.constexpr, D: tl.constexpr):
    """Fold the KS partials of rows row0..row0+QP and store each row's output at out_base + r·s_oh.
    Partial (m, l, o) of row r, split j lives at ((row0 + r)·KS + j)·(D + 4): o[0..D), m, l (16-byte records). All KS
    partials of a row are loaded at once (one L2 round trip, not KS dependent ones) and folded in
    closed form against the largest max M: O = Σ_j 2^(m_j − M)·o_j, L = Σ_j 2^(m_j − M)·l_j, out = O / L
    (the merge-step chain of softmax_merge applied with its final max; M is finite because split 0
    holds a key; an empty trailing split's m_j = −inf weighs 0: merge-empty). The result does not
    depend on the order the splits arrived in. When
    QP·KSP ≤ 64 the QP rows' partials (contiguous records) are loaded together and folded as
    [QP, KSP, D]: one L2 round trip instead of QP."""
    d = tl.arange(0, D)
    if QP > 1 and QP * KSP <= 64:  # every row's partials in one load: one L2 round trip for the pack
        i = tl.arange(0, QP * KSP)
        jj = i % KSP
        ok = jj < KS
        base = ws_ptr + ((row0 + i // KSP) * KS + jj) * (D + 4)
        m = tl.reshape(tl.load(base + D, mask=ok, other=float("-inf"), cache_modifier=".cg"), (QP, KSP))
        lsum = tl.reshape(tl.load(base + D + 1, mask=ok, other=0.0, cache_modifier=".cg"), (QP, KSP))
        o = tl.reshape(tl.load(base[:, None] + d[None, :], mask=ok[:, None], other=0.0, cache_modifier=".cg"),
                       (QP, KSP, D))
        w = tl.exp2(m - tl.max(m, 1)[:, None])  # 0 on the padding past KS
        out = tl.sum(o * w[:, :, None], 1) / tl.sum(lsum * w, 1)[:, None]
        r = tl.arange(0, QP)
        tl.store(o_ptr + out_base + r[:, None] * s_oh + d[None, :], store_cast(out, o_ptr))
    else:
        j = tl.arange(0, KSP)
        ok = j < KS
        for r in tl.static_range(QP):
            base = ws_ptr + ((row0 + r) * KS + j) * (D + 4)
            m = tl.load(base + D, mask=ok, other=float("-inf"), cache_modifier=".cg")
            lsum = tl.load(base + D + 1, mask=ok, other=0.0, cache_modifier=".cg")
            o = tl.load(base[:, None] + d[None, :], mask=ok[:, None], other=0.0, cache_modifier=".cg")
            w = tl.exp2(m - tl.max(m, 0))  # 0 on the padding past KS
            out = tl.sum(o * w[:, None], 0) / tl.sum(lsum * w, 0)
            tl.store(o_ptr + out_base + r * s_oh + d, store_cast(out, o_ptr))


@triton.jit
def _tile_step(q, k_ptr, v_ptr, table_ptr, start, hi, a, b, L, Hkv, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_tb,
               m_i, l_i, acc, qk_scale, BN: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, TM: tl.constexpr,
               WIDEN: tl.constexpr, ZERO_V: tl.constexpr, HEAD3: tl.constexpr = False):
    """One tile of keys [start, start + BN) of KV head a, masked at hi: the online-softmax update of (m, l, acc)
    (SoftmaxArithmetic). `ZERO_V`: the tile's values past hi are zeroed after the load (the copy engine reads
    whole tiles: where a row past hi may hold any bits, its zero weight alone would not cancel a NaN).
    `HEAD3`: the copy engine's descriptors are [B·Hkv, L − 1, D] (RoPE inside, contiguous cache): it zero-fills
    every row from L − 1 on, the stale row included, so a partial tile needs no zeroing."""
    cols = tl.arange(0, BN)
    d = tl.arange(0, D)
    keys = start + cols
    in_split = keys < hi
    if TM and HEAD3:  # one copy-engine tile of head (b, a): rows past the cache's L − 1 keys read as zeros
        bh = (b * Hkv + a).to(tl.int32)
        k = tl.reshape(k_ptr.load([bh, start, 0]), (BN, D))
        v = tl.reshape(v_ptr.load([bh, start, 0]), (BN, D))
    elif TM:  # one copy-engine tile: rows of the [rows, D] view (a tile lies inside one page)
        if PAGE > 0:
            slot = tl.load(table_ptr + b * s_tb + start // PAGE)
            row = ((slot * Hkv + a) * PAGE + start % PAGE).to(tl.int32)
        else:
            row = ((b * Hkv + a) * L + start).to(tl.int32)
        k = k_ptr.load([row, 0])
        v = v_ptr.load([row, 0])
    else:
        if PAGE > 0:
            slot = tl.load(table_ptr + b * s_tb + keys // PAGE, mask=in_split, other=0)
            k_rows = slot.to(tl.int64) * s_kb + (keys % PAGE) * s_kn
            v_rows = slot.to(tl.int64) * s_vb + (keys % PAGE) * s_vn
        else:
            k_rows = b * s_kb + keys * s_kn
            v_rows = b * s_vb + keys * s_vn
        k = tl.load(k_ptr + a * s_kh + k_rows[:, None] + d[None, :], mask=in_split[:, None], other=0.0)
        v = tl.load(v_ptr + a * s_vh + v_rows[:, None] + d[None, :], mask=in_split[:, None], other=0.0)
    if ZERO_V:
        v = tl.where(in_split[:, None], v, 0.0)
    if WIDEN:
        k = k.to(tl.float32)
    s = tl.where(in_split[None, :], tl.dot(q, tl.trans(k)), float("-inf"))
    return online_step(s, v, m_i, l_i, acc, qk_scale, WIDEN)


@triton.jit(do_not_specialize=["L", "per_split", "KS", "Hkv"])
def _decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, ws_ptr, cnt_ptr, table_ptr,
                   L, per_split, KS, Hkv, qk_scale,
                   s_qb, s_qh, s_ob, s_oh, s_kb, s_kh, s_kn, s_vb, s_vh, s_vn, s_tb,
                   kn_ptr, vn_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, kc_ptr, vc_ptr, s_nb, s_nh, s_cs, eps,
                   G: tl.constexpr, QP: tl.constexpr, BH: tl.constexpr, BN: tl.constexpr, D: tl.constexpr,
                   PAGE: tl.constexpr, SPLIT: tl.constexpr, IN_LAUNCH: tl.constexpr, TM: tl.constexpr,
                   KSP: tl.constexpr, WIDEN: tl.constexpr, PDL: tl.constexpr, WAIT: tl.constexpr = False,
                   ROPE: tl.constexpr = False, HEAD3: tl.constexpr = False):
    if PDL or WAIT:  # the merge kernel (launched dependent) may be scheduled now; it waits for this grid to finish
        gdc_launch_dependents()
    if WAIT:  # launched dependent on a chain's kernel before (q and the cache it writes): everything after this
        gdc_wait()
    pid = tl.program_id(0)
    j = tl.program_id(1)
    g = pid % (G // QP)
    a = (pid // (G // QP)) % Hkv
    b = (pid // ((G // QP) * Hkv)).to(tl.int64)
    rows = tl.arange(0, BH)
    d = tl.arange(0, D)
    ok = rows < QP
    heads = a * G + g * QP + rows
    if ROPE:  # q as the projection wrote it: normalized and rotated here (rounded as the rope kernel stores it)
        q = _norm_rope(q_ptr + b * s_qb + heads[:, None] * s_qh, ok[:, None], qw_ptr, cos_ptr, sin_ptr,
                       (L - 1) * s_cs, eps, D)
        q = store_cast(q, q_ptr)
    else:
        q = tl.load(q_ptr + b * s_qb + heads[:, None] * s_qh + d[None, :], mask=ok[:, None], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)
    lo = j * per_split * BN
    hi = tl.minimum(L, lo + per_split * BN)
    if ROPE:  # the cache holds keys [0, L − 1); the new key is folded in after the tiles
        hi_c = tl.minimum(hi, L - 1)
    else:
        hi_c = hi
    m_i = tl.full((BH,), float("-inf"), tl.float32)
    l_i = tl.zeros((BH,), tl.float32)
    acc = tl.zeros((BH, D), tl.float32)
    if ROPE and TM and not HEAD3:  # a paged cache's copy-engine tiles read whole pages: the whole tiles run in
        # the loop, the partial tile after them alone (its rows past the split may be stale)
        full_end = lo + tl.maximum(hi_c - lo, 0) // BN * BN
    else:  # pointer loads mask past the split; HEAD3 descriptors zero-fill from L − 1 on
        full_end = hi_c
    for start in range(lo, full_end, BN):
        m_i, l_i, acc = _tile_step(q, k_ptr, v_ptr, table_ptr, start, hi_c, a, b, L, Hkv, s_kb, s_kh, s_kn, s_vb,
                                   s_vh, s_vn, s_tb, m_i, l_i, acc, qk_scale, BN, D, PAGE, TM, WIDEN, False, HEAD3)
    if ROPE:
        if TM and not HEAD3:  # a paged copy-engine tile reads its rows past the split too: the stale row L − 1
            # may hold any bits (a NaN times a zero weight is NaN), so that tile's values past the split are zeroed
            if full_end < hi_c:
                m_i, l_i, acc = _tile_step(q, k_ptr, v_ptr, table_ptr, full_end, hi_c, a, b, L, Hkv, s_kb, s_kh,
                                           s_kn, s_vb, s_vh, s_vn, s_tb, m_i, l_i, acc, qk_scale, BN, D, PAGE, TM,
                                           WIDEN, True)
        if (L - 1 >= lo) & (L - 1 < hi):  # this split holds the new key
            ones = tl.full((1, 1), 1, tl.int1)
            k_new = _norm_rope(kn_ptr + b * s_nb + a * s_nh + tl.zeros((1, 1), tl.int64), ones, kw_ptr, cos_ptr,
                               sin_ptr, (L - 1) * s_cs, eps, D)
            k_new = store_cast(k_new, kc_ptr)  # as the cache keeps it, for this step and the next
            v_new = tl.load(vn_ptr + b * s_nb + a * s_nh + d)
            if PAGE > 0:
                slot = tl.load(table_ptr + b * s_tb + (L - 1) // PAGE).to(tl.int64)
                k_row = kc_ptr + slot * s_kb + a * s_kh + ((L - 1) % PAGE) * s_kn
                v_row = vc_ptr + slot * s_vb + a * s_vh + ((L - 1) % PAGE) * s_vn
            else:
                k_row = kc_ptr + b * s_kb + a * s_kh + (L - 1) * s_kn
                v_row = vc_ptr + b * s_vb + a * s_vh + (L - 1) * s_vn
            tl.store(k_row + d[None, :], k_new)
            tl.store(v_row + d, v_new)
            s_new = tl.sum(q.to(tl.float32) * k_new.to(tl.float32), 1)
            m_new = tl.maximum(m_i, s_new * qk_scale)
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s_new * qk_scale - m_new)
            l_i = l_i * alpha + p
            acc = acc * alpha[:, None] + p[:, None] * v_new.to(tl.float32)[None, :]
            m_i = m_new
    if SPLIT:
        part = ws_ptr + ((b * Hkv * G + heads) * KS + j) * (D + 4)
        tl.store(part[:, None] + d[None, :], acc, mask=ok[:, None])
        tl.store(part + D, m_i, mask=ok)
        tl.store(part + D + 1, l_i, mask=ok)
        if IN_LAUNCH:
            tl.debug_barrier()
            if tl.atomic_add(cnt_ptr + pid, 1, sem="acq_rel", scope="gpu") == KS - 1:
                _fold_partials(ws_ptr, o_ptr, b * Hkv * G + a * G + g * QP, KS, b * s_ob + (a * G + g * QP) * s_oh,
                               s_oh, QP, KSP, D)
                tl.atomic_xchg(cnt_ptr + pid, 0, sem="relaxed", scope="gpu")
    else:
        out = acc / l_i[:, None]
        tl.store(o_ptr + b * s_ob + heads[:, None] * s_oh + d[None, :], store_cast(out, o_ptr),
                 mask=ok[:, None])


@triton.jit(do_not_specialize=["KS", "Hkv"])
def _merge_kernel(o_ptr, ws_ptr, KS, Hkv, s_ob, s_oh,
                  G: tl.constexpr, QP: tl.constexpr, KSP: tl.constexpr, D: tl.constexpr, PDL: tl.constexpr,
                  TRIGGER: tl.constexpr = False):
    if TRIGGER:  # a chain's next kernel (launched dependent) may be scheduled now
        gdc_launch_dependents()
    if PDL:  # launched dependent: wait until the split kernel has completed and its partials are visible
        gdc_wait()
    pid = tl.program_id(0)
    g = pid % (G // QP)
    a = (pid // (G // QP)) % Hkv
    b = (pid // ((G // QP) * Hkv)).to(tl.int64)
    _fold_partials(ws_ptr, o_ptr, b * Hkv * G + a * G + g * QP, KS, b * s_ob + (a * G + g * QP) * s_oh, s_oh,
                   QP, KSP, D)
