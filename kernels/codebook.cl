/* GGML's codebook weights (iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m; super-blocks of
 * 256): dequantize, and the quantized matmul with float x or x in q8_k. Layouts and the float32
 * operation order follow accel/formats/codebook.py (ggml's dequantize_row_iq*): a weight is its group's
 * scale times a grid value (with its sign, or iq1's offset of +-1/8 added), one rounding; the
 * scale is d times the sub-scale's factor, each operation rounded on its own. No a * b + c
 * appears, so no FMA contraction can change a bit: dequantize is bit-exact with gguf-py.
 *
 * The grid (float32 [entries x 4 or 8], from gguf-py at run time) comes in as a buffer: the
 * sources hold no table. Defines: one of FMT_IQ2_XXS, FMT_IQ2_XS, FMT_IQ2_S, FMT_IQ3_XXS,
 * FMT_IQ3_S, FMT_IQ1_S, FMT_IQ1_M; IN_DT (x's dtype, also qmatmul's output); CB_RM rows of x
 * per qmatmul work-item.
 */
#define OUT_DT IN_DT
#if FMT_IQ2_XS || FMT_IQ2_S || FMT_IQ1_M /* CB_GROUP: weights sharing a scale */
#define CB_GROUP 16
#else
#define CB_GROUP 32
#endif
#if FMT_IQ2_XXS
#define BLOCK_BYTES 66
#elif FMT_IQ2_XS
#define BLOCK_BYTES 74
#elif FMT_IQ2_S
#define BLOCK_BYTES 82
#elif FMT_IQ3_XXS
#define BLOCK_BYTES 98
#elif FMT_IQ3_S
#define BLOCK_BYTES 110
#elif FMT_IQ1_S
#define BLOCK_BYTES 50
#elif FMT_IQ1_M
#define BLOCK_BYTES 56
#else
#error "define one of the codebook formats"
#endif
#define CB_DELTA 0.125f /* iq1's IQ1S_DELTA */

DEVICE u32 cb_u16(GLOBAL const u8* RESTRICT p) { return (u32)p[0] | ((u32)p[1] << 8); }
DEVICE u32 cb_u32(GLOBAL const u8* RESTRICT p) { return cb_u16(p) | (cb_u16(p + 2) << 16); }

/* ksigns_iq2xs: 7 stored sign bits, their parity the eighth; bit j set: weight j negative */
DEVICE u32 cb_ksigns(u32 s7) {
    u32 p = s7 ^ (s7 >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return s7 | ((p & 1u) << 7);
}

DEVICE float cb_signed(float g, u32 signs, int j) { return ((signs >> j) & 1u) ? -g : g; }

/* the 4-bit sub-scale k of a row of nibbles at p: low nibble for even k */
DEVICE int cb_nibble(GLOBAL const u8* RESTRICT p, int k) { return (p[k / 2] >> (4 * (k % 2))) & 15; }

/* weights e0 .. e0 + 7 of a block (e0 a multiple of 8: one grid entry of 8 values or two of 4,
 * one sign byte, one scale): returns their group's scale and writes their values to v (a grid
 * entry with its sign, or iq1's entry plus its offset); a weight is scale times value, one
 * rounding. Eight at a time: the words, scale and signs are read once for the eight. */
DEVICE float cb_decode8(GLOBAL const u8* RESTRICT blk, int e0, GLOBAL const float* RESTRICT grid,
                        float* v) {
#if FMT_IQ1_M /* d: a float16 spread over the top nibbles of the four scale words at 48 */
    const u32 d16 = (cb_u16(blk + 48) >> 12) | ((cb_u16(blk + 50) >> 8) & 0xF0u)
                  | ((cb_u16(blk + 52) >> 4) & 0xF00u) | (cb_u16(blk + 54) & 0xF000u);
    const float d = f16_to_f32(d16);
#else
    const float d = f16_to_f32(cb_u16(blk));
#endif
#if FMT_IQ2_XXS /* per 32: a u32 of 4 grid bytes, a u32 of 4 x 7 sign bits and a 4-bit scale */
    const int ib = e0 / 32, l = e0 % 32 / 8;
    const u32 w0 = cb_u32(blk + 2 + 8 * ib), w1 = cb_u32(blk + 6 + 8 * ib);
    const u32 gi = (w0 >> (8 * l)) & 255u, signs = cb_ksigns((w1 >> (7 * l)) & 127u);
    for (int j = 0; j < 8; ++j) v[j] = cb_signed(grid[gi * 8 + j], signs, j);
    return (d * (0.5f + (float)(w1 >> 28))) * 0.25f;
#elif FMT_IQ2_XS /* per 8 weights a u16: 9 grid bits, 7 sign bits; a 4-bit scale per 16 */
    const u32 q = cb_u16(blk + 2 + 2 * (e0 / 8)), signs = cb_ksigns(q >> 9);
    for (int j = 0; j < 8; ++j) v[j] = cb_signed(grid[(q & 511u) * 8 + j], signs, j);
    return (d * (0.5f + (float)cb_nibble(blk + 66, e0 / 16))) * 0.25f;
#elif FMT_IQ2_S /* 32 grid bytes + 2 high bits each from qh, 32 sign bytes, 4-bit scales */
    const int t = e0 / 8;
    const u32 idx = (u32)blk[2 + t] | (((u32)blk[66 + t / 4] << (8 - 2 * (t % 4))) & 0x300u);
    for (int j = 0; j < 8; ++j) v[j] = cb_signed(grid[idx * 8 + j], blk[34 + t], j);
    return (d * (0.5f + (float)cb_nibble(blk + 74, e0 / 16))) * 0.25f;
#elif FMT_IQ3_XXS /* 64 grid bytes of 4 values; per 32 a u32 of 4 x 7 sign bits and a scale */
    const int ib = e0 / 32, r = e0 % 32;
    const u32 w = cb_u32(blk + 66 + 4 * ib), signs = cb_ksigns((w >> (7 * (r / 8))) & 127u);
    for (int j = 0; j < 8; ++j)
        v[j] = cb_signed(grid[(u32)blk[2 + 8 * ib + r / 4 + j / 4] * 4 + j % 4], signs, j);
    return (d * (0.5f + (float)(w >> 28))) * 0.5f;
#elif FMT_IQ3_S /* 64 grid bytes + a ninth bit each from qh, 32 sign bytes, 4-bit scales per 32 */
    for (int j = 0; j < 8; ++j) {
        const int t = e0 / 4 + j / 4;
        const u32 idx = (u32)blk[2 + t] | ((((u32)blk[66 + t / 8] >> (t % 8)) & 1u) << 8);
        v[j] = cb_signed(grid[idx * 4 + j % 4], blk[74 + e0 / 8], j);
    }
    return d * (float)(1 + 2 * cb_nibble(blk + 106, e0 / 32));
#elif FMT_IQ1_S /* per 32: 4 grid bytes + 3 high bits each, a 3-bit scale and delta's sign */
    const int ib = e0 / 32, l = e0 % 32 / 8;
    const u32 qh = cb_u16(blk + 34 + 2 * ib);
    const u32 idx = (u32)blk[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
    for (int j = 0; j < 8; ++j) v[j] = grid[idx * 8 + j] + ((qh & 0x8000u) ? -CB_DELTA : CB_DELTA);
    return d * (float)(2 * (int)((qh >> 12) & 7u) + 1);
#else /* iq1_m: per pair of entries a byte of two 3-bit high parts and delta signs; 3-bit
       * scales per 16, four to each scale word */
    const int t = e0 / 8, k = e0 / 16;
    const u32 h = (u32)blk[32 + t / 2] >> (4 * (t % 2));
    const u32 idx = (u32)blk[t] | ((h & 7u) << 8);
    for (int j = 0; j < 8; ++j) v[j] = grid[idx * 8 + j] + ((h & 8u) ? -CB_DELTA : CB_DELTA);
    return d * (float)(2 * (int)((cb_u16(blk + 48 + 2 * (k / 4)) >> (3 * (k % 4))) & 7u) + 1);
#endif
}

/* A work-item per 8 weights: n values in all (a multiple of 256). */
KERNEL void dequantize_cb(GLOBAL const u8* RESTRICT q, GLOBAL const float* RESTRICT grid,
                          GLOBAL float* RESTRICT out, i64 n) {
    const i64 g = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (g >= n / 8) return;
    float v[8];
    const float scale = cb_decode8(q + (g / 32) * BLOCK_BYTES, (int)(g % 32) * 8, grid, v);
    for (int j = 0; j < 8; ++j) out[g * 8 + j] = scale * v[j];
}

/* out[m, n] = sum_k x[m, k] * dequantize(w)[n, k], float32 sums: a work-item per weight row n
 * and tile of CB_RM rows of x, each weight decoded once for the tile's rows.
 * Grid: dim 0 over the N weight rows, dim 1 over the tiles of the M rows of x (CB_RM, a define
 * of the variant). */
KERNEL void qmatmul_cb(GLOBAL const IN_T* RESTRICT x, GLOBAL const u8* RESTRICT w,
                       GLOBAL const float* RESTRICT grid, GLOBAL OUT_T* RESTRICT out,
                       int M, int N, int K) {
    const int n = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    const int m0 = (GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1)) * CB_RM;
    if (n >= N || m0 >= M) return;
    const int rows = imin(CB_RM, M - m0);
    GLOBAL const IN_T* xr = x + (i64)m0 * K;
    GLOBAL const u8* wr = w + (i64)n * (K / 256) * BLOCK_BYTES;
    float acc[CB_RM];
    for (int i = 0; i < CB_RM; ++i) acc[i] = 0.0f;
    for (int b = 0; b < K / 256; ++b)
        for (int e0 = 0; e0 < 256; e0 += 8) {
            float v[8];
            const float scale = cb_decode8(wr + (i64)b * BLOCK_BYTES, e0, grid, v);
            for (int j = 0; j < 8; ++j) {
                const float wj = scale * v[j];
                for (int i = 0; i < rows; ++i)
                    acc[i] = FMA(LOAD_IN(xr, (i64)i * K + b * 256 + e0 + j), wj, acc[i]);
            }
        }
    for (int i = 0; i < rows; ++i) STORE_OUT(out, (i64)(m0 + i) * N + n, acc[i]);
}

/* out[m, n] with x quantized to q8_k (ggml's vec_dot partner of every codebook format; 292-byte
 * blocks: float32 d, 256 int8 codes, 16 int16 sums): per group of weights sharing a scale, the
 * sum of its values times x's codes, exact in float32 (integers, or eighths for iq1, below
 * 2^16); times the group's scale, the groups of each 32 weights added; times x's d, float32
 * sums over K. The CPU reference (accel/formats/codebook.py dot) adds the same terms in float64:
 * the two agree within the float32 bound of K / 32 terms. Tiles and grid as qmatmul_cb's. */
#define CBX_BYTES 292
KERNEL void qmatmul_cbx(GLOBAL const u8* RESTRICT xq, GLOBAL const u8* RESTRICT w,
                        GLOBAL const float* RESTRICT grid, GLOBAL OUT_T* RESTRICT out,
                        int M, int N, int K) {
    const int n = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    const int m0 = (GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1)) * CB_RM;
    if (n >= N || m0 >= M) return;
    const int rows = imin(CB_RM, M - m0), nb = K / 256;
    GLOBAL const u8* wr = w + (i64)n * nb * BLOCK_BYTES;
    float acc[CB_RM];
    for (int i = 0; i < CB_RM; ++i) acc[i] = 0.0f;
    for (int b = 0; b < nb; ++b) {
        GLOBAL const u8* blk = wr + (i64)b * BLOCK_BYTES;
        GLOBAL const u8* xb = xq + ((i64)m0 * nb + b) * CBX_BYTES;
        for (int s = 0; s < 256; s += 32) {
            float t[CB_RM];
            for (int i = 0; i < CB_RM; ++i) t[i] = 0.0f;
            for (int g = s; g < s + 32; g += CB_GROUP) {
                float sum[CB_RM], scale = 0.0f;
                for (int i = 0; i < CB_RM; ++i) sum[i] = 0.0f;
                for (int e0 = g; e0 < g + CB_GROUP; e0 += 8) {
                    float v[8];
                    scale = cb_decode8(blk, e0, grid, v);
                    for (int j = 0; j < 8; ++j)
                        for (int i = 0; i < rows; ++i)
                            sum[i] += v[j] * (float)(i8)xb[(i64)i * nb * CBX_BYTES + 4 + e0 + j];
                }
                for (int i = 0; i < rows; ++i) t[i] += scale * sum[i];
            }
            for (int i = 0; i < rows; ++i)
                acc[i] += AS_FLOAT(cb_u32(xb + (i64)i * nb * CBX_BYTES)) * t[i];
        }
    }
    for (int i = 0; i < rows; ++i) STORE_OUT(out, (i64)(m0 + i) * N + n, acc[i]);
}
