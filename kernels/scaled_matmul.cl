/* FP8 scaled matmul: C = (A * scale_a) @ (B * scale_b) + bias for row-major FP8 A [M, K] and
 * B [K, N] (docs/api.md). No dialect has an FP8 type everywhere (OpenCL C has none), so the bytes
 * are decoded in registers with integer operations, exactly: subnormals, e4m3fn's NaN S.1111.111,
 * e4m3fnuz's one NaN 0x80 (no negative zero, exponent bias 8), e5m2's infinities and NaNs. Every
 * product of two decoded values is exact in float32 (at most 8 significant bits, magnitudes
 * 2^-25 .. 2^25), so the sums are float32 accumulations of exact products; the scales multiply
 * each sum ((sum * sa) * sb), then the bias is added and the output rounded once (smm_store).
 *
 * Defines: A_FP8, B_FP8 (e4m3fn, e5m2 or e4m3fnuz: the formats of A and B), TM x TN outputs per
 * work-item (TN dividing 128: a work-item's columns share one block of B), VW lanes (OpenCL only;
 * VW divides TN). Everything outside the loop over K is chosen by arguments, so that one build
 * per format pair serves every case (dtype codes: 0 float32, 1 float16, 2 bfloat16):
 * `scaling` 0: one scale per tensor, SA[0] and SB[0]; 1: per row of A and column of B, SA [M]
 * and SB [N]; 2: per block, SA [M, K/128] for 1x128 tiles of A and SB [K/128, ceil(N/128)] for
 * 128x128 tiles of B, K a multiple of 128 (each 128-deep slab of K is summed on its own, then
 * scaled); `out_dt` the dtype of C; `bias_dt` that of the bias [N], -1 for none.
 * Grid: dim 0 over column tiles (TN columns per work-item), dim 1 over row tiles (TM rows); any
 * work-group size.
 */
#define SCALE_TENSOR 0
#define SCALE_ROW 1
#define SCALE_BLOCK 2
#define FP8_BLOCK 128
#define TNV (TN / VW)
#if TN % VW || FP8_BLOCK % TN
#error "TN must be a multiple of VW and divide 128"
#endif

/* VW lanes of unsigned bits: FP8 bytes widened to 32 bits, float bit patterns */
#if VW == 1
typedef u32 vu_t;
#define VLOAD_BYTES(p, i) ((u32)(p)[i])
#define VU_BITS_F(u) AS_FLOAT(u)
#define VF_BITS_U(f) AS_UINT(f)
#define VU_TO_F(u) ((float)(u))
#else
typedef ACCEL_CAT(uint, VW) vu_t;
#define FP8_LANE(p, i) ((u32)(p)[i])
#define VLOAD_BYTES(p, i) ((vu_t)(ACCEL_LANES(FP8_LANE, p, i)))
#define VU_BITS_F(u) ACCEL_CAT(as_float, VW)(u)
#define VF_BITS_U(f) ACCEL_CAT(as_uint, VW)(f)
#define VU_TO_F(u) ACCEL_CAT(convert_float, VW)(u)
#endif
#define QNAN_BITS 0x7FC00000u
/* Each store picks its dtypes at run time: unrolled over a CPU tile's hundreds of outputs, the three
 * conversions made PoCL's compile take minutes; GPU tiles (VW 1) are small enough to keep the
 * tile in registers, which a loop over lanes would move to the stack. */
#if VW == 1
#define STORE_UNROLL UNROLL
#else
#define STORE_UNROLL _Pragma("unroll 1")
#endif

/* Each decoder maps bytes u (0..255 per lane) to float32 values. Subnormals are their mantissa
 * (a small integer, exactly a float) times a power of two, so a device that flushes float
 * subnormals decodes them right too; normals move their exponent and mantissa bits into place
 * and add the difference of the biases to the exponent. */
/* OCP e4m3fn: bias 7, subnormals m * 2^-9, largest 448 (0x7E), NaN S.1111.111, no infinities */
DEVICE vf_t dec_e4m3fn(vu_t u) {
    const vu_t em = u & 0x7Fu;
    const vu_t tiny = VF_BITS_U(VU_TO_F(em) * 0x1p-9f);
    const vu_t mag = em < 8u ? tiny : em == 0x7Fu ? (vu_t)QNAN_BITS : (em << 20) + (120u << 23);
    return VU_BITS_F(mag | (u & 0x80u) << 24);
}
/* AMD MI300's e4m3fnuz: bias 8, subnormals m * 2^-10, largest 240 (0x7F), 0x80 the only NaN
 * (no negative zero), no infinities */
DEVICE vf_t dec_e4m3fnuz(vu_t u) {
    const vu_t em = u & 0x7Fu;
    const vu_t tiny = VF_BITS_U(VU_TO_F(em) * 0x1p-10f);
    const vu_t mag = (em < 8u ? tiny : (em << 20) + (119u << 23)) | (u & 0x80u) << 24;
    return VU_BITS_F(u == 0x80u ? (vu_t)QNAN_BITS : mag);
}
/* OCP e5m2 (float16's top byte): bias 15, subnormals m * 2^-16, largest 57344, S.11111.00
 * infinities, S.11111.xx NaNs */
DEVICE vf_t dec_e5m2(vu_t u) {
    const vu_t em = u & 0x7Fu;
    const vu_t tiny = VF_BITS_U(VU_TO_F(em) * 0x1p-16f);
    const vu_t mag = em < 4u ? tiny : em >= 0x7Cu ? (em << 21) | 0x7F800000u : (em << 21) + (112u << 23);
    return VU_BITS_F(mag | (u & 0x80u) << 24);
}
#define DEC_A ACCEL_CAT(dec_, A_FP8)
#define DEC_B ACCEL_CAT(dec_, B_FP8)

/* Row k of the tile's TM rows of A and TN columns of B into acc. `full` (a whole tile) is a
 * compile-time constant after inlining: interior tiles get contiguous loads; edge tiles clamp
 * their rows and columns (the clamped lanes compute values that are never stored). A's byte is
 * decoded as a VW-lane broadcast, ready for the lanes of B. */
DEVICE void smm_k(GLOBAL const u8* RESTRICT A, GLOBAL const u8* RESTRICT B, vf_t acc[TM][TNV],
                  int M, int N, int K, int m0, int n0, int k, const int full) {
    GLOBAL const u8* brow = B + (i64)k * N;
    vf_t b[TNV];
    if (full) {
        UNROLL for (int j = 0; j < TNV; ++j) b[j] = DEC_B(VLOAD_BYTES(brow, n0 + j * VW));
    } else {
        u32 bytes[TN];
        UNROLL for (int j = 0; j < TN; ++j) bytes[j] = brow[imin(n0 + j, N - 1)];
        UNROLL for (int j = 0; j < TNV; ++j) b[j] = DEC_B(VGATHER(vu_t, bytes, j * VW));
    }
    UNROLL for (int i = 0; i < TM; ++i) {
        const vf_t a = DEC_A((vu_t)(A[(i64)(full ? m0 + i : imin(m0 + i, M - 1)) * K + k]));
        UNROLL for (int j = 0; j < TNV; ++j) acc[i][j] = FMA(a, b[j], acc[i][j]);
    }
}

/* Rows [k0, k1) of K into acc (zeroed first). */
DEVICE void smm_slab(GLOBAL const u8* RESTRICT A, GLOBAL const u8* RESTRICT B, vf_t acc[TM][TNV],
                     int M, int N, int K, int m0, int n0, int k0, int k1, const int full) {
    UNROLL for (int i = 0; i < TM; ++i) UNROLL for (int j = 0; j < TNV; ++j) acc[i][j] = (vf_t)0;
    for (int k = k0; k < k1; ++k) smm_k(A, B, acc, M, N, K, m0, n0, k, full);
}

/* The scales of slab s for the tile's rows (sa) and columns (sb). */
DEVICE void smm_scales(GLOBAL const float* RESTRICT SA, GLOBAL const float* RESTRICT SB, int scaling,
                       int M, int N, int K, int m0, int n0, int s, const int full, float sa[TM],
                       vf_t sb[TNV]) {
    UNROLL for (int i = 0; i < TM; ++i) {
        const int m = full ? m0 + i : imin(m0 + i, M - 1);
        sa[i] = SA[scaling == SCALE_TENSOR ? 0 : scaling == SCALE_ROW ? (i64)m : (i64)m * (K / FP8_BLOCK) + s];
    }
    if (scaling != SCALE_ROW) {
        const float v = SB[scaling == SCALE_TENSOR ? 0 : (i64)s * ((N - 1) / FP8_BLOCK + 1) + n0 / FP8_BLOCK];
        UNROLL for (int j = 0; j < TNV; ++j) sb[j] = (vf_t)(v);
    } else if (full) {
        UNROLL for (int j = 0; j < TNV; ++j) sb[j] = VLOAD_F32(SB, n0 + j * VW);
    } else {
        float c[TN];
        UNROLL for (int j = 0; j < TN; ++j) c[j] = SB[imin(n0 + j, N - 1)];
        UNROLL for (int j = 0; j < TNV; ++j) sb[j] = VGATHER(vf_t, c, j * VW);
    }
}

/* Element i of an output or bias of dtype code dt (0 float32, 1 float16, 2 bfloat16). */
DEVICE void smm_store(GLOBAL u8* RESTRICT C, i64 i, int dt, float v) {
    if (dt == 0) ((GLOBAL float*)C)[i] = v;
    else if (dt == 1) STORE_F16((GLOBAL u16*)C, i, v);
    else STORE_BF16((GLOBAL u16*)C, i, v);
}
DEVICE float smm_load(GLOBAL const u8* RESTRICT p, int i, int dt) {
    return dt == 0 ? ((GLOBAL const float*)p)[i]
         : dt == 1 ? LOAD_F16((GLOBAL const u16*)p, i) : LOAD_BF16((GLOBAL const u16*)p, i);
}

DEVICE void smm_tile(GLOBAL const u8* RESTRICT A, GLOBAL const u8* RESTRICT B,
                     GLOBAL const float* RESTRICT SA, GLOBAL const float* RESTRICT SB,
                     GLOBAL const u8* RESTRICT bias, GLOBAL u8* RESTRICT C, int M, int N, int K,
                     int scaling, int out_dt, int bias_dt, int m0, int n0, const int full) {
    vf_t acc[TM][TNV], tot[TM][TNV], sb[TNV];
    float sa[TM];
    const int slab = scaling == SCALE_BLOCK ? FP8_BLOCK : K;
    const int slabs = scaling == SCALE_BLOCK ? K / FP8_BLOCK : 1;
    UNROLL for (int i = 0; i < TM; ++i) UNROLL for (int j = 0; j < TNV; ++j) tot[i][j] = (vf_t)0;
    for (int s = 0; s < slabs; ++s) {
        smm_slab(A, B, acc, M, N, K, m0, n0, s * slab, (s + 1) * slab, full);
        smm_scales(SA, SB, scaling, M, N, K, m0, n0, s, full, sa, sb);
        UNROLL for (int i = 0; i < TM; ++i)
            UNROLL for (int j = 0; j < TNV; ++j)
                tot[i][j] = FADD_RN(tot[i][j], FMUL_RN(FMUL_RN(acc[i][j], (vf_t)(sa[i])), sb[j]));
    }
    STORE_UNROLL for (int i = 0; i < TM; ++i) {
        if (!full && m0 + i >= M) break;
        STORE_UNROLL for (int j = 0; j < TN; ++j) {
            if (!full && n0 + j >= N) break;
            float v = VGET(float, tot[i][j / VW], j % VW);
            if (bias_dt >= 0) v = FADD_RN(v, smm_load(bias, n0 + j, bias_dt));
            smm_store(C, (i64)(m0 + i) * N + n0 + j, out_dt, v);
        }
    }
}

KERNEL void scaled_matmul(GLOBAL const u8* RESTRICT A, GLOBAL const u8* RESTRICT B,
                          GLOBAL const float* RESTRICT SA, GLOBAL const float* RESTRICT SB,
                          GLOBAL const u8* RESTRICT bias, GLOBAL u8* RESTRICT C,
                          int M, int N, int K, int scaling, int out_dt, int bias_dt) {
    const int n0 = (GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0)) * TN;
    const int m0 = (GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1)) * TM;
    if (m0 >= M || n0 >= N) return;
    if (m0 + TM <= M && n0 + TN <= N)
        smm_tile(A, B, SA, SB, bias, C, M, N, K, scaling, out_dt, bias_dt, m0, n0, 1);
    else
        smm_tile(A, B, SA, SB, bias, C, M, N, K, scaling, out_dt, bias_dt, m0, n0, 0);
}
