/* GGUF K-quant and MXFP4 weights: dequantize and the float-x quantized matmul for q4_k, q5_k,
 * q6_k, mxfp4 and q8_k blocks (layouts in docs/api.md, GGML's ggml-common.h). Every value is
 * decoded as GGML's dequantize_row_* rounds it: (d * sc) * q - dmin * m, each product and the
 * difference rounded on its own (no FMA contraction), so dequantize is bit-exact.
 *
 * Defines: one of FMT_Q4_K, FMT_Q5_K, FMT_Q6_K, FMT_MXFP4, FMT_Q8_K; IN_DT and OUT_DT (F32,
 * F16, BF16) for qmatmul_k.
 * Both kernels work in sub-blocks of 32 values (a K-quant super-block holds 8, an mxfp4 block 1).
 */
#if FMT_Q4_K
#define QB 256
#define BLOCK_BYTES 144
#elif FMT_Q5_K
#define QB 256
#define BLOCK_BYTES 176
#elif FMT_Q6_K
#define QB 256
#define BLOCK_BYTES 210
#elif FMT_Q8_K
#define QB 256
#define BLOCK_BYTES 292
#else
#define QB 32
#define BLOCK_BYTES 17
#endif
#define SUBS (QB / 32)

/* The 6-bit scale (*sc) and min (*m) of sub-block j from a q4_k/q5_k block's 12 scale bytes:
 * sub-blocks 0-3 in the low 6 bits of bytes 0-3 and 4-7, 4-7 in the nibbles of bytes 8-11 with
 * their top two bits in the top bits of bytes 0-3 (scales) and 4-7 (mins). */
DEVICE void scale_min_k4(GLOBAL const u8* RESTRICT s, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* GGML's E8M0 scale halved (mxfp4 codes are twice the FP4 values): 2^(e - 128), subnormal for
 * e < 2. */
DEVICE float e8m0_half(int e) {
    return AS_FLOAT((u32)(e < 2 ? 0x00200000u << e : (u32)(e - 1) << 23));
}

/* Twice the FP4 (E2M1) value of mxfp4 code c (GGML's kvalues_mxfp4). */
DEVICE int e2m1_x2(int c) {
    const int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    return (c & 8) ? -mag[c & 7] : mag[c & 7];
}

/* The 32 values of sub-block j of the block at blk, in v. */
DEVICE void decode32(GLOBAL const u8* RESTRICT blk, int j, float* v) {
#if FMT_Q4_K || FMT_Q5_K
    int sc, m;
    scale_min_k4(blk + 4, j, &sc, &m);
    const float d = FMUL_RN(LOAD_F16((GLOBAL const T_F16*)blk, 0), (float)sc);
    const float mn = FMUL_RN(LOAD_F16((GLOBAL const T_F16*)blk, 1), (float)m);
    GLOBAL const u8* qs = blk + BLOCK_BYTES - 128 + 32 * (j / 2);  /* nibble j % 2 of 32 bytes */
    for (int l = 0; l < 32; ++l) {
        int q = (qs[l] >> (4 * (j % 2))) & 15;
#if FMT_Q5_K
        q |= ((blk[16 + l] >> j) & 1) << 4;  /* the fifth bit: bit j of qh[l] */
#endif
        v[l] = FADD_RN(FMUL_RN(d, (float)q), -mn);
    }
#elif FMT_Q6_K
    const float d = LOAD_F16((GLOBAL const T_F16*)(blk + 208), 0);
    for (int l = 0; l < 32; ++l) {
        const int i = 32 * j + l, h = i / 128, k = i % 128;  /* half h, position k within it */
        const int lo = (blk[64 * h + k % 64] >> (4 * (k / 64))) & 15;
        const int hi = (blk[128 + 32 * h + k % 32] >> (2 * (k / 32))) & 3;
        const float ds = FMUL_RN(d, (float)(i8)blk[192 + i / 16]);
        v[l] = FMUL_RN(ds, (float)(lo + 16 * hi - 32));
    }
#elif FMT_Q8_K
    const float d = AS_FLOAT((u32)blk[0] | ((u32)blk[1] << 8) | ((u32)blk[2] << 16) | ((u32)blk[3] << 24));
    for (int l = 0; l < 32; ++l) v[l] = FMUL_RN(d, (float)(i8)blk[4 + 32 * j + l]);
#else
    const float d = e8m0_half(blk[0]);
    for (int l = 0; l < 32; ++l) {
        const int byte = blk[1 + (l & 15)];  /* element l: low nibble, l + 16: high */
        v[l] = FMUL_RN((float)e2m1_x2(l < 16 ? byte & 15 : byte >> 4), d);
    }
#endif
}

/* One work-item per sub-block of 32 values: q holds n / QB blocks, out n values. */
KERNEL void dequantize_k(GLOBAL const u8* RESTRICT q, GLOBAL float* RESTRICT out, i64 n) {
    const i64 s = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (s >= n / 32) return;
    float v[32];
    decode32(q + (s / SUBS) * BLOCK_BYTES, (int)(s % SUBS), v);
    for (int l = 0; l < 32; ++l) out[s * 32 + l] = v[l];
}

/* out[m, n] = sum_k x[m, k] * dequantize(w)[n, k], float32 sums: one work-item per output.
 * Grid: dim 0 over the N weight rows, dim 1 over the M rows of x. */
KERNEL void qmatmul_k(GLOBAL const IN_T* RESTRICT x, GLOBAL const u8* RESTRICT w,
                      GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    const int n = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    const int m = GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1);
    if (n >= N || m >= M) return;
    GLOBAL const IN_T* xr = x + (i64)m * K;
    GLOBAL const u8* wr = w + (i64)n * (K / QB) * BLOCK_BYTES;
    float acc = 0.0f;
    for (int s = 0; s < K / 32; ++s) {
        float v[32];
        decode32(wr + (i64)(s / SUBS) * BLOCK_BYTES, s % SUBS, v);
        float part = 0.0f;
        for (int l = 0; l < 32; ++l) part = FMA(LOAD_IN(xr, s * 32 + l), v[l], part);
        acc += part;
    }
    STORE_OUT(out, (i64)m * N + n, acc);
}
