/* GGUF Q8_0 / Q4_0 block quantization, bit-exact with GGML's reference quantizer on every
 * compiler: every multiply and add is rounded on its own (no FMA contraction, FMUL_RN/FADD_RN),
 * 1/d is correctly rounded (FDIV_RN), d is stored as float16 rounded to nearest even.
 *
 * Defines: FMT_Q8_0 or FMT_Q4_0; IN_DT (F32, F16, BF16) for quantize; OUT_DT for qmatmul;
 * RM, RN, VW for qmatmul; GEMV_WG (a power of two) for qgemv.
 * Blocks: 32 values; Q8_0 = float16 d + 32 int8 codes (34 bytes), Q4_0 = float16 d + 16 bytes
 * whose low nibble is element j and high nibble element j + 16 (18 bytes).
 * Non-finite blocks (accel's definition): a NaN gives d = NaN (0x7E00) and zero codes, an
 * infinity (no NaN) gives the reference d (infinite) and zero codes.
 */
#define QK 32
#if FMT_Q8_0
#define BLOCK_BYTES 34
#else
#define BLOCK_BYTES 18
#endif

/* One work-item per block: x holds nblocks * 32 values, out nblocks * BLOCK_BYTES bytes. */
KERNEL void quantize(GLOBAL const IN_T* RESTRICT x, GLOBAL u8* RESTRICT out, i64 nblocks) {
    i64 blk = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (blk >= nblocks) return;
    float v[QK];
    int has_nan = 0, finite = 1;
    for (int j = 0; j < QK; ++j) {
        v[j] = LOAD_IN(x, blk * QK + j);
        has_nan |= IS_NAN(v[j]);
        finite &= !(IS_NAN(v[j]) || IS_INF(v[j]));
    }
    /* the first element of largest magnitude, as ggml-quants.c finds it: starting from +0.0, so
     * a block of (signed) zeros keeps +0.0 and Q4_0 stores d = 0.0 / -8 = -0.0 (0x8000) */
    float extreme = 0.0f;
    for (int j = 0; j < QK; ++j)
        if (FABS(v[j]) > FABS(extreme)) extreme = v[j];
#if FMT_Q8_0
    float d = FDIV_RN(FABS(extreme), 127.0f);
#else
    float d = FDIV_RN(extreme, -8.0f);
#endif
    float id = (d != 0.0f && finite) ? FDIV_RN(1.0f, d) : 0.0f;
    if (IS_INF(id)) id = 0.0f; /* accel's rule where C is undefined: 1/d overflow gives zero codes */
    GLOBAL u8* ob = out + blk * BLOCK_BYTES;
    if (has_nan) {  /* 0x7E00 written as bytes: float16 conversions disagree on NaN payloads */
        ob[0] = 0x00; ob[1] = 0x7E;
    } else {
        STORE_F16((GLOBAL T_F16*)ob, 0, d);
    }
#if FMT_Q8_0
    for (int j = 0; j < QK; ++j) {
        float r = finite ? ROUND_HALF_AWAY(FMUL_RN(v[j], id)) : 0.0f;
        ob[2 + j] = (u8)(i8)(int)r;
    }
#else
    for (int j = 0; j < QK / 2; ++j) {
        float lo = finite ? FMUL_RN(v[j], id) : 0.0f;
        float hi = finite ? FMUL_RN(v[j + QK / 2], id) : 0.0f;
        int clo = imin(15, (int)FADD_RN(lo, 8.5f)), chi = imin(15, (int)FADD_RN(hi, 8.5f));
        ob[2 + j] = (u8)(clo | (chi << 4));
    }
#endif
}

DEVICE float block_scale(GLOBAL const u8* RESTRICT blk) {
    return LOAD_F16((GLOBAL const T_F16*)blk, 0);
}

DEVICE float block_code(GLOBAL const u8* RESTRICT blk, int j) {
#if FMT_Q8_0
    return (float)(i8)blk[2 + j];
#else
    int byte = blk[2 + (j & 15)];
    return (float)(((j < 16) ? (byte & 15) : (byte >> 4)) - 8);
#endif
}

/* One work-item per value: out[e] = code * d, a single rounding. */
KERNEL void dequantize(GLOBAL const u8* RESTRICT q, GLOBAL float* RESTRICT out, i64 n) {
    i64 e = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (e >= n) return;
    GLOBAL const u8* blk = q + (e / QK) * BLOCK_BYTES;
    out[e] = FMUL_RN(block_code(blk, (int)(e % QK)), block_scale(blk));
}

/* Fused quantized matmul: out[m, n] = sum_k x[m, k] * dequantize(w)[n, k], dequantizing in
 * registers. Each work-item computes RM rows of x against RN weight rows, VW lanes at a time
 * (RM = 1 is the GEMV path for a single row, memory-bound on the weight bytes).
 * Grid: dim 0 over weight-row groups (N / RN), dim 1 over x-row groups (M / RM). */
#define QKV (QK / VW)
KERNEL void qmatmul(GLOBAL const IN_T* RESTRICT x, GLOBAL const u8* RESTRICT w,
                    GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    const int n0 = (GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0)) * RN;
    const int m0 = (GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1)) * RM;
    if (n0 >= N || m0 >= M) return;
    const int nblk = K / QK;
    const i64 row_bytes = (i64)nblk * BLOCK_BYTES;
    GLOBAL const IN_T* xr[RM];
    GLOBAL const u8* wr[RN];
    UNROLL for (int i = 0; i < RM; ++i) xr[i] = x + (i64)imin(m0 + i, M - 1) * K;
    UNROLL for (int j = 0; j < RN; ++j) wr[j] = w + (i64)imin(n0 + j, N - 1) * row_bytes;
    vf_t acc[RM][RN];
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int j = 0; j < RN; ++j) acc[i][j] = (vf_t)0;
    for (int bk = 0; bk < nblk; ++bk) {
        vf_t xv[RM][QKV];
        UNROLL for (int i = 0; i < RM; ++i)
            UNROLL for (int t = 0; t < QKV; ++t) xv[i][t] = VLOAD_IN(xr[i], bk * QK + t * VW);
        UNROLL for (int j = 0; j < RN; ++j) {
            GLOBAL const u8* blk = wr[j] + (i64)bk * BLOCK_BYTES;
            vf_t d = (vf_t)block_scale(blk);
            vf_t wv[QKV];
            UNROLL for (int t = 0; t < QKV; ++t) {
#if FMT_Q8_0
                wv[t] = VCVT_F(VLOAD_I8((GLOBAL const i8*)blk, 2 + t * VW));
#else
                int e = t * VW;  /* elements e..e+VW-1: low nibbles below 16, high nibbles above */
                vi_t bytes = VLOAD_U8(blk, 2 + (e & 15));
                wv[t] = VCVT_F((e < QK / 2 ? (bytes & (vi_t)15) : (bytes >> (vi_t)4)) - (vi_t)8);
#endif
            }
            UNROLL for (int i = 0; i < RM; ++i) {
                vf_t part = xv[i][0] * wv[0];
                UNROLL for (int t = 1; t < QKV; ++t) part = FMA(xv[i][t], wv[t], part);
                acc[i][j] = FMA(d, part, acc[i][j]);
            }
        }
    }
    UNROLL for (int i = 0; i < RM; ++i) {
        if (m0 + i >= M) break;
        UNROLL for (int j = 0; j < RN; ++j) {
            if (n0 + j >= N) break;
            float sum = 0.0f;
            UNROLL for (int t = 0; t < VW; ++t) sum += VGET(float, acc[i][j], t);
            STORE_OUT(out, (i64)(m0 + i) * N + n0 + j, sum);
        }
    }
}

/* GEMV for GPUs: one work-group of GEMV_WG work-items per output (weight row n, x row m); the
 * work-items stride over the row's blocks, so neighbouring work-items read neighbouring blocks,
 * then the group reduces (warp shuffles where ACCEL_WARP > 0). Grid: dim 0 over N, dim 1 over M. */
#ifndef GEMV_WG
#define GEMV_WG 64
#endif
KERNEL void qgemv(GLOBAL const IN_T* RESTRICT x, GLOBAL const u8* RESTRICT w,
                  GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    LOCAL float scratch[GEMV_WG];
    const int n = GROUP_ID(0), m = GROUP_ID(1), t = LOCAL_ID(0);
    const int nblk = K / QK;
    GLOBAL const u8* row = w + (i64)n * nblk * BLOCK_BYTES;
    GLOBAL const IN_T* xr = x + (i64)m * K;
    float sum = 0.0f;
    for (int bk = t; bk < nblk; bk += GEMV_WG) {
        GLOBAL const u8* blk = row + (i64)bk * BLOCK_BYTES;
        float part = 0.0f;
        for (int j = 0; j < QK; ++j) part = FMA(LOAD_IN(xr, bk * QK + j), block_code(blk, j), part);
        sum = FMA(block_scale(blk), part, sum);
    }
    sum = group_sum(sum, scratch, GEMV_WG);
    if (t == 0) STORE_OUT(out, (i64)m * N + n, sum);
}
