/* Flash-style attention: O = softmax(scale * Q K^T + mask) V, one pass over key tiles with an
 * online softmax, so memory stays O(tile) for any sequence length.
 *
 * Defines: IN_DT (F32, F16, BF16; also the output dtype), HEAD_D and HEAD_DV (head dims), BQ
 * rows per work-item, BKV keys per tile, MASK_KIND (0 none, 1 bool as bytes, 2 additive in
 * MASK_DT), LOCAL_TILE (0: K and V are read from global memory, for CPU devices with one
 * work-item per group; 1: a group of TEAM work-items, the launch's local size, stages each tile
 * once in local memory, for GPUs).
 * VW (vector lanes) divides BQ and HEAD_DV: the logits and softmax state are vectors over VW
 * rows, the output rows vectors over VW value dims.
 * QSPLIT (GPUs, VW 1; 4 * QSPLIT divides both head dims): QSPLIT neighbouring work-items share
 * each row, part p owning the head dims of every QSPLIT-th group of 4 from group p (OWN), so a
 * work-item keeps HEAD_D / QSPLIT query and HEAD_DV / QSPLIT output values in registers rather
 * than all of them (at D = 128 that is what keeps a GPU's register file from spilling), and the
 * parts of a row read neighbouring 16 bytes of each K and V row, one conflict-free load of 4
 * dims each; their partial logits meet in local memory once per tile.
 * Semantics (accel's): GQA query head h reads kv head h / (Hq / Hkv); causal is bottom-right
 * aligned (query i sees keys j <= i + Sk - Sq); a row whose every logit is -inf gives zeros.
 * Options (0 when off): `softcap` c > 0 maps each scaled logit s to c * tanh(s / c) before the
 * mask; `window` W >= 1 (causal) also hides keys j <= i + Sk - Sq - W, and key tiles wholly
 * outside every row's window are skipped; SINKS 1 reads `sinks[h]`, one logit per query head
 * that joins the softmax's denominator with no value.
 * Rows: the G = Hq / Hkv query heads that share a kv head are one run of G * Sq rows (row r is
 * query r % Sq of head r / Sq; Q and O hold them contiguously), so a group reads each K/V tile
 * once for all of them and a decode step (Sq = 1) still fills G rows of a tile.
 * Grid: dim 0 over tiles of those rows (TEAM / QSPLIT * BQ rows per group), once per `chunks`
 * of the keys; dim 1 over kv heads, dim 2 over the batch. A launch may cover part of dim 0
 * (GROUP_ID counts from the launch's offset: a long one is split so an interrupt waits
 * little). With one chunk a group writes O. With more (a decode step has few row tiles to
 * spread over a device: flash-decoding), a group
 * takes its chunk's key tiles and writes each row's unnormalized output, running max and sum
 * to `splits` (one record of HEAD_DV + 2 floats per chunk and row), and attention_combine
 * merges the chunks into O.
 */
#define OUT_DT IN_DT
#ifndef MASK_DT
#define MASK_DT U8 /* unused when MASK_KIND is 0 */
#endif
#ifndef QSPLIT
#define QSPLIT 1
#endif
#ifndef SINKS
#define SINKS 0
#endif
#if QSPLIT > 1 && (VW > 1 || !LOCAL_TILE)
#error "QSPLIT > 1 is for GPU groups (LOCAL_TILE 1, VW 1)"
#endif
#if QSPLIT > 1 && (TEAM % QSPLIT || HEAD_D % (4 * QSPLIT) || HEAD_DV % (4 * QSPLIT))
#error "QSPLIT must divide TEAM, and 4 * QSPLIT both head dims"
#endif
#define BQV (BQ / VW)
/* the head dim of a work-item's e-th own dim */
#define OWN(e) (QSPLIT > 1 ? ((e) / 4 * QSPLIT + part) * 4 + (e) % 4 : (e))
#define DQ (HEAD_D / QSPLIT)          /* query dims per work-item */
#define DVV (HEAD_DV / VW / QSPLIT)   /* output vectors per work-item and row */
#define KU 4 /* keys per step: KU * BQV independent FMA chains hide the FMA latency */

#if LOCAL_TILE /* CUDA: 4 groups per multiprocessor allow 256 registers, no cap, but any minimum
                 changes ptxas's choice: with none it held some head dims to 96 and spilled */
#define ATTENTION_BOUNDS LAUNCH_BOUNDS(TEAM, 1, 4)
#else
#define ATTENTION_BOUNDS
#endif

KERNEL ATTENTION_BOUNDS void attention(GLOBAL const IN_T* RESTRICT Q, GLOBAL const IN_T* RESTRICT Kg,
                      GLOBAL const IN_T* RESTRICT Vg, GLOBAL OUT_T* RESTRICT O,
                      GLOBAL const MASK_T* RESTRICT mask, GLOBAL float* RESTRICT splits,
                      GLOBAL const float* RESTRICT sinks,
                      int Hq, int Hkv, int Sq, int Sk, float scale, int causal,
                      i64 msb, i64 msh, i64 msq, i64 msk, int window, float softcap, int chunks) {
    const int hk = GROUP_ID(1), b = GROUP_ID(2);
    const int G = Hq / Hkv, rows = G * Sq;
#if LOCAL_TILE
    LOCAL float Kt[BKV * HEAD_D];
    LOCAL float Vt[BKV * HEAD_DV];
#if QSPLIT > 1
    /* each work-item's partial logits of a tile, padded so that neighbours hit different banks */
    LOCAL float partial[TEAM * (BKV * BQ + 1)];
#endif
    const int member = LOCAL_ID(0), part = member % QSPLIT, team_rows = TEAM / QSPLIT * BQ;
    const int unit = GROUP_ID(0);
#else
    const int part = 0, team_rows = BQ;
    const int unit = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
#endif
    /* dim 0 is every row tile once per key chunk */
    const int row_tiles = (rows + team_rows - 1) / team_rows;
    const int chunk = unit / row_tiles, group_q0 = unit % row_tiles * team_rows;
#if LOCAL_TILE
    const int q0 = group_q0 + member / QSPLIT * BQ;
#else
    const int q0 = group_q0;
#endif
    const int off = Sk - Sq;
    Q += ((i64)b * Hq + (i64)hk * G) * Sq * HEAD_D;
    O += ((i64)b * Hq + (i64)hk * G) * Sq * HEAD_DV;
    Kg += ((i64)b * Hkv + hk) * Sk * HEAD_D;
    Vg += ((i64)b * Hkv + hk) * Sk * HEAD_DV;

    /* this work-item's query dims, transposed (qT[dd][i]), so VW rows' logits are one vector;
     * scale multiplies the logits, not q: q * scale can overflow where the logit does not */
    float qT[DQ * BQ];
    for (int i = 0; i < BQ; ++i) {
        int r = imin(q0 + i, rows - 1);  /* rows past the run compute a copy of the last, never stored */
        for (int dd = 0; dd < DQ; ++dd)
            qT[dd * BQ + i] = LOAD_IN(Q, (i64)r * HEAD_D + OWN(dd));
    }
    vf_t m[BQV], l[BQV];
    vi_t last_key[BQV];  /* causal: the last key each row's query sees */
    UNROLL for (int iv = 0; iv < BQV; ++iv) {
        m[iv] = (vf_t)(-INF_F);
        l[iv] = (vf_t)0;
        last_key[iv] = ((vi_t)(q0 + iv * VW) + VIOTA) % Sq + (vi_t)off;
    }
    vf_t acc[BQ][DVV];
    for (int i = 0; i < BQ; ++i) UNROLL for (int dv = 0; dv < DVV; ++dv) acc[i][dv] = (vf_t)0;

    float pT[BKV * BQ];  /* this tile's logits, then probabilities: pT[j][i] */
    float lanes[BQ], lanes2[BQ];
    /* Only the keys some query of the group sees, [k_lo, k_hi), are visited, split evenly
     * over the key chunks; the bounds are uniform over the group so the barriers below are
     * reached by every work-item. A group whose rows span two heads holds every query from 0. */
    const int r_last = imin(group_q0 + team_rows, rows) - 1;
    const int same_head = group_q0 / Sq == r_last / Sq;
    const int q_first = same_head ? group_q0 % Sq : 0, q_last = same_head ? r_last % Sq : Sq - 1;
    const int k_lo = window > 0 ? imax(0, q_first + off - window + 1) : 0;
    const int k_hi = causal ? imax(k_lo, imin(Sk, q_last + 1 + off)) : Sk;
    const int chunk_tiles = ((k_hi - k_lo + BKV - 1) / BKV + chunks - 1) / chunks;
    const int k_first = k_lo + chunk * chunk_tiles * BKV;
    const int kend = imin(k_hi, k_first + chunk_tiles * BKV);
    for (int k0 = k_first; k0 < kend; k0 += BKV) {
#if LOCAL_TILE
        for (int e = member; e < BKV * HEAD_D; e += TEAM)
            Kt[e] = LOAD_IN(Kg, (i64)imin(k0 + e / HEAD_D, Sk - 1) * HEAD_D + e % HEAD_D);
        for (int e = member; e < BKV * HEAD_DV; e += TEAM)
            Vt[e] = LOAD_IN(Vg, (i64)imin(k0 + e / HEAD_DV, Sk - 1) * HEAD_DV + e % HEAD_DV);
        BARRIER();
#define K_AT(jj, d) Kt[(jj) * HEAD_D + (d)]
#define V_ROW(jj, dv) VLOAD_ARR(Vt, (jj) * HEAD_DV + OWN((dv) * VW))
#else
#define K_AT(jj, d) LOAD_IN(Kg, (i64)imin(k0 + (jj), Sk - 1) * HEAD_D + (d))
#define V_ROW(jj, dv) VLOAD_IN(Vg, (i64)imin(k0 + (jj), Sk - 1) * HEAD_DV + (dv) * VW)
#endif
        /* the logits over this work-item's query dims (all of them when QSPLIT is 1) */
        for (int j0 = 0; j0 < BKV; j0 += KU) {
            vf_t s[KU][BQV];
            UNROLL for (int u = 0; u < KU; ++u) UNROLL for (int iv = 0; iv < BQV; ++iv) s[u][iv] = (vf_t)0;
            for (int dd = 0; dd < DQ; ++dd) {
                vf_t qd[BQV];
                UNROLL for (int iv = 0; iv < BQV; ++iv) qd[iv] = VLOAD_ARR(qT, dd * BQ + iv * VW);
                UNROLL for (int u = 0; u < KU; ++u) {
                    vf_t kd = (vf_t)K_AT(j0 + u, OWN(dd));
                    UNROLL for (int iv = 0; iv < BQV; ++iv) s[u][iv] = FMA(kd, qd[iv], s[u][iv]);
                }
            }
            UNROLL for (int u = 0; u < KU; ++u)
                UNROLL for (int iv = 0; iv < BQV; ++iv) VSTORE_ARR(s[u][iv], pT, (j0 + u) * BQ + iv * VW);
        }
#if QSPLIT > 1
        /* a row's QSPLIT work-items add their partial logits in the same order, so all of them
         * hold the same logits (the barrier ending the tile orders the next tile's writes) */
        for (int e = 0; e < BKV * BQ; ++e) partial[member * (BKV * BQ + 1) + e] = pT[e];
        BARRIER();
        for (int e = 0; e < BKV * BQ; ++e) {
            float logit = 0.0f;
            UNROLL for (int p = 0; p < QSPLIT; ++p)
                logit += partial[(member - part + p) * (BKV * BQ + 1) + e];
            pT[e] = logit;
        }
#endif
        /* scale, masks, and the tile's largest visible logit per row */
        vf_t mx[BQV];
        UNROLL for (int iv = 0; iv < BQV; ++iv) mx[iv] = (vf_t)(-INF_F);
        for (int jj = 0; jj < BKV; ++jj) {
            int key = k0 + jj;
            UNROLL for (int iv = 0; iv < BQV; ++iv) {
                vf_t x = VLOAD_ARR(pT, jj * BQ + iv * VW) * (vf_t)scale;
                if (softcap > 0.0f) x = (vf_t)softcap * TANH(x / (vf_t)softcap);
#if MASK_KIND
                float mv[VW];
                UNROLL for (int t = 0; t < VW; ++t) {
                    int r = imin(q0 + iv * VW + t, rows - 1);
                    i64 at = (i64)b * msb + (i64)(hk * G + r / Sq) * msh
                           + (i64)(r % Sq) * msq + (i64)imin(key, Sk - 1) * msk;
#if MASK_KIND == 1
                    mv[t] = LOAD_MASK(mask, at) ? 0.0f : -INF_F;
#else
                    mv[t] = LOAD_MASK(mask, at);
#endif
                }
                x = x + VLOAD_ARR(mv, 0);
#endif
                vi_t hidden = (vi_t)(key >= Sk ? -1 : 0);  /* vector truth is -1 */
                if (causal) hidden = hidden | ((vi_t)key > last_key[iv]);
                if (window > 0) hidden = hidden | ((vi_t)key <= last_key[iv] - (vi_t)window);
                x = VSELECT(x, (vf_t)(-INF_F), hidden);
                mx[iv] = VMAX(mx[iv], x);
                VSTORE_ARR(x, pT, jj * BQ + iv * VW);
            }
        }
        /* online softmax: rescale what was accumulated by exp(m_old - m_new); rows with nothing
         * visible yet keep m = -inf and subtract 0 so their probabilities stay exactly 0 */
        vf_t sub[BQV], psum[BQV];
        UNROLL for (int iv = 0; iv < BQV; ++iv) {
            vf_t mnew = VMAX(m[iv], mx[iv]);
            vi_t dead = mnew == (vf_t)(-INF_F);
            vf_t alpha = VSELECT(EXP(m[iv] - mnew), (vf_t)1.0f, dead);
            sub[iv] = VSELECT(mnew, (vf_t)0.0f, dead);
            m[iv] = mnew;
            l[iv] = l[iv] * alpha;
            psum[iv] = (vf_t)0;
            VSTORE_ARR(alpha, lanes, iv * VW);
        }
        for (int jj = 0; jj < BKV; ++jj) {
            UNROLL for (int iv = 0; iv < BQV; ++iv) {
                vf_t p = EXP(VLOAD_ARR(pT, jj * BQ + iv * VW) - sub[iv]);
                psum[iv] += p;
                VSTORE_ARR(p, pT, jj * BQ + iv * VW);
            }
        }
        UNROLL for (int iv = 0; iv < BQV; ++iv) l[iv] += psum[iv];
        /* only the tile's real keys: a padding lane reads the last key's V row (clamped) with
         * weight 0, and 0 x inf would turn an infinite value into NaN (uniform over the group) */
        const int tile_keys = imin(BKV, Sk - k0);
        for (int i = 0; i < BQ; ++i) {
            vf_t o[DVV];
            UNROLL for (int dv = 0; dv < DVV; ++dv) o[dv] = acc[i][dv] * (vf_t)lanes[i];
            for (int jj = 0; jj < tile_keys; ++jj) {
                vf_t p = (vf_t)pT[jj * BQ + i];
                UNROLL for (int dv = 0; dv < DVV; ++dv) o[dv] = FMA(p, V_ROW(jj, dv), o[dv]);
            }
            UNROLL for (int dv = 0; dv < DVV; ++dv) acc[i][dv] = o[dv];
        }
#if LOCAL_TILE
        BARRIER();
#endif
    }
    UNROLL for (int iv = 0; iv < BQV; ++iv) {
        VSTORE_ARR(l[iv], lanes2, iv * VW);
        VSTORE_ARR(m[iv], lanes, iv * VW);
    }
    for (int i = 0; i < BQ; ++i) {
        int r = q0 + i;
        if (r >= rows) break;
        float row[DVV * VW];
        if (chunks == 1) {
            float l_row = lanes2[i], w = 1.0f;
#if SINKS  /* the sink's logit joins the row's max and sum */
            const float sink = sinks[hk * G + r / Sq];
            const float top = IS_NAN(sink) ? sink : FMAX(lanes[i], sink);
            if (top != -INF_F) {
                w = EXP(lanes[i] - top);
                l_row = l_row * w + EXP(sink - top);
            }
#endif
            /* a fully masked row gives zeros; a NaN sum stays NaN */
            float inv = l_row > 0.0f || IS_NAN(l_row) ? w / l_row : 0.0f;
            UNROLL for (int dv = 0; dv < DVV; ++dv) VSTORE_ARR(acc[i][dv] * (vf_t)inv, row, dv * VW);
            UNROLL for (int e = 0; e < DVV * VW; ++e) STORE_OUT(O, (i64)r * HEAD_DV + OWN(e), row[e]);
        } else {
            GLOBAL float* rec = splits + (((i64)b * Hkv + hk) * chunks + chunk) * rows * (HEAD_DV + 2)
                              + (i64)r * (HEAD_DV + 2);
            UNROLL for (int dv = 0; dv < DVV; ++dv) VSTORE_ARR(acc[i][dv], row, dv * VW);
            UNROLL for (int e = 0; e < DVV * VW; ++e) rec[OWN(e)] = row[e];
            if (part == 0) {
                rec[HEAD_DV] = lanes[i];
                rec[HEAD_DV + 1] = lanes2[i];
            }
        }
    }
}

/* O from attention's key chunks: one work-item per output value of the total = B * Hkv * rows
 * rows (a kv head's run of rows is contiguous in O, so row R of kv head bh is O's row
 * bh * rows + R). out = sum_c w_c acc_c / sum_c w_c l_c with w_c = exp(m_c - max m), exactly
 * what one pass over all keys computes up to rounding; where no chunk saw a finite logit every
 * w_c is 1, so a fully masked row gives 0 and a NaN stays NaN, as in one pass. */
KERNEL void attention_combine(GLOBAL const float* RESTRICT splits, GLOBAL OUT_T* RESTRICT O,
                              GLOBAL const float* RESTRICT sinks,
                              int rows, int chunks, int Sq, int Hkv, i64 total) {
    const i64 e = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (e >= total) return;
    const i64 R = e / HEAD_DV, bh = R / rows;
    const int dv = (int)(e % HEAD_DV);
    const i64 step = (i64)rows * (HEAD_DV + 2); /* from one chunk's record of a row to the next's */
    GLOBAL const float* rec = splits + bh * chunks * step + (R - bh * rows) * (HEAD_DV + 2);
    float top = -INF_F;
    for (int c = 0; c < chunks; ++c) top = FMAX(top, rec[c * step + HEAD_DV]);
    float l = 0.0f, o = 0.0f;
#if SINKS  /* query head (kv head) * G + row / Sq of the row's run; a NaN sink makes the row NaN */
    const float sink = sinks[(int)(bh % Hkv) * (rows / Sq) + (int)(R - bh * rows) / Sq];
    top = IS_NAN(sink) ? sink : FMAX(top, sink);
    if (top != -INF_F) l = EXP(sink - top);
#endif
    for (int c = 0; c < chunks; ++c) {
        const float w = top == -INF_F ? 1.0f : EXP(rec[c * step + HEAD_DV] - top);
        l += w * rec[c * step + HEAD_DV + 1];
        o += w * rec[c * step + dv];
    }
    STORE_OUT(O, R * HEAD_DV + dv, o * (l > 0.0f || IS_NAN(l) ? 1.0f / l : 0.0f));
}
