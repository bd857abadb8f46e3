/* Flash-style attention: O = softmax(scale * Q K^T + mask) V, one pass over key tiles with an
 * online softmax, so memory stays O(tile) for any sequence length.
 *
 * Defines: IN_DT (F32, F16, BF16; also the output dtype), HEAD_D and HEAD_DV (head dims), BQ
 * queries per work-item, BKV keys per tile, MASK_KIND (0 none, 1 bool as bytes, 2 additive in
 * MASK_DT), LOCAL_TILE (0: each work-item stages its key/value tile in private memory, for CPU
 * devices with one work-item per group; 1: the group stages it once in local memory, for GPUs).
 * VW divides BKV and HEAD_DV.
 * Semantics (accel's): GQA query head h reads kv head h / (Hq / Hkv); causal is bottom-right
 * aligned (query i sees keys j <= i + Sk - Sq); a row whose every logit is -inf gives zeros.
 * Grid: dim 0 over query tiles, dim 1 over query heads, dim 2 over the batch.
 */
#define OUT_DT IN_DT
#ifndef MASK_DT
#define MASK_DT U8 /* unused when MASK_KIND is 0 */
#endif
#define BKVV (BKV / VW)
#define DVV (HEAD_DV / VW)

KERNEL void attention(GLOBAL const IN_T* RESTRICT Q, GLOBAL const IN_T* RESTRICT Kg,
                      GLOBAL const IN_T* RESTRICT Vg, GLOBAL OUT_T* RESTRICT O,
                      GLOBAL const MASK_T* RESTRICT mask,
                      int Hq, int Hkv, int Sq, int Sk, float scale, int causal,
                      i64 msb, i64 msh, i64 msq, i64 msk) {
#if LOCAL_TILE
    LOCAL float Kt[HEAD_D * BKV];
    LOCAL float Vt[BKV * HEAD_DV];
    const int team = LOCAL_SIZE(0), member = LOCAL_ID(0);
    const int group_q0 = GROUP_ID(0) * team * BQ;
#else
    float Kt[HEAD_D * BKV];  /* values are read straight from global memory (cached) */
    const int team = 1, member = 0;
    const int group_q0 = (GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0)) * BQ;
#endif
    const int h = GROUP_ID(1), b = GROUP_ID(2);
    const int q0 = group_q0 + (LOCAL_TILE ? LOCAL_ID(0) * BQ : 0);
    const int hk = h / (Hq / Hkv);
    const int off = Sk - Sq;
    Q += ((i64)b * Hq + h) * Sq * HEAD_D;
    O += ((i64)b * Hq + h) * Sq * HEAD_DV;
    Kg += ((i64)b * Hkv + hk) * Sk * HEAD_D;
    Vg += ((i64)b * Hkv + hk) * Sk * HEAD_DV;

    float q[BQ][HEAD_D];
    vf_t acc[BQ][DVV];
    float m[BQ], l[BQ];
    UNROLL for (int i = 0; i < BQ; ++i) {
        int qi = imin(q0 + i, Sq - 1);  /* rows past Sq compute a copy of the last, never stored */
        for (int d = 0; d < HEAD_D; ++d) q[i][d] = LOAD_IN(Q, (i64)qi * HEAD_D + d);
        for (int dv = 0; dv < DVV; ++dv) acc[i][dv] = (vf_t)0;
        m[i] = -INF_F;
        l[i] = 0.0f;
    }
    /* Key tiles past the last key the group's last query sees are skipped; the bound is uniform
     * over the group so the barriers below are reached by every work-item. */
    int kend = causal ? imax(0, imin(Sk, group_q0 + team * BQ + off)) : Sk;
    for (int k0 = 0; k0 < kend; k0 += BKV) {
        /* keys transposed, so the logits of VW keys are one vector FMA per head-dim element */
        for (int e = member; e < BKV * HEAD_D; e += team) {
            int jj = e / HEAD_D, d = e % HEAD_D, kj = imin(k0 + jj, Sk - 1);
            Kt[d * BKV + jj] = LOAD_IN(Kg, (i64)kj * HEAD_D + d);
        }
#if LOCAL_TILE
        for (int e = member; e < BKV * HEAD_DV; e += team) {
            int jj = e / HEAD_DV, d = e % HEAD_DV, kj = imin(k0 + jj, Sk - 1);
            Vt[jj * HEAD_DV + d] = LOAD_IN(Vg, (i64)kj * HEAD_DV + d);
        }
        BARRIER();
#define V_ROW(jj, dv) VLOAD_ARR(Vt, (jj) * HEAD_DV + (dv) * VW)
#else
#define V_ROW(jj, dv) VLOAD_IN(Vg, (i64)imin(k0 + (jj), Sk - 1) * HEAD_DV + (dv) * VW)
#endif
        for (int i = 0; i < BQ; ++i) {
            int qi = q0 + i;
            vf_t s[BKVV];
            for (int jv = 0; jv < BKVV; ++jv) s[jv] = (vf_t)0;
            for (int d = 0; d < HEAD_D; ++d) {
                vf_t qd = (vf_t)q[i][d];
                for (int jv = 0; jv < BKVV; ++jv) s[jv] = FMA(qd, VLOAD_ARR(Kt, d * BKV + jv * VW), s[jv]);
            }
            vf_t mx = (vf_t)(-INF_F);
            for (int jv = 0; jv < BKVV; ++jv) {
                vi_t key = (vi_t)(k0 + jv * VW) + VIOTA;
                vf_t x = s[jv] * (vf_t)scale;
#if MASK_KIND
                float mv[VW];
                UNROLL for (int t = 0; t < VW; ++t) {
                    i64 at = (i64)b * msb + (i64)h * msh + (i64)imin(qi, Sq - 1) * msq
                           + (i64)imin(k0 + jv * VW + t, Sk - 1) * msk;
#if MASK_KIND == 1
                    mv[t] = LOAD_MASK(mask, at) ? 0.0f : -INF_F;
#else
                    mv[t] = LOAD_MASK(mask, at);
#endif
                }
                x = x + VLOAD_ARR(mv, 0);
#endif
                vi_t hidden = key >= (vi_t)Sk;
                if (causal) hidden = hidden | (key > (vi_t)(qi + off));
                x = VSELECT(x, (vf_t)(-INF_F), hidden);
                s[jv] = x;
                mx = VMAX(mx, x);
            }
            float mrow = m[i];
            UNROLL for (int t = 0; t < VW; ++t) mrow = FMAX(mrow, VGET(float, mx, t));
            if (mrow == -INF_F) continue;  /* nothing visible yet in this row */
            float alpha = EXP(m[i] - mrow);
            m[i] = mrow;
            vf_t psum = (vf_t)0;
            for (int jv = 0; jv < BKVV; ++jv) {
                s[jv] = EXP(s[jv] - (vf_t)mrow);
                psum += s[jv];
            }
            float lsum = 0.0f;
            UNROLL for (int t = 0; t < VW; ++t) lsum += VGET(float, psum, t);
            l[i] = l[i] * alpha + lsum;
            for (int dv = 0; dv < DVV; ++dv) acc[i][dv] *= (vf_t)alpha;
            for (int jj = 0; jj < BKV; ++jj) {
                vf_t p = (vf_t)VGET(float, s[jj / VW], jj % VW);
                for (int dv = 0; dv < DVV; ++dv)
                    acc[i][dv] = FMA(p, V_ROW(jj, dv), acc[i][dv]);
            }
        }
#if LOCAL_TILE
        BARRIER();
#endif
    }
    UNROLL for (int i = 0; i < BQ; ++i) {
        int qi = q0 + i;
        if (qi >= Sq) break;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;  /* fully masked row: zeros */
        for (int dv = 0; dv < HEAD_DV; ++dv)
            STORE_OUT(O, (i64)qi * HEAD_DV + dv, VGET(float, acc[i][dv / VW], dv % VW) * inv);
    }
}
