/* Flash attention (FlashAttention-2 forward) on NVIDIA tensor cores with mma.sync, for float16
 * and bfloat16: O = softmax(scale * Q K^T + mask) V, float32 logits, softmax state and output
 * accumulation, probabilities rounded to IN_DT for the P V product (as FlashAttention does; the
 * conformance tolerance counts that rounding). CUDA-only (sm_80 and later: bfloat16 mma.sync,
 * cp.async, ldmatrix), built with accel.h in front like every shipped source.
 *
 * Semantics, arguments and grid are attention.cl's, so the backend launches both alike:
 * (Q, K, V, O, mask, Hq, Hkv, Sq, Sk, scale, causal, msb, msh, msq, msk); Q [B, Hq, Sq, HEAD_D],
 * K [B, Hkv, Sk, HEAD_D], V [B, Hkv, Sk, HEAD_DV], O [B, Hq, Sq, HEAD_DV], contiguous, IN_DT;
 * query head h reads kv head h / (Hq / Hkv); causal is bottom-right aligned (query i sees keys
 * j <= i + Sk - Sq); a row whose every logit is -inf gives zeros. MASK_KIND 0 (none), 1 (bytes,
 * nonzero = visible) or 2 (additive, MASK_DT), element (b, h, i, j) at b*msb + h*msh + i*msq +
 * j*msk. Any Sq, Sk >= 1. Q, K, V must be 16-byte aligned (K and V rows arrive as 16-byte
 * cp.async copies; Q is read as 32-bit pairs), O 2-byte aligned.
 *
 * Defines: IN_DT (F16 or BF16), HEAD_D, HEAD_DV (multiples of 16), MASK_KIND, MASK_DT, WARPS
 * (warps per block, 16 queries each), BKV (keys per shared tile, a multiple of 16).
 * Grid: x over BQ = 16 * WARPS query tiles, y over query heads, z over the batch; block:
 * 32 * WARPS threads; static shared memory 2 * BKV * (HEAD_D + HEAD_DV + 16) * 2 bytes.
 *
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" and
 * "ldmatrix"), with g = lane / 4 and t = lane % 4; a 32-bit register holds two 16-bit elements,
 * the lower-indexed one in the low half:
 *   A (16 x 16, row)  a0 = (row g, cols 2t, 2t+1)   a1 = (row g+8, cols 2t, 2t+1)
 *                     a2 = (row g, cols 2t+8, 2t+9) a3 = (row g+8, cols 2t+8, 2t+9)
 *   B (16 x 8, col)   b0 = (rows 2t, 2t+1, col g)   b1 = (rows 2t+8, 2t+9, col g)
 *   C (16 x 8, f32)   c0, c1 = (row g, cols 2t, 2t+1)   c2, c3 = (row g+8, cols 2t, 2t+1)
 *   ldmatrix .x4: lane l gives the address of row l % 8 of 8 x 8 matrix l / 8; register i of
 *   every lane receives matrix i's (row g, cols 2t, 2t+1); with .trans the 8 addressed rows are
 *   the matrix's columns, so register i holds (stored rows 2t, 2t+1, stored column g).
 */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define OUT_DT IN_DT
#ifndef MASK_DT
#define MASK_DT U8 /* unused when MASK_KIND is 0 */
#endif
#if !defined(WARPS) || !defined(BKV)
#error "attention_mma.cu needs WARPS and BKV (accel.kernels.attention_mma sets them)"
#endif
#if HEAD_D % 16 || HEAD_DV % 16 || BKV % 16
#error "HEAD_D, HEAD_DV and BKV must be multiples of 16 (whole mma k-steps and ldmatrix pairs)"
#endif
#define BQ (16 * WARPS)
#define THREADS (32 * WARPS)
/* 8 extra elements (16 bytes) per shared row: the 8 rows one ldmatrix phase reads then start at
 * 8 different 16-byte offsets modulo 128 bytes (every bank once), and rows stay 16-byte aligned
 * for cp.async and ldmatrix */
#define LDK (HEAD_D + 8)
#define LDV (HEAD_DV + 8)
#define STAGE_K (BKV * LDK)
#define STAGE_V (BKV * LDV)
#if 2 * 2 * (STAGE_K + STAGE_V) > 48 * 1024
#error "two stages of K and V tiles exceed 48 KiB of static shared memory: lower BKV"
#endif
#define NT (BKV / 8)     /* 8-key n-tiles of a warp's 16 x BKV logits */
#define KD (HEAD_D / 16) /* k-steps of Q K^T */
#define NV (HEAD_DV / 8) /* 8-column n-tiles of a warp's 16 x HEAD_DV output */
#define LOG2E 1.4426950408889634f

#define MMA_F16 "f16"
#define MMA_BF16 "bf16"
#define MMA_T ACCEL_CAT(MMA_, IN_DT)

/* D += A B for one 16 x 8 x 16 block, float32 accumulators. */
DEVICE void mma16816(float* d, const u32* a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32." MMA_T "." MMA_T ".f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}


/* Two floats rounded to nearest even into one IN_DT pair, lo in the low half (the A-fragment
 * order): cvt's first source goes to the upper half. */
#define CVT_F16 "f16x2"
#define CVT_BF16 "bf16x2"
DEVICE u32 pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn." ACCEL_CAT(CVT_, IN_DT) ".f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 2^x on the special-function unit; 2^-inf = +0, which hides masked keys */
DEVICE float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Stage rows [k0, k0 + BKV) of a [Sk, W] matrix into a shared tile of row pitch W + 8. Rows past
 * Sk are zero-filled: zero values keep 0 * V exactly 0 for the hidden keys of the last tile. */
template <int W>
DEVICE void stage_rows(u16* dst, const u16* src, int k0, int Sk, int tid) {
    constexpr int CHUNKS = BKV * W / 8;
    UNROLL for (int i = 0; i < (CHUNKS + THREADS - 1) / THREADS; ++i) {
        const int c = tid + i * THREADS;
        if (CHUNKS % THREADS == 0 || c < CHUNKS) {
            const int r = c / (W / 8), col = c % (W / 8) * 8;
            const bool in = k0 + r < Sk;
            cp_async16(dst + r * (W + 8) + col, in ? src + (i64)(k0 + r) * W + col : src, in ? 16 : 0);
        }
    }
}

/* The arguments are attention.cl's (the backends pass both the same), `splits` unused: this
 * kernel never splits the keys; `sinks`, `window` and `softcap` unused: the backends route
 * attention with those options to attention.cl. */
KERNEL void __launch_bounds__(THREADS)
attention_mma(const IN_T* RESTRICT Q, const IN_T* RESTRICT Kg, const IN_T* RESTRICT Vg,
              OUT_T* RESTRICT O, const MASK_T* RESTRICT mask,
              float* RESTRICT splits, const float* RESTRICT sinks,
              int Hq, int Hkv, int Sq, int Sk, float scale, int causal,
              i64 msb, i64 msh, i64 msq, i64 msk, int window, float softcap) {
    __shared__ __align__(128) u16 smem[2 * (STAGE_K + STAGE_V)];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int q0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z, hk = h / (Hq / Hkv);
    const int off = Sk - Sq;
    const int qw = q0 + warp * 16;      /* the warp's first query */
    const int rows[2] = {qw + g, qw + g + 8};  /* the thread's two rows: C halves c0,c1 / c2,c3 */
    Q += ((i64)b * Hq + h) * Sq * HEAD_D;
    O += ((i64)b * Hq + h) * Sq * HEAD_DV;
    Kg += ((i64)b * Hkv + hk) * Sk * HEAD_D;
    Vg += ((i64)b * Hkv + hk) * Sk * HEAD_DV;

    /* Q as A fragments, loaded once: a0/a2 hold row g's column pairs 2t and 2t+8 of each 16-wide
     * k-step, a1/a3 row g+8's; a column pair is one aligned 32-bit word (u32 index 8kk + t).
     * Rows past Sq read row Sq-1 and are never stored. */
    u32 qa[KD][4];
    {
        const u32* lo = (const u32*)(Q + (i64)imin(rows[0], Sq - 1) * HEAD_D) + t;
        const u32* hi = (const u32*)(Q + (i64)imin(rows[1], Sq - 1) * HEAD_D) + t;
        UNROLL for (int kk = 0; kk < KD; ++kk) {
            qa[kk][0] = lo[8 * kk];
            qa[kk][1] = hi[8 * kk];
            qa[kk][2] = lo[8 * kk + 4];
            qa[kk][3] = hi[8 * kk + 4];
        }
    }

    /* ldmatrix row addresses. K tile (keys x d, row-major) is the "col" B operand of S = Q K^T
     * as stored: B's b0 = (k = d 2t, 2t+1; n = key g) is row g's pair 2t of an 8 x 8 block of
     * keys x d, exactly what plain ldmatrix hands lane (g, t). Matrices 0..3 = (keys +0, d +0),
     * (keys +0, d +8), (keys +8, d +0), (keys +8, d +8) give b0, b1 of key n-tile 2p, then of
     * 2p+1. */
    const u32 k_lane = (u32)__cvta_generic_to_shared(
        smem + ((lane % 8) + (lane / 16) * 8) * LDK + (lane / 8 % 2) * 8);
    /* V tile (keys x dv, row-major) is B of O += P V with k = key, n = dv: b0 = (keys 2t, 2t+1;
     * dv g) is a column pair, which .trans delivers from the 8 x 8 block of keys x dv.
     * Matrices 0..3 = (keys +0, dv +0), (keys +8, dv +0), (keys +0, dv +8), (keys +8, dv +8)
     * give b0, b1 of dv n-tile 2p, then of 2p+1. */
    const u32 v_lane = (u32)__cvta_generic_to_shared(
        smem + 2 * STAGE_K + ((lane % 8) + (lane / 8 % 2) * 8) * LDV + (lane / 16) * 8);

#if MASK_KIND
    i64 mrow[2];
    UNROLL for (int i = 0; i < 2; ++i)
        mrow[i] = (i64)b * msb + (i64)h * msh + (i64)imin(rows[i], Sq - 1) * msq;
#endif

    const float sl2 = scale * LOG2E;  /* logits are kept in log2 units: exp2 is one MUFU op */
    float m[2] = {-INF_F, -INF_F};    /* running row max (log2 units), equal in the 4 lanes */
    float l[2] = {0.0f, 0.0f};        /* this lane's part of the row sums; lanes add at the end */
    float o[NV][4];
    UNROLL for (int n = 0; n < NV; ++n) UNROLL for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;

    /* Key tiles past the last key the block's last query sees are skipped; the count is uniform
     * over the block so every thread reaches the barriers. */
    const int kend = causal ? imax(0, imin(Sk, q0 + BQ + off)) : Sk;
    const int tiles = (kend + BKV - 1) / BKV;
    if (tiles > 0) {
        stage_rows<HEAD_D>(smem, Kg, 0, Sk, tid);
        stage_rows<HEAD_DV>(smem + 2 * STAGE_K, Vg, 0, Sk, tid);
    }
    cp_async_commit();
    for (int it = 0; it < tiles; ++it) {
        const int cur = it & 1, k0 = it * BKV;
        const u32 ks = k_lane + cur * (2 * STAGE_K), vs = v_lane + cur * (2 * STAGE_V); /* bytes */
        if (it + 1 < tiles) {  /* the other stage was released by the barrier ending it - 1 */
            stage_rows<HEAD_D>(smem + (cur ^ 1) * STAGE_K, Kg, k0 + BKV, Sk, tid);
            stage_rows<HEAD_DV>(smem + 2 * STAGE_K + (cur ^ 1) * STAGE_V, Vg, k0 + BKV, Sk, tid);
        }
        cp_async_commit();  /* possibly empty: then "all but the newest" is everything */
        cp_async_wait<1>();
        __syncthreads();

        float s[NT][4];
        UNROLL for (int j = 0; j < NT; ++j) UNROLL for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
        UNROLL for (int kk = 0; kk < KD; ++kk) {
            UNROLL for (int p = 0; p < NT / 2; ++p) {
                u32 kb[4];
                ldsm_x4(kb, ks + 2 * (16 * p * LDK + 16 * kk));
                mma16816(s[2 * p], qa[kk], kb[0], kb[1]);
                mma16816(s[2 * p + 1], qa[kk], kb[2], kb[3]);
            }
        }

        /* s[j][e] is (row rows[e / 2], key k0 + 8j + 2t + e % 2): to log2 units, plus the mask
         * (read at clamped indices: rows past Sq and keys past Sk exist only in registers) */
        UNROLL for (int j = 0; j < NT; ++j) {
            UNROLL for (int e = 0; e < 4; ++e) {
                float y = s[j][e] * sl2;
#if MASK_KIND
                const int key = imin(k0 + 8 * j + 2 * t + e % 2, Sk - 1);
                const i64 at = mrow[e / 2] + (i64)key * msk;
#if MASK_KIND == 1
                y = LOAD_MASK(mask, at) ? y : -INF_F;
#else
                y = FMA(LOAD_MASK(mask, at), LOG2E, y);
#endif
#endif
                s[j][e] = y;
            }
        }
        /* Tiles wholly visible to every row of the warp (all keys < Sk and, under causal, none
         * past the warp's first row + off) skip the per-element test: a warp-uniform branch. */
        if (k0 + BKV > Sk || (causal && k0 + BKV - 1 > qw + off)) {
            UNROLL for (int j = 0; j < NT; ++j) UNROLL for (int e = 0; e < 4; ++e) {
                const int key = k0 + 8 * j + 2 * t + e % 2;
                if (key >= Sk || (causal && key > rows[e / 2] + off)) s[j][e] = -INF_F;
            }
        }

        /* Online softmax per row: the 4 lanes of a row (same g, t = 0..3) hold its BKV logits,
         * so two xor-shuffles over t give the row max. Rows with nothing visible yet keep
         * m = -inf and subtract 0, so their probabilities and rescale factor are exact zeros
         * (their O and l are still 0). */
        UNROLL for (int i = 0; i < 2; ++i) {
            float mx = -INF_F;
            UNROLL for (int j = 0; j < NT; ++j) mx = FMAX(mx, FMAX(s[j][2 * i], s[j][2 * i + 1]));
            mx = FMAX(mx, SHFL_XOR(mx, 1));
            mx = FMAX(mx, SHFL_XOR(mx, 2));
            const float mnew = FMAX(m[i], mx);
            const float sub = mnew == -INF_F ? 0.0f : mnew;
            const float alpha = exp2_approx(m[i] - sub);
            m[i] = mnew;
            float sum = 0.0f;
            UNROLL for (int j = 0; j < NT; ++j) UNROLL for (int e = 2 * i; e < 2 * i + 2; ++e) {
                s[j][e] = exp2_approx(s[j][e] - sub);
                sum += s[j][e];
            }
            l[i] = l[i] * alpha + sum;
            UNROLL for (int n = 0; n < NV; ++n) {
                o[n][2 * i] *= alpha;
                o[n][2 * i + 1] *= alpha;
            }
        }

        /* O += P V. The C fragments of key n-tiles 2kk and 2kk+1 are, pair for pair, the A
         * fragment of the 16 x 16 block of P over keys 16kk..16kk+15: a0 = (row g, keys 2t, 2t+1)
         * = c0,c1 of n-tile 2kk; a1 = (row g+8, same keys) = its c2,c3; a2, a3 = the same of
         * n-tile 2kk+1 (keys 2t+8, 2t+9). So P goes from registers to the tensor cores directly. */
        UNROLL for (int kk = 0; kk < BKV / 16; ++kk) {
            const u32 pa[4] = {pack2(s[2 * kk][0], s[2 * kk][1]), pack2(s[2 * kk][2], s[2 * kk][3]),
                               pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               pack2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            UNROLL for (int p = 0; p < NV / 2; ++p) {
                u32 vb[4];
                ldsm_x4_trans(vb, vs + 2 * (16 * kk * LDV + 16 * p));
                mma16816(o[2 * p], pa, vb[0], vb[1]);
                mma16816(o[2 * p + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads();  /* every warp is done with stage cur before it is refilled */
    }

    /* Epilogue: whole row sums from the 4 lanes, O / l (a row with nothing visible has l = 0 and
     * gives zeros), rounded to IN_DT by STORE_OUT; o[n][e] is (row rows[e / 2],
     * dv 8n + 2t + e % 2). */
    UNROLL for (int i = 0; i < 2; ++i) {
        float sum = l[i];
        sum += SHFL_XOR(sum, 1);
        sum += SHFL_XOR(sum, 2);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        if (rows[i] < Sq) {
            OUT_T* orow = O + (i64)rows[i] * HEAD_DV + 2 * t;
            UNROLL for (int n = 0; n < NV; ++n) {
                STORE_OUT(orow, 8 * n, o[n][2 * i] * inv);
                STORE_OUT(orow, 8 * n + 1, o[n][2 * i + 1] * inv);
            }
        }
    }
}
#else
#error "attention_mma.cu needs sm_80 or later (mma.sync with bfloat16, cp.async, ldmatrix)"
#endif
