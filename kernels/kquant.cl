/* GGUF K-quant and MXFP4 weights: quantize (not mxfp4), dequantize and the float-x quantized
 * matmul for q4_k, q5_k, q6_k, mxfp4 and q8_k blocks (layouts in docs/api.md, GGML's
 * ggml-common.h). Every value is
 * decoded as GGML's dequantize_row_* rounds it: (d * sc) * q - dmin * m, each product and the
 * difference rounded on its own (no FMA contraction), so dequantize is bit-exact.
 *
 * Bit-exact on all three dialects: GGML's reference is plain C float math, each operation rounded
 * once, while GPU compilers fuse a * b + c into an FMA by default (NVRTC --fmad=true, hip-clang
 * -ffp-contract=fast) and may divide or take roots approximately. So every rounding that decides
 * a quantized byte goes through accel.h's FMUL_RN / FADD_RN / FDIV_RN / SQRT_RN: on OpenCL plain
 * operators with contraction off and correctly rounded divide/sqrt (a build option); on CUDA the
 * __f*_rn intrinsics, which NVRTC never contracts; on HIP the operators under the header's
 * fp contract(off), IEEE division (its default) and a root through double.
 * tests/kernels/test_compile.py checks the GPU binaries for stray FMAs.
 *
 * Defines: one of FMT_Q4_K, FMT_Q5_K, FMT_Q6_K, FMT_MXFP4, FMT_Q8_K; IN_DT (F32, F16, BF16)
 * for quantize_k and qmatmul_k, OUT_DT for qmatmul_k.
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
#elif FMT_Q2_K
#define QB 256
#define BLOCK_BYTES 84
#elif FMT_Q3_K
#define QB 256
#define BLOCK_BYTES 110
#elif FMT_IQ4_XS
#define QB 256
#define BLOCK_BYTES 136
#elif FMT_Q4_1
#define QB 32
#define BLOCK_BYTES 20
#elif FMT_Q5_0
#define QB 32
#define BLOCK_BYTES 22
#elif FMT_Q5_1
#define QB 32
#define BLOCK_BYTES 24
#elif FMT_IQ4_NL
#define QB 32
#define BLOCK_BYTES 18
#elif FMT_Q8_1
#define QB 32
#define BLOCK_BYTES 36
#elif FMT_Q1_0
#define QB 128
#define BLOCK_BYTES 18
#elif FMT_TQ1_0
#define QB 256
#define BLOCK_BYTES 54
#elif FMT_TQ2_0
#define QB 256
#define BLOCK_BYTES 66
#elif FMT_NVFP4
#define QB 64
#define BLOCK_BYTES 36
#else
#define QB 32
#define BLOCK_BYTES 17
#endif
#define SUBS (QB / 32)
/* the formats this file reads through code_at / group_ints / block_d (dequantize_k, qmatmul_k,
 * qmatmul_kx; sub_codes for qgemv_k); their quantize_k: the legacy, search and sign kernels */
#define SIGNS (FMT_Q1_0 || FMT_TQ1_0 || FMT_TQ2_0) /* codes -1 / 1 or -1 / 0 / 1 times d */
#define DECODE_ONLY (FMT_Q4_1 || FMT_Q5_0 || FMT_Q5_1 || FMT_Q8_1 || FMT_Q2_K || FMT_Q3_K || \
                     FMT_IQ4_NL || FMT_IQ4_XS || SIGNS || FMT_NVFP4)
/* the activation formats have no x_format product */
#define NO_KX (FMT_Q8_K || FMT_Q8_1)
/* weight blocks that meet several q8_0 blocks (q1_0: 128 values, four; nvfp4: 64, two) */
#define KX_SPANS (FMT_Q1_0 || FMT_NVFP4)
/* the legacy layouts of blocks of 32: float16 d (then m or q8_1's s), the fifth bits, 16 bytes
 * of nibbles (q8_1: 32 int8 codes) */
#define LEGACY32 (FMT_Q4_1 || FMT_Q5_0 || FMT_Q5_1)
/* where q2_k's, q3_k's and tq2_0's 2-bit codes start (the same layout of 128-value halves) */
#if FMT_Q2_K
#define Q2_CODES_AT 16
#elif FMT_TQ2_0
#define Q2_CODES_AT 0
#else
#define Q2_CODES_AT 32
#endif
#if FMT_Q5_0
#define QH_AT 2
#define QS_AT 6
#elif FMT_Q5_1
#define QH_AT 4
#define QS_AT 8
#elif FMT_Q4_1
#define QS_AT 4
#endif

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

DEVICE u32 load_u32(GLOBAL const u8* RESTRICT p) {
#if defined(ACCEL_OPENCL) /* one unaligned load: PoCL 3.1 kept q5_0's 2-byte-aligned qh as 4 bytes
                           * from the shifts (vload4 is a library call on PyPI's PoCL 3.0) */
    return as_uint((uchar4)(p[0], p[1], p[2], p[3]));
#else
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
#endif
}

#if defined(ACCEL_OPENCL)
/* A q4_k block's 8 scales (first 8 bytes) and 8 mins (last 8) from its 12 scale bytes, 6 bits
 * each (scale_min_k4's layout), four sub-blocks per 32-bit lane, all four lanes at once. */
DEVICE uchar16 scales_mins_k4(GLOBAL const u8* RESTRICT s) {
    const uint4 ab = (uint2)(load_u32(s), load_u32(s + 4)).xxyy, c = (uint4)(load_u32(s + 8));
    const uint4 w = ((ab >> (uint4)(0, 2, 0, 2)) &
                     (uint4)(0x3F3F3F3Fu, 0x30303030u, 0x3F3F3F3Fu, 0x30303030u)) |
                    ((c >> (uint4)(0, 0, 0, 4)) & (uint4)(0, 0x0F0F0F0Fu, 0, 0x0F0F0F0Fu));
    return as_uchar16(w);
}
#endif

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

/* nvfp4's unsigned E4M3 sub-block scale, halved as GGML's ggml_ue4m3_to_fp32 (0 and 0x7F: 0;
 * four exponent bits, so the byte's top bit is not read): (8 + m) 2^(e - 11), or m 2^-10 */
DEVICE float ue4m3_half(int b) {
    const int e = (b >> 3) & 15, m = b & 7;
    if (b == 0x7F) return 0.0f;
    return e == 0 ? (float)m * 0.0009765625f : AS_FLOAT((u32)(e + 119) << 23 | (u32)m << 20);
}

/* iq4_nl's and iq4_xs's 16 code values (ggml-common.h's kvalues_iq4nl), as a list for the
 * scalar, float and byte tables below */
#define IQ4_VALUES -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113
DEVICE int iq4_value(int c) {
    const int kv[16] = {IQ4_VALUES};
    return kv[c & 15];
}

#if DECODE_ONLY
/* The integer code of element e of the block at blk: its value is a code - b, with a and b of
 * its group (group_ab). */
DEVICE int code_at(GLOBAL const u8* RESTRICT blk, int e) {
#if FMT_Q8_1
    return (i8)blk[4 + e];
#elif FMT_Q1_0 /* bit e % 8 of byte 2 + e / 8: +1 where set, -1 where clear */
    return ((blk[2 + e / 8] >> (e % 8)) & 1) ? 1 : -1;
#elif FMT_TQ2_0 /* element 128 j + 32 l + m: bits 2 l of byte 32 j + m, less 1 */
    return ((blk[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) - 1;
#elif FMT_TQ1_0
    /* trit n of byte b (five a byte: elements 32 n + m of bytes 0-31, 160 + 16 n + m of 32-47;
     * four: 240 + 4 n + m of 48-51) is the top trit of (b 3^n mod 256), ggml's base-3 packing */
    const int pow3[5] = {1, 3, 9, 27, 81};
    const int b = e < 160 ? blk[e % 32] : (e < 240 ? blk[32 + (e - 160) % 16] : blk[48 + (e - 240) % 4]);
    const int n = e < 160 ? e / 32 : (e < 240 ? (e - 160) / 16 : (e - 240) / 4);
    return ((((b * pow3[n]) & 255) * 3) >> 8) - 1;
#elif LEGACY32 /* element e: low nibble of byte e, e + 16: high; the fifth bit is bit e of qh */
    int q = (blk[QS_AT + (e & 15)] >> (4 * (e >> 4))) & 15;
#if QH_AT
    q |= (int)((load_u32(blk + QH_AT) >> e) & 1u) << 4;
#endif
#if FMT_Q5_0
    q -= 16;
#endif
    return q;
#elif FMT_IQ4_NL
    return iq4_value(blk[2 + (e & 15)] >> (4 * (e >> 4)));
#elif FMT_NVFP4 /* sub-block e / 16: element k < 8 the low nibble of byte k, k + 8 the high */
    const int k = e % 16;
    return e2m1_x2((blk[4 + 8 * (e / 16) + (k & 7)] >> (4 * (k >> 3))) & 15);
#elif FMT_IQ4_XS /* sub-block e / 32: 16 bytes of nibbles each */
    return iq4_value(blk[8 + 16 * (e / 32) + (e & 15)] >> (4 * ((e >> 4) & 1)));
#else /* q2_k, q3_k: element e = 128 h + 32 j + l reads bits 2 j of code byte 32 h + l */
    int q = (blk[Q2_CODES_AT + 32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
#if FMT_Q3_K /* less 4 where bit e / 32 of mask byte e % 32 is clear */
    q -= ((blk[e % 32] >> (e / 32)) & 1) ? 0 : 4;
#endif
    return q;
#endif
}

/* The integer scale and minimum of group g (16 elements) of a block: *a = d *sx, *b = dm *sy
 * are its a and b, with (d, dm) the block's float scales (block_d): q2_k's 4-bit pair; q3_k's
 * 6-bit scale less 32; iq4_xs's sub-block scale less 32; (1, -1) or (1, 0) for the blocks of
 * 32, whose a is d and b -m. */
DEVICE void group_ints(GLOBAL const u8* RESTRICT blk, int g, int* sx, int* sy) {
    *sy = 0;
#if FMT_Q2_K
    *sx = blk[g] & 15;
    *sy = blk[g] >> 4;
#elif FMT_Q3_K
    const int lo = g < 8 ? blk[96 + g] & 15 : blk[88 + g] >> 4;
    *sx = (lo | (((blk[104 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
#elif FMT_IQ4_XS
    const int j = g / 2, h = (int)blk[2] | ((int)blk[3] << 8);
    *sx = (((blk[4 + j / 2] >> (4 * (j % 2))) & 15) | (((h >> (2 * j)) & 3) << 4)) - 32;
#else
    *sx = 1;
#if FMT_Q4_1 || FMT_Q5_1
    *sy = -1;
#endif
#endif
}

/* The block's float scales d and dm (0 where it has no minimum). */
DEVICE void block_d(GLOBAL const u8* RESTRICT blk, float* d, float* dm) {
#if defined(ACCEL_F16C) && (LEGACY32 || FMT_IQ4_NL || FMT_IQ4_XS || FMT_Q2_K || FMT_TQ2_0)
    /* both halves by one vcvtph2ps where the block holds 4 bytes from d on: the integer
     * conversion took 18 instructions a scale (q5_0 GEMV, 4 rows a work-item: 47 a block-row) */
#if FMT_Q2_K
    const float2 f = f16x2_to_f32(load_u32(blk + 80));
#elif FMT_Q4_1 || FMT_Q5_1
    const float2 f = f16x2_to_f32(load_u32(blk));
#elif FMT_TQ2_0
    const float2 f = f16x2_to_f32(*(GLOBAL const T_F16*)(blk + 64));
#else /* d alone: a 4-byte load beside iq4_nl's codes made PoCL assemble them byte by byte */
    const float2 f = f16x2_to_f32(*(GLOBAL const T_F16*)blk);
#endif
    *d = f.x;
#if FMT_Q2_K || FMT_Q4_1 || FMT_Q5_1
    *dm = f.y;
#else
    *dm = 0.0f;
#endif
    return;
#endif
#if FMT_Q2_K
    GLOBAL const T_F16* h = (GLOBAL const T_F16*)(blk + 80);
#elif FMT_Q3_K
    GLOBAL const T_F16* h = (GLOBAL const T_F16*)(blk + 108);
#elif FMT_TQ1_0
    GLOBAL const T_F16* h = (GLOBAL const T_F16*)(blk + 52);
#elif FMT_TQ2_0
    GLOBAL const T_F16* h = (GLOBAL const T_F16*)(blk + 64);
#else
    GLOBAL const T_F16* h = (GLOBAL const T_F16*)blk;
#endif
    *d = LOAD_F16(h, 0);
#if FMT_Q2_K || FMT_Q4_1 || FMT_Q5_1
    *dm = LOAD_F16(h, 1);
#else
    *dm = 0.0f;
#endif
}

/* group g's a and b, each rounded once as ggml's dequantize_row_* rounds them */
DEVICE void group_scale(GLOBAL const u8* RESTRICT blk, int g, float* a, float* b) {
#if FMT_NVFP4 /* a scale byte per group of 16, no minimum */
    *a = ue4m3_half(blk[g]);
    *b = 0.0f;
    return;
#endif
    float d, dm;
    int sx, sy;
    block_d(blk, &d, &dm);
    group_ints(blk, g, &sx, &sy);
    *a = FMUL_RN(d, (float)sx);
    *b = FMUL_RN(dm, (float)sy);
}
#endif

/* The 32 values of sub-block j of the block at blk, in v. */
DEVICE void decode32(GLOBAL const u8* RESTRICT blk, int j, float* v) {
#if DECODE_ONLY /* a q - b: x0 * d + m in dequantize_row_q4_1, dl * q - ml in _q2_K */
    for (int l = 0; l < 32; ++l) {
        float a, b;
        group_scale(blk, (32 * j + l) / 16, &a, &b);
        v[l] = FADD_RN(FMUL_RN(a, (float)code_at(blk, 32 * j + l)), -b);
    }
#elif FMT_Q4_K || FMT_Q5_K
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

/* qgemv_k: the same product as qmatmul_k, for decode (M = 1..32) and beyond: a work-group of
 * KWG work-items computes RN weight rows against RM rows of x, splitting K: work-item t takes
 * units t, t + KWG, ... of USUB sub-blocks (32 values each; USUB divides the block's SUBS), and
 * the group adds its KWG partial sums in local memory, in work-item order. A work-item holds
 * 32 values as 32 / VW vectors of VW lanes: on CPU devices one work-item per group (KWG = 1)
 * with 16-lane vectors and whole blocks per unit, so each byte load and nibble unpack is a
 * vector op and the block's sub-block layout is known at compile time; on GPUs one lane per
 * sub-block (VW = 1, USUB = 1) and a warp of them per row group. Each weight is the value
 * dequantize gives, to the bit, and each product is added with one FMA, as qmatmul_k does.
 * dequantize rounds a * q, then a * q - b; here a * q - b is one FMA, which is the same value
 * because a * q is exact in float32: a and b are a float16 times a 6-bit integer (at most 17
 * significant bits, no underflow: a float16's least is 2^-24), q has at most 5 bits (q5_k).
 * q6_k's a * q (a = d s, 11 + 7 bits, q in [-32, 31]) and mxfp4's are one rounding as well.
 *
 * Launch contract: local size (KWG, 1); groups (ceil(N / RN), ceil(M / RM)); K a multiple of
 * the block (the spec's rule). Rows past N or M are computed on the last row and not stored. */
#ifndef KWG
#define KWG 1
#endif
#ifndef USUB
#define USUB 1
#endif
#ifndef RN
#define RN 1
#endif
#ifndef RM
#define RM 1
#endif
#define SV (32 / VW) /* vectors per sub-block */
#define SUB_BYTES (32 * BLOCK_BYTES / QB) /* a sub-block's share of a weight row's bytes (rounded down) */
/* the sub-blocks per prefetch (PREFETCH_ROWS): every sub-block's asked too often for q6_k (4096 x
 * 4096, M = 1, rotated: 0.97 ms, every 2: 0.89, every 4: 0.82, every 8: 0.92; q4_k 0.58-0.57) */
#define PF_SUBS (USUB < 4 ? USUB : 4)

/* On CPU devices (whole blocks per unit) a block's scales come as BS_VECS vectors per block and
 * weight row (BLOCK_SCALES): sub-block by sub-block, q4_k's 6-bit fields and float16 pair took
 * more instructions than the 32 weights' own work (q4_k 4096 x 4096, M = 1: 1.89 -> 1.52 ms,
 * AVX-512, PoCL 3.1; q2_k's group by group 44 a row's 32 values, q3_k's 62). q4_k, q5_k: lane
 * j < 8 is sub-block j's a, lane 8 + j its b; q6_k, q3_k: lane g is group g's a (16 values a
 * group); q2_k: the same, then a second vector of the groups' b; iq4_xs: lane j (and 8 + j) is
 * sub-block j's a. Each is rounded once, as sub_codes rounds it. */
#if defined(ACCEL_OPENCL) && FMT_Q3_K
/* group_ints' scales of a q3_k block, 16 lanes at once */
DEVICE int16 q3_scales(GLOBAL const u8* RESTRICT blk) {
    const uchar8 lo8 = (uchar8)(blk[96], blk[97], blk[98], blk[99], blk[100], blk[101], blk[102], blk[103]);
    const uchar4 hi4 = as_uchar4(load_u32(blk + 104));
    const int16 lo = convert_int16((uchar16)(lo8, lo8)) >> (int16)(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4) & 15;
    const int16 hi = convert_int16((uchar16)(hi4, hi4, hi4, hi4)) >> (int16)(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6) & 3;
    return (lo | hi << 4) - 32;
}
#elif defined(ACCEL_OPENCL) && FMT_IQ4_XS
/* group_ints' scales of an iq4_xs block's 8 sub-blocks */
DEVICE int8 iq4xs_scales(GLOBAL const u8* RESTRICT blk) {
    const u32 h = load_u32(blk) >> 16;
    const uchar4 l4 = as_uchar4(load_u32(blk + 4));
    const int8 lo = convert_int8((uchar8)(l4.s0, l4.s0, l4.s1, l4.s1, l4.s2, l4.s2, l4.s3, l4.s3)) >> (int8)(0, 4, 0, 4, 0, 4, 0, 4) & 15;
    return (lo | ((int8)h >> (int8)(0, 2, 4, 6, 8, 10, 12, 14) & 3) << 4) - 32;
}
#endif

#if (FMT_Q4_K || FMT_Q5_K || FMT_Q6_K || FMT_Q2_K || FMT_Q3_K || FMT_IQ4_XS) && USUB == SUBS && \
    defined(ACCEL_OPENCL)
#define BLOCK_SCALES 1
#if FMT_Q2_K
#define BS_VECS 2
#else
#define BS_VECS 1
#endif
DEVICE void block_scales(GLOBAL const u8* RESTRICT blk, float16* bs) {
#if FMT_Q6_K
    const float d = f16x2_to_f32(load_u32(blk + 206) >> 16).x;  /* d: bytes 208, 209 */
    GLOBAL const i8* sc = (GLOBAL const i8*)blk + 192;
    bs[0] = FMUL_RN((float16)d, convert_float16((char16)(ACCEL_BYTES16(sc, 0))));
#elif FMT_Q2_K /* group g: scale the low nibble of byte g, minimum the high */
    const float2 dm = f16x2_to_f32(load_u32(blk + 80));
    const int16 sm = convert_int16((uchar16)(ACCEL_BYTES16(blk, 0)));
    bs[0] = FMUL_RN((float16)dm.x, convert_float16(sm & 15));
    bs[1] = FMUL_RN((float16)dm.y, convert_float16(sm >> 4));
#elif FMT_Q3_K
    const float d = f16x2_to_f32(*(GLOBAL const T_F16*)(blk + 108)).x;
    bs[0] = FMUL_RN((float16)d, convert_float16(q3_scales(blk)));
#elif FMT_IQ4_XS
    const float8 a = FMUL_RN((float8)f16x2_to_f32(*(GLOBAL const T_F16*)blk).x, convert_float8(iq4xs_scales(blk)));
    bs[0] = (float16)(a, a);
#else
    const float2 dm = f16x2_to_f32(load_u32(blk));
    bs[0] = FMUL_RN((float16)((float8)dm.x, (float8)dm.y), convert_float16(scales_mins_k4(blk + 4)));
#endif
}
#else
#define BLOCK_SCALES 0
#endif

#if FMT_IQ4_NL || FMT_IQ4_XS
/* The iq4 code values of the nibbles c, lane by lane. */
DEVICE vi_t iq4_values(vi_t c) {
#if VW == 1
    return iq4_value(c);
#elif VW == 16 && defined(ACCEL_LOOKUP16F) /* one vpermps (AVX-512): the values as floats */
    return convert_int16(ACCEL_LOOKUP16F((float16)(IQ4_VALUES), c));
#else  /* lane by lane: PoCL 3.0 built no kernel at all from a shuffle() of an int16 table */
    vi_t r;
    __private int* rl = (__private int*)&r;
    __private const int* cl = (__private const int*)&c;
    UNROLL for (int i = 0; i < VW; ++i) rl[i] = iq4_value(cl[i]);
    return r;
#endif
}
#endif

/* Sub-block j of the block at blk as integer codes q[SV] (VW lanes each), a scale a[v] and an
 * offset b[v] per vector: value = a q - b (q4_k, q5_k, q2_k, q4_1, q5_1 with b = -m), a q (the
 * others: b unused); with BLOCK_SCALES the caller's a and b. */
DEVICE void sub_codes(GLOBAL const u8* RESTRICT blk, int j, vi_t* q, float* a, float* b) {
#if (FMT_Q4_K || FMT_Q5_K) && !BLOCK_SCALES
    int sc, m;
    scale_min_k4(blk + 4, j, &sc, &m);
#if defined(ACCEL_F16C)  /* one vcvtph2ps for both: q4_k GEMV 1.87 -> 1.46 ms (PoCL 3.1) */
    const float2 dm = f16x2_to_f32(load_u32(blk));
    const float d0 = dm.x, m0 = dm.y;
#else
    const float d0 = LOAD_F16((GLOBAL const T_F16*)blk, 0), m0 = LOAD_F16((GLOBAL const T_F16*)blk, 1);
#endif
    const float d = FMUL_RN(d0, (float)sc);
    const float bm = FMUL_RN(m0, (float)m);
    UNROLL for (int v = 0; v < SV; ++v) b[v] = bm;
#endif
#if LEGACY32
    float d, nm;  /* a = d, b = -m */
    group_scale(blk, 0, &d, &nm);
#if QH_AT
    const i32 qh = (i32)load_u32(blk + QH_AT);
#endif
    UNROLL for (int v = 0; v < SV; ++v) {  /* element l: low nibble of byte l, l + 16: high */
        q[v] = (VLOAD_U8(blk + QS_AT, (v * VW) & 15) >> (4 * ((v * VW) >> 4))) & 15;
#if QH_AT
        q[v] |= (((vi_t)qh >> (VIOTA + v * VW)) & 1) << 4;
#endif
#if FMT_Q5_0
        q[v] -= 16;
#endif
        a[v] = d;
        b[v] = nm;
    }
#elif SIGNS
    float d, unused;
    group_scale(blk, 0, &d, &unused);
    UNROLL for (int v = 0; v < SV; ++v) {
        const int e0 = 32 * j + v * VW;  /* the vector's first element (VW divides 16) */
#if VW == 1
        q[v] = code_at(blk, e0);
#elif FMT_Q1_0 /* bits e0 % 8 .. of the 16-bit word at byte 2 + e0 / 8 */
        const i32 w = (i32)blk[2 + e0 / 8] | ((i32)blk[3 + e0 / 8] << 8);
        q[v] = ((((vi_t)w) >> (VIOTA + e0 % 8)) & 1) * 2 - 1;
#elif FMT_TQ2_0
        q[v] = ((VLOAD_U8(blk + 32 * (j / 4), v * VW) >> (2 * (j % 4))) & 3) - 1;
#else /* tq1_0: a vector of the five-trit bytes has one trit position n; the last 16 elements
       * (four trits a byte) go lane by lane */
        if (e0 < 240) {
            const int pow3[5] = {1, 3, 9, 27, 81};
            const vi_t b = e0 < 160 ? VLOAD_U8(blk, e0 % 32) : VLOAD_U8(blk + 32, (e0 - 160) % 16);
            const int n = e0 < 160 ? e0 / 32 : (e0 - 160) / 16;
            q[v] = ((((b * pow3[n]) & 255) * 3) >> 8) - 1;
        } else {
            __private int* ql = (__private int*)&q[v];
            for (int i = 0; i < VW; ++i) ql[i] = code_at(blk, e0 + i);
        }
#endif
        a[v] = d;
    }
#elif FMT_Q8_1
    const float d = LOAD_F16((GLOBAL const T_F16*)blk, 0);
    UNROLL for (int v = 0; v < SV; ++v) {
        q[v] = VLOAD_I8((GLOBAL const i8*)blk + 4, v * VW);
        a[v] = d;
    }
#elif FMT_IQ4_NL || FMT_IQ4_XS
    float d, unused;
#if BLOCK_SCALES
    d = a[0];
#else
    group_scale(blk, 2 * j, &d, &unused);
#endif
#if FMT_IQ4_NL
    GLOBAL const u8* qs = blk + 2;
#else
    GLOBAL const u8* qs = blk + 8 + 16 * j;
#endif
    UNROLL for (int v = 0; v < SV; ++v) {
        q[v] = iq4_values(VLOAD_U8(qs, (v * VW) & 15) >> (4 * ((v * VW) >> 4)));
        a[v] = d;
    }
#elif FMT_NVFP4 /* a vector never crosses a group of 16 (VW <= 16); codes lane by lane */
    UNROLL for (int v = 0; v < SV; ++v) {
        const int e0 = 32 * j + v * VW;
#if VW == 1
        q[v] = code_at(blk, e0);
#else
        __private int* ql = (__private int*)&q[v];
        for (int i = 0; i < VW; ++i) ql[i] = code_at(blk, e0 + i);
#endif
        a[v] = ue4m3_half(blk[e0 / 16]);
    }
#elif FMT_Q2_K || FMT_Q3_K
    GLOBAL const u8* qs = blk + Q2_CODES_AT + 32 * (j / 4);
    UNROLL for (int v = 0; v < SV; ++v) {  /* a vector never crosses a group of 16 (VW <= 16) */
        q[v] = (VLOAD_U8(qs, v * VW) >> (2 * (j % 4))) & 3;
#if FMT_Q3_K
        q[v] -= (1 - ((VLOAD_U8(blk, v * VW) >> j) & 1)) * 4;
#endif
#if !BLOCK_SCALES
        group_scale(blk, 2 * j + (v * VW) / 16, &a[v], &b[v]);
#endif
    }
#elif FMT_Q4_K || FMT_Q5_K
    GLOBAL const u8* qs = blk + BLOCK_BYTES - 128 + 32 * (j / 2);  /* nibble j % 2 of 32 bytes */
    UNROLL for (int v = 0; v < SV; ++v) {
        q[v] = (VLOAD_U8(qs, v * VW) >> (4 * (j % 2))) & 15;
#if FMT_Q5_K
        q[v] |= ((VLOAD_U8(blk + 16, v * VW) >> j) & 1) << 4;  /* the fifth bit: bit j of qh */
#endif
#if !BLOCK_SCALES
        a[v] = d;
#endif
    }
#elif FMT_Q6_K
#if !BLOCK_SCALES
    const float d = LOAD_F16((GLOBAL const T_F16*)(blk + 208), 0);
#endif
    const int h = j / 4, jj = j % 4;  /* half h of the block, quarter jj of it */
    GLOBAL const u8* ql = blk + 64 * h + 32 * (jj % 2);  /* low 4 bits: nibble jj / 2 */
    GLOBAL const u8* qh = blk + 128 + 32 * h;            /* high 2 bits: bits 2 jj, 2 jj + 1 */
    UNROLL for (int v = 0; v < SV; ++v) {
        q[v] = ((VLOAD_U8(ql, v * VW) >> (4 * (jj / 2))) & 15)
             + 16 * ((VLOAD_U8(qh, v * VW) >> (2 * jj)) & 3) - 32;
#if !BLOCK_SCALES
        a[v] = FMUL_RN(d, (float)(i8)blk[192 + (32 * j + v * VW) / 16]);  /* 16 values per scale */
#endif
    }
#elif FMT_MXFP4
    const float d = e8m0_half(blk[0]);
    UNROLL for (int v = 0; v < SV; ++v) {  /* element l: low nibble of byte l, l + 16: high */
        const vi_t c = (VLOAD_U8(blk + 1, (v * VW) & 15) >> (4 * ((v * VW) >> 4))) & 15;
        /* twice the E2M1 value: magnitudes 0 1 2 3 4 6 8 12 as nibbles of one word, sign bit 3 */
        const vi_t mag = ((vi_t)(i32)0xC8643210u >> (4 * (c & 7))) & 15;
        q[v] = mag * (1 - ((c >> 2) & 2));
        a[v] = d;
    }
#else /* q8_k */
    const float d = AS_FLOAT((u32)blk[0] | ((u32)blk[1] << 8) | ((u32)blk[2] << 16) | ((u32)blk[3] << 24));
    UNROLL for (int v = 0; v < SV; ++v) {
        q[v] = VLOAD_I8((GLOBAL const i8*)blk + 4 + 32 * j, v * VW);
        a[v] = d;
    }
#endif
}

/* q4_k, q6_k, mxfp4, iq4_*, q4_1 and q5_* on AVX-512 (KQ_LUT): a sub-block's weights looked up by code in a table
 * of the 16 values its codes stand for, each dequantize's to the bit (a i - b by one FMA, a i
 * exact; d times an E2M1 value, exact), one vpermps per 16 weights in place of a convert and a
 * product; the lookup reads the low 4 bits, so a low nibble needs no mask. 4096 x 4096, M = 1,
 * RN = 4, PoCL 3.1, weights in cache: mxfp4 0.87 -> 0.35 ms, q4_k 0.59 -> 0.55 (min of 150).
 * q6_k's 6-bit code is two lookups, of its low 4 bits and of its high 2 (bits 2 jj, 2 jj + 1 of
 * qh: a table of 16 (i & 3) - 32, so the bits above need no mask), whose sum is the code less 32,
 * exact, times the group's scale a: the product dequantize rounds (q6_k GEMV, interleaved with
 * the integer unpacking: 0.90 -> 0.72 ms in cache, 0.96 -> 0.83 rotated over 2 GB). q5_0's and
 * q5_1's 5-bit codes index 32 values (vpermi2ps); iq4's values are d times kvalues_iq4nl, one
 * rounding as dequantize's. Instructions per 32 weights and row (4 rows a work-item, PoCL 3.1):
 * q4_1 22 -> 14.5, q5_0 40 (its float16 d in integer code) -> 22.5, iq4_nl 24.5 -> 14.5.
 * Bytes shared by sub-blocks are widened once into held (the row's; whole blocks per unit, so
 * the sub-blocks come in order): q4_k's sub-blocks 2i and 2i + 1 are the low and high nibbles
 * of the same 32 bytes, q6_k's qh holds the high bits of a half's 4. */
#if ((FMT_Q4_K || FMT_Q6_K || FMT_IQ4_XS || FMT_Q2_K || FMT_Q3_K) && BLOCK_SCALES || FMT_MXFP4 || \
     FMT_IQ4_NL || LEGACY32 || FMT_TQ2_0) && VW == 16 && defined(ACCEL_LOOKUP16F)
#define KQ_LUT 1
/* int16s of bytes a row's sub-blocks share: q3_k holds its codes' and its mask's */
#if FMT_Q3_K
#define HELD 4
#else
#define HELD 2
#endif
DEVICE void lut_weights(GLOBAL const u8* RESTRICT blk, int j, const float* a, const float* b, int16* held,
                        float16* wv) {
#if FMT_Q4_K
    const float16 table = FMA((float16)a[0], (float16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              (float16)(-b[0]));
    GLOBAL const u8* qs = blk + BLOCK_BYTES - 128 + 32 * (j / 2);  /* nibble j % 2 of 32 bytes */
    if (j % 2 == 0) {  /* the bytes, held for sub-block j + 1, which takes their high nibbles */
        UNROLL for (int v = 0; v < 2; ++v) {
            held[v] = VLOAD_U8(qs, 16 * v);
            HIDE_WIDENING(held[v]);
            wv[v] = ACCEL_LOOKUP16F(table, held[v]);
        }
    } else {
        UNROLL for (int v = 0; v < 2; ++v) wv[v] = ACCEL_LOOKUP16F(table, held[v] >> 4);
    }
#elif FMT_Q6_K
    const int h = j / 4, jj = j % 4;  /* half h of the block, quarter jj of it */
    GLOBAL const u8* ql = blk + 64 * h + 32 * (jj % 2);  /* low 4 bits: nibble jj / 2 */
    if (jj == 0) {  /* the high 2 bits of the half's 4 sub-blocks, bits 2 jj and 2 jj + 1 */
        UNROLL for (int v = 0; v < 2; ++v) {
            held[v] = VLOAD_U8(blk + 128 + 32 * h, 16 * v);
            HIDE_WIDENING(held[v]);
        }
    }
    UNROLL for (int v = 0; v < 2; ++v) {
        int16 low = VLOAD_U8(ql, 16 * v);
        HIDE_WIDENING(low);
        const float16 c = ACCEL_LOOKUP16F((float16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          low >> (4 * (jj / 2)))
                        + ACCEL_LOOKUP16F((float16)(-32, -16, 0, 16, -32, -16, 0, 16, -32, -16, 0, 16, -32, -16, 0, 16),
                                          held[v] >> (2 * jj));
        wv[v] = FMUL_RN((float16)a[v], c);
    }
#elif FMT_Q2_K || FMT_Q3_K || FMT_TQ2_0
    /* element 128 h + 32 q + l: bits 2q of code byte 32 h + l, the 32 bytes held for the half's
     * 4 sub-blocks; a vector is one group of 16, its table that group's values for the index
     * (code | q3_k's mask bit << 2), repeated so that the bits above need no mask */
    const int h = j / 4, q = j % 4;
    if (q == 0)
        UNROLL for (int v = 0; v < 2; ++v) {
            held[v] = VLOAD_U8(blk + Q2_CODES_AT + 32 * h, 16 * v);
            HIDE_WIDENING(held[v]);
        }
#if FMT_Q3_K
    if (j == 0) /* mask byte l: bit j for element 32 j + l */
        UNROLL for (int v = 0; v < 2; ++v) {
            held[2 + v] = VLOAD_U8(blk, 16 * v);
            HIDE_WIDENING(held[2 + v]);
        }
#endif
#if FMT_TQ2_0 /* d (code - 1), exact */
    float d, unused;
    block_d(blk, &d, &unused);
    const float16 ternary = FMUL_RN((float16)d, (float16)(-1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2));
#endif
    UNROLL for (int v = 0; v < 2; ++v) {
#if FMT_TQ2_0
        wv[v] = ACCEL_LOOKUP16F(ternary, held[v] >> (2 * q));
#elif FMT_Q2_K /* a code - b by one FMA (a code exact), as qgemv_k rounds it */
        const float16 table = FMA((float16)a[v], (float16)(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3),
                                  (float16)(-b[v]));
        wv[v] = ACCEL_LOOKUP16F(table, held[v] >> (2 * q));
#else /* a (code - 4, plus 4 where the mask bit is set), one rounding */
        const float16 table = FMUL_RN((float16)a[v], (float16)(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3));
        wv[v] = ACCEL_LOOKUP16F(table, (held[v] >> (2 * q) & 3) | (held[2 + v] >> j << 2 & 4));
#endif
    }
#elif FMT_Q5_0 || FMT_Q5_1 /* the 5-bit code looked up in 32 values: element l's nibble as q4_1's,
                              * its fifth bit bit l of qh */
    float d, dm;
    block_d(blk, &d, &dm);
#if FMT_Q5_0 /* d (q - 16), exact */
    const float16 lo = FMUL_RN((float16)d, (float16)(-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1));
    const float16 hi = FMUL_RN((float16)d, (float16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
#else /* d q + m by one FMA */
    const float16 lo = FMA((float16)d, (float16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), (float16)dm);
    const float16 hi = FMA((float16)d, (float16)(16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31), (float16)dm);
#endif
    const int16 qh = (int16)(i32)load_u32(blk + QH_AT);
    int16 bytes = VLOAD_U8(blk + QS_AT, 0);
    HIDE_WIDENING(bytes);
    wv[0] = ACCEL_LOOKUP32F(lo, hi, (bytes & 15) | ((qh >> VIOTA) & 1) << 4);
    wv[1] = ACCEL_LOOKUP32F(lo, hi, (bytes >> 4) | ((qh >> (VIOTA + 16)) & 1) << 4);
#elif FMT_IQ4_NL || FMT_IQ4_XS || FMT_Q4_1 /* element l: low nibble of byte l, l + 16: high */
#if FMT_IQ4_XS
    const float d = a[0];
    GLOBAL const u8* qs = blk + 8 + 16 * j;
#else
    float d, dm;
    block_d(blk, &d, &dm);
    GLOBAL const u8* qs = blk + BLOCK_BYTES - 16;
#endif
#if FMT_Q4_1 /* d n + m by one FMA, d n exact, as qgemv_k rounds it */
    const float16 table = FMA((float16)d, (float16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              (float16)dm);
#else /* d times the code's value, one rounding, as dequantize's */
    const float16 table = FMUL_RN((float16)d, (float16)(IQ4_VALUES));
#endif
    int16 bytes = VLOAD_U8(qs, 0);
    HIDE_WIDENING(bytes);
    wv[0] = ACCEL_LOOKUP16F(table, bytes);
    wv[1] = ACCEL_LOOKUP16F(table, bytes >> 4);
#else /* element l: low nibble of byte l, l + 16: high */
    const float16 table = FMUL_RN((float16)e8m0_half(blk[0]),
                                  (float16)(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    int16 bytes = VLOAD_U8(blk + 1, 0);
    HIDE_WIDENING(bytes);
    wv[0] = ACCEL_LOOKUP16F(table, bytes);
    wv[1] = ACCEL_LOOKUP16F(table, bytes >> 4);
#endif
}
#else
#define KQ_LUT 0
#endif

KERNEL void qgemv_k(GLOBAL const IN_T* RESTRICT x, GLOBAL const u8* RESTRICT w,
                    GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    const int t = LOCAL_ID(0);
    const int n0 = GROUP_ID(0) * RN, m0 = GROUP_ID(1) * RM;
    const i64 row_bytes = (i64)(K / QB) * BLOCK_BYTES;
    GLOBAL const IN_T* xr[RM];
    GLOBAL const u8* wr[RN];
    UNROLL for (int i = 0; i < RM; ++i) xr[i] = x + (i64)imin(m0 + i, M - 1) * K;
    UNROLL for (int r = 0; r < RN; ++r) wr[r] = w + (i64)imin(n0 + r, N - 1) * row_bytes;
    vf_t acc[RM][RN];
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int r = 0; r < RN; ++r) acc[i][r] = (vf_t)0.0f;
    const int units = K / (32 * USUB);
    for (int u = t; u < units; u += KWG) {
#if BLOCK_SCALES
        float16 bs[RN][BS_VECS];  /* unit u is block u */
        UNROLL for (int r = 0; r < RN; ++r) block_scales(wr[r] + (i64)u * BLOCK_BYTES, bs[r]);
        KEEP_IN_MEMORY(bs);  /* each sub-block's scales broadcast from memory */
#endif
#if KQ_LUT
        int16 held[RN][HELD];  /* bytes a row's sub-blocks share (lut_weights) */
#endif
        UNROLL for (int k = 0; k < USUB; ++k) {
            const int s = u * USUB + k;                      /* sub-block s of the row */
            const int j = USUB == SUBS ? k : s % SUBS;        /* ... j of its block */
            if (k % PF_SUBS == 0)
                PREFETCH_ROWS(wr, RN, (i64)s * 32 * BLOCK_BYTES / QB, PF_SUBS * SUB_BYTES, RN * row_bytes);
            /* x by a pointer and constant offsets: from an int index PoCL 3.1 gathered the lanes
             * (vgatherdps; q4_k 4096 x 4096, M = 1, AVX-512: 1.52 -> 1.08 ms) */
            vf_t xv[RM][SV];
            UNROLL for (int i = 0; i < RM; ++i) {
                GLOBAL const IN_T* xs = xr[i] + (i64)s * 32;
                UNROLL for (int v = 0; v < SV; ++v) xv[i][v] = VLOAD_IN(xs, v * VW);
            }
            UNROLL for (int r = 0; r < RN; ++r) {
                float a[SV], b[SV];
                UNROLL for (int v = 0; v < SV; ++v) b[v] = 0.0f;
#if BLOCK_SCALES
                __private const float* sr = (__private const float*)bs[r];
#if FMT_Q6_K || FMT_Q3_K || FMT_Q2_K /* a scale (and q2_k a minimum) per group of 16 */
                UNROLL for (int v = 0; v < SV; ++v) {
                    a[v] = sr[(32 * k + v * VW) / 16];
#if FMT_Q2_K
                    b[v] = sr[16 + (32 * k + v * VW) / 16];
#endif
                }
#elif FMT_IQ4_XS
                UNROLL for (int v = 0; v < SV; ++v) a[v] = sr[k];
#else
                UNROLL for (int v = 0; v < SV; ++v) {
                    a[v] = sr[k];
                    b[v] = sr[8 + k];
                }
#endif
#endif
                vf_t wv[SV];
#if KQ_LUT
                lut_weights(wr[r] + (i64)(s / SUBS) * BLOCK_BYTES, j, a, b, held[r], wv);
#else
                vi_t q[SV];
                sub_codes(wr[r] + (i64)(s / SUBS) * BLOCK_BYTES, j, q, a, b);
                UNROLL for (int v = 0; v < SV; ++v) {
#if FMT_Q4_K || FMT_Q5_K || FMT_Q2_K || LEGACY32 && !FMT_Q5_0
                    /* a q is exact (float16 d or d sc times a code of at most 5 bits), so one
                     * FMA rounds a q - b as dequantize does */
                    wv[v] = FMA((vf_t)a[v], VCVT_F(q[v]), (vf_t)(-b[v]));
#else
                    wv[v] = FMUL_RN((vf_t)a[v], VCVT_F(q[v]));
#endif
                }
#endif
                UNROLL for (int v = 0; v < SV; ++v)
                    UNROLL for (int i = 0; i < RM; ++i) acc[i][r] = FMA(xv[i][v], wv[v], acc[i][r]);
            }
        }
    }
#if KWG > 1
    LOCAL float part[RM * RN][KWG];
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int r = 0; r < RN; ++r) {
        const vf_t a = acc[i][r];
        part[i * RN + r][t] = VSUM(a);
    }
    BARRIER();
    for (int o = t; o < RM * RN; o += KWG) {
        float sum = 0.0f;
        for (int p = 0; p < KWG; ++p) sum += part[o][p];
        const int m = m0 + o / RN, n = n0 + o % RN;
        if (m < M && n < N) STORE_OUT(out, (i64)m * N + n, sum);
    }
#else
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int r = 0; r < RN; ++r) {
        const vf_t a = acc[i][r];
        if (m0 + i < M && n0 + r < N) STORE_OUT(out, (i64)(m0 + i) * N + n0 + r, VSUM(a));
    }
#endif
}

#if !FMT_MXFP4
/* quantize_k: GGML's reference quantizers (quantize_row_q4_K_ref, _q5_K_, _q6_K_, _q8_K_ref),
 * one work-item per super-block of 256 values, bit-exact on a device that rounds division and
 * square root correctly and keeps denormals (the backend's supports() asks for both): every
 * product, sum and quotient is rounded on its own, in the C code's order, sums left to right.
 * A super-block holding a NaN or an infinity stores a NaN scale and zero bytes (docs/api.md). */
/* the NaN accel stores for a non-finite block: the quiet NaN 0x7FC00000 (float16 0x7E00), as
 * numpy writes it (OpenCL's NAN may carry another payload) */
#define QNAN AS_FLOAT(0x7fc00000u)

/* GGML's nearest_int: the float32 sum with 1.5 * 2^23 read as an integer (round half even). */
DEVICE int nearest_int(float f) {
    return (int)(AS_UINT(FADD_RN(f, 12582912.0f)) & 0x007fffffu) - 0x00400000;
}

DEVICE int clampi(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

DEVICE void put_f16(GLOBAL u8* RESTRICT o, float v) {
    const u32 h = f32_to_f16(v);
    o[0] = (u8)(h & 255u);
    o[1] = (u8)(h >> 8);
}

DEVICE float get_f16(GLOBAL const u8* RESTRICT o) {
    return f16_to_f32((u32)o[0] | ((u32)o[1] << 8));
}

/* quantize_k's block b: x's QB values into v and the output block's bytes zeroed; whether
 * every value is finite (the kernels' rule for a NaN or an infinity decides the rest) */
DEVICE int load_block(GLOBAL const IN_T* RESTRICT x, i64 b, float* v, GLOBAL u8* RESTRICT o) {
    int finite = 1;
    for (int i = 0; i < QB; ++i) {
        v[i] = LOAD_IN(x, b * QB + i);
        finite &= !(IS_NAN(v[i]) || IS_INF(v[i]));
    }
    for (int i = 0; i < BLOCK_BYTES; ++i) o[i] = 0;
    return finite;
}
#endif

#if FMT_Q4_K || FMT_Q5_K || FMT_Q2_K
/* the weighted error of a difference: squared, or absolute (make_qkx2_quants' use_mad) */
DEVICE float qkx2_err(float diff, int mad) { return mad ? FABS(diff) : FMUL_RN(diff, diff); }

/* make_qkx2_quants on one sub-block of n (16 or 32) values: the affine fit x ~ scale * L + min
 * with the least weighted error over nstep + 1 trial scales (a trial taken when strictly
 * better; the running min carries into the next trial's codes). Codes in L; returns scale,
 * -min in *neg_min. */
DEVICE float qkx2(const float* x, const float* w, int n, int nmax, float rmin, float rdelta,
                  int nstep, int mad, u8* L, float* neg_min) {
    float mn = x[0], mx = x[0], sum_w = w[0], sum_x = FMUL_RN(w[0], x[0]);
    for (int i = 1; i < n; ++i) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sum_w = FADD_RN(sum_w, w[i]);
        sum_x = FADD_RN(sum_x, FMUL_RN(w[i], x[i]));
    }
    if (mn > 0.0f) mn = 0.0f;
    if (mx == mn) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *neg_min = -mn;
        return 0.0f;
    }
    float iscale = FDIV_RN((float)nmax, FADD_RN(mx, -mn));
    float scale = FDIV_RN(1.0f, iscale);
    float best = 0.0f;
    for (int i = 0; i < n; ++i) {
        L[i] = (u8)clampi(nearest_int(FMUL_RN(iscale, FADD_RN(x[i], -mn))), 0, nmax);
        const float diff = FADD_RN(FADD_RN(FMUL_RN(scale, (float)L[i]), mn), -x[i]);
        best = FADD_RN(best, FMUL_RN(w[i], qkx2_err(diff, mad)));
    }
    u8 La[32];
    for (int is = 0; is <= nstep; ++is) {
        iscale = FDIV_RN(FADD_RN(FADD_RN(rmin, FMUL_RN(rdelta, (float)is)), (float)nmax),
                         FADD_RN(mx, -mn));
        float sl = 0.0f, sl2 = 0.0f, sxl = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = clampi(nearest_int(FMUL_RN(iscale, FADD_RN(x[i], -mn))), 0, nmax);
            La[i] = (u8)l;
            const float wl = FMUL_RN(w[i], (float)l);
            sl = FADD_RN(sl, wl);
            sl2 = FADD_RN(sl2, FMUL_RN(wl, (float)l));
            sxl = FADD_RN(sxl, FMUL_RN(wl, x[i]));
        }
        const float D = FADD_RN(FMUL_RN(sum_w, sl2), -FMUL_RN(sl, sl));
        if (!(D > 0.0f)) continue;
        float ts = FDIV_RN(FADD_RN(FMUL_RN(sum_w, sxl), -FMUL_RN(sum_x, sl)), D);
        float tm = FDIV_RN(FADD_RN(FMUL_RN(sl2, sum_x), -FMUL_RN(sl, sxl)), D);
        if (tm > 0.0f) {
            tm = 0.0f;
            ts = FDIV_RN(sxl, sl2);
        }
        float err = 0.0f;
        for (int i = 0; i < n; ++i) {
            const float diff = FADD_RN(FADD_RN(FMUL_RN(ts, (float)La[i]), tm), -x[i]);
            err = FADD_RN(err, FMUL_RN(w[i], qkx2_err(diff, mad)));
        }
        if (err < best) {
            for (int i = 0; i < n; ++i) L[i] = La[i];
            best = err;
            scale = ts;
            mn = tm;
        }
    }
    *neg_min = -mn;
    return scale;
}
#endif

#if FMT_Q6_K
/* make_qx_quants (rmse_type 1: weights x^2) on 16 values: the symmetric fit from -32 / max,
 * then 18 trial scales -(32 + 0.1 i) / max, a trial taken when strictly better. Codes + 32 in
 * L; returns the scale. */
DEVICE float qx16(const float* x, u8* L) {
    float mx = 0.0f, amax = 0.0f;
    for (int i = 0; i < 16; ++i)
        if (FABS(x[i]) > amax) {
            amax = FABS(x[i]);
            mx = x[i];
        }
    if (amax < 1e-15f) {
        for (int i = 0; i < 16; ++i) L[i] = 0;
        return 0.0f;
    }
    float scale = 0.0f, best = 0.0f;
    for (int is = 0; is <= 18; ++is) {  /* trial 0: -32 / max; then i = -9..-1, 1..9 */
        const int i10 = is == 0 ? 0 : (is <= 9 ? is - 10 : is - 9);
        const float iscale = is == 0 ? FDIV_RN(-32.0f, mx)
                                     : FDIV_RN(-FADD_RN(32.0f, FMUL_RN(0.1f, (float)i10)), mx);
        float sumlx = 0.0f, suml2 = 0.0f;
        for (int i = 0; i < 16; ++i) {
            const float l = (float)clampi(nearest_int(FMUL_RN(iscale, x[i])), -32, 31);
            const float w = FMUL_RN(x[i], x[i]);
            sumlx = FADD_RN(sumlx, FMUL_RN(FMUL_RN(w, x[i]), l));
            suml2 = FADD_RN(suml2, FMUL_RN(FMUL_RN(w, l), l));
        }
        const int take = is == 0 || (suml2 > 0.0f && FMUL_RN(sumlx, sumlx) > FMUL_RN(best, suml2));
        if (take) {
            for (int i = 0; i < 16; ++i)
                L[i] = (u8)(32 + clampi(nearest_int(FMUL_RN(iscale, x[i])), -32, 31));
            scale = is == 0 ? (suml2 != 0.0f ? FDIV_RN(sumlx, suml2) : 0.0f) : FDIV_RN(sumlx, suml2);
            best = FMUL_RN(scale, sumlx);
        }
    }
    return scale;
}
#endif

#if LEGACY32 || FMT_Q8_1
/* quantize_k of the legacy blocks of 32 (quantize_row_q4_1_ref, _q5_0_, _q5_1_, _q8_1_ref), one
 * work-item per block. Where C is undefined, accel's rules (docs/api.md): a block with a NaN
 * stores d = NaN and the codes of an all-zero block (m = 0, q8_1's s NaN); one with an infinity
 * the reference's (infinite) d and the same codes; a d whose 1/d overflows the codes of an
 * all-zero block. */
KERNEL void quantize_k(GLOBAL const IN_T* RESTRICT x, GLOBAL u8* RESTRICT out, i64 nblocks) {
    const i64 b = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (b >= nblocks) return;
    GLOBAL u8* o = out + b * BLOCK_BYTES;
    float v[32];
    int finite = 1, has_nan = 0;
    for (int i = 0; i < 32; ++i) {
        v[i] = LOAD_IN(x, b * 32 + i);
        has_nan |= IS_NAN(v[i]);
        finite &= !(IS_NAN(v[i]) || IS_INF(v[i]));
    }
#if FMT_Q4_1 || FMT_Q5_1 /* the first of equal extremes (strict compares), as the C loop */
    float lo = v[0], hi = v[0];
    for (int i = 1; i < 32; ++i) {
        if (v[i] < lo) lo = v[i];
        if (v[i] > hi) hi = v[i];
    }
#if FMT_Q4_1
    const float levels = 15.0f;
#else
    const float levels = 31.0f;
#endif
    const float d = finite ? FDIV_RN(FADD_RN(hi, -lo), levels) : AS_FLOAT(0x7f800000u);
#elif FMT_Q5_0 /* the first value of largest magnitude, over -16 */
    float amax = 0.0f, lo = 0.0f;
    for (int i = 0; i < 32; ++i)
        if (amax < FABS(v[i])) {
            amax = FABS(v[i]);
            lo = v[i];
        }
    const float d = FDIV_RN(lo, -16.0f);
#else /* q8_1 */
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = FABS(v[i]) > amax ? FABS(v[i]) : amax;
    const float d = FDIV_RN(amax, 127.0f);
#endif
    float id = (d != 0.0f && finite) ? FDIV_RN(1.0f, d) : 0.0f;
    id = IS_INF(id) ? 0.0f : id;
    if (has_nan) {  /* 0x7E00 as bytes: float16 conversions disagree on NaN payloads */
        o[0] = 0x00;
        o[1] = 0x7E;
    } else {
        put_f16(o, d);
    }
#if FMT_Q8_1
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
        const int c = finite ? (int)ROUND_HALF_AWAY(FMUL_RN(v[i], id)) : 0;
        o[4 + i] = (u8)(i8)c;
        sum += c;
    }
    if (finite) {
        put_f16(o + 2, FMUL_RN((float)sum, d));
    } else {
        o[2] = 0x00;
        o[3] = 0x7E;
    }
#else
#if FMT_Q4_1 || FMT_Q5_1
    put_f16(o + 2, finite ? lo : 0.0f);
#endif
    u32 qh = 0;
    for (int j = 0; j < 16; ++j) {
        int c[2];
        for (int h = 0; h < 2; ++h) {
            const float e = v[j + 16 * h];
#if FMT_Q5_0
            c[h] = imin(31, (int)FADD_RN(finite ? FMUL_RN(e, id) : 0.0f, 16.5f));
#else
            c[h] = (int)FADD_RN(finite ? FMUL_RN(FADD_RN(e, -lo), id) : 0.0f, 0.5f);
#if FMT_Q4_1
            c[h] = imin(15, c[h]);
#endif
#endif
            qh |= (u32)((c[h] >> 4) & 1) << (j + 16 * h);
        }
        o[QS_AT + j] = (u8)((c[0] & 15) | ((c[1] & 15) << 4));
    }
#if QH_AT
    for (int k = 0; k < 4; ++k) o[QH_AT + k] = (u8)(qh >> (8 * k));
#endif
#endif
}
#endif

#if !FMT_MXFP4 && !DECODE_ONLY
KERNEL void quantize_k(GLOBAL const IN_T* RESTRICT x, GLOBAL u8* RESTRICT out, i64 nblocks) {
    const i64 b = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (b >= nblocks) return;
    GLOBAL u8* o = out + b * BLOCK_BYTES;
    float v[QB];
    const int finite = load_block(x, b, v, o);
    u8 L[256];
#if FMT_Q4_K || FMT_Q5_K
#if FMT_Q4_K /* make_qkx2_quants' search: codes 0..NMAX, trial offsets RMIN + 0.1 i, i <= NSTEP */
#define NMAX 15
#define RMIN -1.0f
#define NSTEP 20
#else
#define NMAX 31
#define RMIN -0.5f
#define NSTEP 15
#endif
    const int nmax = NMAX;
    if (!finite) {
        put_f16(o, QNAN);
        return;
    }
    float scales[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
        const float* xs = v + 32 * j;
        float sum_x2 = 0.0f, w[32];
        for (int l = 0; l < 32; ++l) sum_x2 = FADD_RN(sum_x2, FMUL_RN(xs[l], xs[l]));
        const float av_x = SQRT_RN(FDIV_RN(sum_x2, 32.0f));
        for (int l = 0; l < 32; ++l) w[l] = FADD_RN(av_x, FABS(xs[l]));
        scales[j] = qkx2(xs, w, 32, nmax, RMIN, 0.1f, NSTEP, 0, L + 32 * j, mins + j);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0.0f ? FDIV_RN(63.0f, max_scale) : 0.0f;
    const float inv_min = max_min > 0.0f ? FDIV_RN(63.0f, max_min) : 0.0f;
    int ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {  /* stored in a uint8_t, then MIN(63, .) */
        ls[j] = imin(63, nearest_int(FMUL_RN(inv_scale, scales[j])) & 255);
        lm[j] = imin(63, nearest_int(FMUL_RN(inv_min, mins[j])) & 255);
        if (j < 4) {
            o[4 + j] |= (u8)ls[j];
            o[8 + j] |= (u8)lm[j];
        } else {
            o[12 + j - 4] = (u8)((ls[j] & 15) | ((lm[j] & 15) << 4));
            o[4 + j - 4] |= (u8)((ls[j] >> 4) << 6);
            o[4 + j] |= (u8)((lm[j] >> 4) << 6);
        }
    }
    put_f16(o, FDIV_RN(max_scale, 63.0f));
    put_f16(o + 2, FDIV_RN(max_min, 63.0f));
    for (int j = 0; j < 8; ++j) {
        const float d = FMUL_RN(get_f16(o), (float)ls[j]);
        if (d == 0.0f) continue;  /* the codes of the scale search stay */
        const float dm = FMUL_RN(get_f16(o + 2), (float)lm[j]);
        for (int l = 0; l < 32; ++l)
            L[32 * j + l] = (u8)clampi(nearest_int(FDIV_RN(FADD_RN(v[32 * j + l], dm), d)), 0, nmax);
    }
    GLOBAL u8* qs = o + BLOCK_BYTES - 128;
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
            qs[32 * c + l] = (u8)((lo & 15) | ((hi & 15) << 4));
#if FMT_Q5_K
            o[16 + l] |= (u8)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
#endif
        }
#elif FMT_Q6_K
    if (!finite) {
        put_f16(o + 208, QNAN);
        return;
    }
    float scales[16], max_scale = 0.0f, max_abs = 0.0f;
    for (int g = 0; g < 16; ++g) {
        scales[g] = qx16(v + 16 * g, L + 16 * g);
        if (FABS(scales[g]) > max_abs) {
            max_abs = FABS(scales[g]);
            max_scale = scales[g];
        }
    }
    if (max_abs < 1e-15f) return;  /* all zero bytes */
    const float iscale = FDIV_RN(-128.0f, max_scale);
    put_f16(o + 208, FDIV_RN(1.0f, iscale));
    for (int g = 0; g < 16; ++g) o[192 + g] = (u8)imin(127, nearest_int(FMUL_RN(iscale, scales[g])));
    for (int g = 0; g < 16; ++g) {
        const float d = FMUL_RN(get_f16(o + 208), (float)(i8)o[192 + g]);
        if (d == 0.0f) continue;
        for (int l = 0; l < 16; ++l)
            L[16 * g + l] = (u8)(32 + clampi(nearest_int(FDIV_RN(v[16 * g + l], d)), -32, 31));
    }
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[128 * h + l], q2 = L[128 * h + l + 32];
            const int q3 = L[128 * h + l + 64], q4 = L[128 * h + l + 96];
            o[64 * h + l] = (u8)((q1 & 15) | ((q3 & 15) << 4));
            o[64 * h + l + 32] = (u8)((q2 & 15) | ((q4 & 15) << 4));
            o[128 + 32 * h + l] = (u8)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
#else /* q8_k */
    float mx = 0.0f, amax = 0.0f;
    for (int i = 0; i < 256; ++i)
        if (FABS(v[i]) > amax) {
            amax = FABS(v[i]);
            mx = v[i];
        }
    if (!finite || amax == 0.0f) {
        const u32 d = finite ? 0u : AS_UINT(QNAN);
        for (int k = 0; k < 4; ++k) o[k] = (u8)(d >> (8 * k));
        return;
    }
    const float iscale = FDIV_RN(-127.0f, mx);
    for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int l = 0; l < 16; ++l) {
            const int q = imin(127, nearest_int(FMUL_RN(iscale, v[16 * g + l])));
            o[4 + 16 * g + l] = (u8)q;
            sum += q;
        }
        o[260 + 2 * g] = (u8)(sum & 255);
        o[261 + 2 * g] = (u8)((sum >> 8) & 255);
    }
    const u32 d = AS_UINT(FDIV_RN(1.0f, iscale));
    for (int k = 0; k < 4; ++k) o[k] = (u8)(d >> (8 * k));
#endif
}
#endif

#if FMT_Q3_K
/* make_q3_quants with do_rmse on 16 values: the symmetric fit from -nmax / max, then up to five
 * passes that move one code at a time where the weighted (x^2) fit strictly improves. Codes +
 * nmax in L (all 0 below 1e-15); returns the scale. */
DEVICE float q3_fit(const float* x, int nmax, u8* L) {
    float mx = 0.0f, amax = 0.0f;
    for (int i = 0; i < 16; ++i)
        if (FABS(x[i]) > amax) {
            amax = FABS(x[i]);
            mx = x[i];
        }
    if (amax < 1e-15f) {
        for (int i = 0; i < 16; ++i) L[i] = 0;
        return 0.0f;
    }
    const float iscale = FDIV_RN(-(float)nmax, mx);
    int l[16];
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < 16; ++i) {
        l[i] = clampi(nearest_int(FMUL_RN(iscale, x[i])), -nmax, nmax - 1);
        const float w = FMUL_RN(x[i], x[i]);
        sumlx = FADD_RN(sumlx, FMUL_RN(FMUL_RN(w, x[i]), (float)l[i]));
        suml2 = FADD_RN(suml2, FMUL_RN(FMUL_RN(w, (float)l[i]), (float)l[i]));
    }
    for (int pass = 0; pass < 5; ++pass) {
        int changed = 0;
        for (int i = 0; i < 16; ++i) {
            const float w = FMUL_RN(x[i], x[i]);
            float slx = FADD_RN(sumlx, -FMUL_RN(FMUL_RN(w, x[i]), (float)l[i]));
            if (!(slx > 0.0f)) continue;
            float sl2 = FADD_RN(suml2, -FMUL_RN(FMUL_RN(w, (float)l[i]), (float)l[i]));
            const int nl = clampi(nearest_int(FDIV_RN(FMUL_RN(x[i], sl2), slx)), -nmax, nmax - 1);
            if (nl == l[i]) continue;
            slx = FADD_RN(slx, FMUL_RN(FMUL_RN(w, x[i]), (float)nl));
            sl2 = FADD_RN(sl2, FMUL_RN(FMUL_RN(w, (float)nl), (float)nl));
            if (sl2 > 0.0f && FMUL_RN(FMUL_RN(slx, slx), suml2) > FMUL_RN(FMUL_RN(sumlx, sumlx), sl2)) {
                l[i] = nl;
                sumlx = slx;
                suml2 = sl2;
                ++changed;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < 16; ++i) L[i] = (u8)(l[i] + nmax);
    return suml2 > 0.0f ? FDIV_RN(sumlx, suml2) : 0.0f;
}
#endif

#if FMT_IQ4_NL || FMT_IQ4_XS
/* best_index_int8: the code whose value is nearest v, the lower one on a tie (NaN: 15) */
DEVICE int iq4_index(float v) {
    if (v <= -127.0f) return 0;
    if (v >= 113.0f) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < (float)iq4_value(mid)) hi = mid;
        else lo = mid;
    }
    return FADD_RN(v, -(float)iq4_value(hi - 1)) < FADD_RN((float)iq4_value(hi), -v) ? hi - 1 : hi;
}

/* quantize_row_iq4_nl_impl's scale of a group of 32 without an importance matrix (weights x^2):
 * the least-squares scale over the fit from max / -127 and 15 trial scales (itry - 127) / max,
 * a trial taken when strictly better; 0 below GROUP_MAX_EPS */
DEVICE float iq4_group_scale(const float* xb) {
    float amax = 0.0f, mx = 0.0f;
    for (int j = 0; j < 32; ++j)
        if (FABS(xb[j]) > amax) {
            amax = FABS(xb[j]);
            mx = xb[j];
        }
    if (amax < 1e-15f) return 0.0f;
    float d = FDIV_RN(-mx, -127.0f), best = 0.0f;
    for (int itry = -8; itry <= 7; ++itry) {  /* -8: the first fit, from 1 / d */
        const float id = itry < -7 ? FDIV_RN(1.0f, d) : FDIV_RN((float)(itry - 127), mx);
        float sumqx = 0.0f, sumq2 = 0.0f;
        for (int j = 0; j < 32; ++j) {
            const float q = (float)iq4_value(iq4_index(FMUL_RN(id, xb[j])));
            const float w = FMUL_RN(xb[j], xb[j]);
            sumqx = FADD_RN(sumqx, FMUL_RN(FMUL_RN(w, q), xb[j]));
            sumq2 = FADD_RN(sumq2, FMUL_RN(FMUL_RN(w, q), q));
        }
        if (itry < -7) {
            d = sumq2 > 0.0f ? FDIV_RN(sumqx, sumq2) : 0.0f;
            best = FMUL_RN(d, sumqx);
        } else if (sumq2 > 0.0f && FMUL_RN(sumqx, sumqx) > FMUL_RN(best, sumq2)) {
            d = FDIV_RN(sumqx, sumq2);
            best = FMUL_RN(d, sumqx);
        }
    }
    return d;
}

/* a group of 32 codes of x / dl (idl = 1 / dl, or 0), j in the low nibble, j + 16 the high */
DEVICE void iq4_nibbles(const float* xb, float idl, GLOBAL u8* RESTRICT qs) {
    for (int j = 0; j < 16; ++j)
        qs[j] = (u8)(iq4_index(FMUL_RN(idl, xb[j])) | (iq4_index(FMUL_RN(idl, xb[j + 16])) << 4));
}
#endif

#if FMT_Q2_K || FMT_Q3_K || FMT_IQ4_NL || FMT_IQ4_XS
#if FMT_Q2_K /* where d and the 2-bit codes are (q2_k's d: dmin follows) */
#define SEARCH_D_AT 80
#define CODES2_AT 16
#else
#define SEARCH_D_AT 108
#define CODES2_AT 32
#endif
/* quantize_k of the searched formats (ggml's quantize_row_q2_K_ref, _q3_K_ref and, without an
 * importance matrix, quantize_iq4_nl / _iq4_xs), one work-item per block, as
 * accel/formats/kquants.py and iquants.py state them, every operation rounded on its own. A
 * block holding a NaN or an infinity: q2_k, q3_k a NaN d and zero bytes; iq4 a NaN d and the
 * other bytes of an all-zero block. */
KERNEL void quantize_k(GLOBAL const IN_T* RESTRICT x, GLOBAL u8* RESTRICT out, i64 nblocks) {
    const i64 b = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (b >= nblocks) return;
    GLOBAL u8* o = out + b * BLOCK_BYTES;
    float v[QB];
    const int finite = load_block(x, b, v, o);
#if FMT_Q2_K || FMT_Q3_K
    if (!finite) {
        put_f16(o + SEARCH_D_AT, QNAN);
        return;
    }
    u8 L[256];
    float scales[16];
#endif
#if FMT_Q2_K /* make_qkx2_quants(16, 3, weights |x|, rmin -0.5, 0.1 x 15 steps, absolute error) */
    float mins[16], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 16; ++j) {
        float w[16];
        for (int l = 0; l < 16; ++l) w[l] = FABS(v[16 * j + l]);
        scales[j] = qkx2(v + 16 * j, w, 16, 3, -0.5f, 0.1f, 15, 1, L + 16 * j, mins + j);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_s = max_scale > 0.0f ? FDIV_RN(15.0f, max_scale) : 0.0f;
    const float inv_m = max_min > 0.0f ? FDIV_RN(15.0f, max_min) : 0.0f;
    for (int j = 0; j < 16; ++j)  /* a uint8_t: the min's nibble shifted over the scale's */
        o[j] = (u8)((nearest_int(FMUL_RN(inv_s, scales[j])) & 0xFF)
                    | ((nearest_int(FMUL_RN(inv_m, mins[j])) << 4) & 0xFF));
    put_f16(o + SEARCH_D_AT, FDIV_RN(max_scale, 15.0f));
    put_f16(o + SEARCH_D_AT + 2, FDIV_RN(max_min, 15.0f));
    for (int j = 0; j < 16; ++j) {
        const float d = FMUL_RN(get_f16(o + SEARCH_D_AT), (float)(o[j] & 15));
        if (d == 0.0f) continue;  /* the codes of the scale search stay */
        const float dm = FMUL_RN(get_f16(o + SEARCH_D_AT + 2), (float)(o[j] >> 4));
        for (int l = 0; l < 16; ++l)
            L[16 * j + l] = (u8)clampi(nearest_int(FDIV_RN(FADD_RN(v[16 * j + l], dm), d)), 0, 3);
    }
#elif FMT_Q3_K /* make_q3_quants(16, 4), 6-bit signed sub-scales against -32 / the largest */
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < 16; ++j) {
        scales[j] = q3_fit(v + 16 * j, 4, L + 16 * j);
        if (FABS(scales[j]) > amax) {
            amax = FABS(scales[j]);
            max_scale = scales[j];
        }
    }
    if (amax > 0.0f) {
        const float iscale = FDIV_RN(-32.0f, max_scale);
        for (int j = 0; j < 16; ++j) {
            const int l = clampi((int)(i8)(nearest_int(FMUL_RN(iscale, scales[j])) & 0xFF), -32, 31) + 32;
            o[96 + j % 8] |= (u8)((l & 15) << (j < 8 ? 0 : 4));
            o[104 + j % 4] |= (u8)((l >> 4) << (2 * (j / 4)));
        }
        put_f16(o + SEARCH_D_AT, FDIV_RN(1.0f, iscale));
    }
    for (int j = 0; j < 16; ++j) {
        const int sc = ((o[96 + j % 8] >> (j < 8 ? 0 : 4)) & 15) | (((o[104 + j % 4] >> (2 * (j / 4))) & 3) << 4);
        const float d = FMUL_RN(get_f16(o + SEARCH_D_AT), (float)(sc - 32));
        if (d == 0.0f) continue;
        for (int l = 0; l < 16; ++l)
            L[16 * j + l] = (u8)(clampi(nearest_int(FDIV_RN(v[16 * j + l], d)), -4, 3) + 4);
    }
    for (int i = 0; i < 256; ++i) o[i % 32] |= (u8)((L[i] > 3) << (i / 32));  /* hmask */
#endif
#if FMT_Q2_K || FMT_Q3_K /* per half of 128, byte l: elements l, l + 32, l + 64, l + 96 */
    for (int i = 0; i < 256; ++i)
        o[CODES2_AT + 32 * (i / 128) + i % 32] |= (u8)((L[i] & 3) << (2 * (i % 128 / 32)));
#elif FMT_IQ4_NL
    if (!finite)
        for (int i = 0; i < 32; ++i) v[i] = 0.0f;
    const float d = iq4_group_scale(v);
    iq4_nibbles(v, d != 0.0f ? FDIV_RN(1.0f, d) : 0.0f, o + 2);
    put_f16(o, finite ? d : QNAN);
#else /* iq4_xs: 6-bit sub-scales ls - 32 against d = -(the largest) / 32 */
    if (!finite)
        for (int i = 0; i < 256; ++i) v[i] = 0.0f;
    float scales[8], max_scale = 0.0f, amax = 0.0f;
    for (int g = 0; g < 8; ++g) {
        scales[g] = iq4_group_scale(v + 32 * g);
        if (FABS(scales[g]) > amax) {
            amax = FABS(scales[g]);
            max_scale = scales[g];
        }
    }
    const float d = FDIV_RN(-max_scale, 32.0f);
    const float id = d != 0.0f ? FDIV_RN(1.0f, d) : 0.0f;
    u32 high = 0;
    for (int g = 0; g < 8; ++g) {
        const int ls = clampi(nearest_int(FMUL_RN(id, scales[g])), -32, 31);
        const float dl = FMUL_RN(d, (float)ls);
        iq4_nibbles(v + 32 * g, dl != 0.0f ? FDIV_RN(1.0f, dl) : 0.0f, o + 8 + 16 * g);
        o[4 + g / 2] |= (u8)(((ls + 32) & 15) << (4 * (g % 2)));
        high |= (u32)((ls + 32) >> 4) << (2 * g);
    }
    o[2] = (u8)(high & 255u);
    o[3] = (u8)(high >> 8);
    put_f16(o, finite ? d : QNAN);
#endif
}
#endif

#if SIGNS || FMT_NVFP4
/* quantize_k of the sign, ternary and nvfp4 blocks (ggml's quantize_row_q1_0_ref, _tq1_0_ref,
 * _tq2_0_ref, _nvfp4_ref), one work-item per block, as accel/formats/ternary.py and nvfp4.py
 * state them: q1_0's d the left-to-right float32 sum of |x| over 128, a bit per x >= 0; tq's d
 * max |x|, codes roundf(x / d) + 1 (a non-finite block: d NaN, an all-zero block's codes; a d
 * whose 1/d overflows: d, the zero codes); nvfp4's UE4M3 scale of max |x| / 6 per 16, each code
 * the first of least |value d - x|. */
#if FMT_NVFP4
/* ggml_fp32_to_ue4m3 of v (>= 0 or NaN): the top three mantissa bits plus the fourth, 0x7E at
 * and above 448, subnormals below 2^-6 in 2^-9 units rounded half up; NaN or 0: 0 */
DEVICE int ue4m3_byte(float v) {
    const float c = IS_NAN(v) ? 0.0f : (v > 448.0f ? 448.0f : v);
    if (!(c > 0.0f)) return 0;
    const u32 bits = AS_UINT(c);
    int e = (int)((bits >> 23) & 0xFFu) - 127 + 7;
    int m = (int)((bits >> 20) & 7u) + (int)((bits >> 19) & 1u);
    if (m > 7) {
        e += 1;
        m = 0;
    }
    if (e <= 0) return clampi((int)FADD_RN(FMUL_RN(c, 512.0f), 0.5f), 0, 7);
    return e >= 15 ? 0x7E : (e << 3) | m;
}
#endif

KERNEL void quantize_k(GLOBAL const IN_T* RESTRICT x, GLOBAL u8* RESTRICT out, i64 nblocks) {
    const i64 b = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (b >= nblocks) return;
    GLOBAL u8* o = out + b * BLOCK_BYTES;
    float v[QB];
    const int finite = load_block(x, b, v, o);
#if FMT_Q1_0
    float sum = 0.0f;
    for (int i = 0; i < 128; ++i) sum = FADD_RN(sum, FABS(v[i]));
    const float d = FDIV_RN(sum, 128.0f);
    if (IS_NAN(d)) {  /* 0x7E00 as bytes, as the cpu reference stores it */
        o[1] = 0x7E;
    } else {
        put_f16(o, d);
    }
    for (int i = 0; i < 128; ++i) o[2 + i / 8] |= (u8)((v[i] >= 0.0f ? 1 : 0) << (i % 8));
#elif FMT_NVFP4
    for (int s = 0; s < 4; ++s) {
        float amax = 0.0f;
        for (int j = 0; j < 16; ++j)
            if (amax < FABS(v[16 * s + j])) amax = FABS(v[16 * s + j]);  /* a NaN never wins */
        const int ue = ue4m3_byte(FDIV_RN(amax, 6.0f));
        o[s] = (u8)ue;
        const float d = ue4m3_half(ue);
        for (int j = 0; j < 16; ++j) {
            int best = 0;
            float best_err = FABS(FADD_RN(FMUL_RN((float)e2m1_x2(0), d), -v[16 * s + j]));
            for (int c = 1; c < 16; ++c) {
                const float err = FABS(FADD_RN(FMUL_RN((float)e2m1_x2(c), d), -v[16 * s + j]));
                if (err < best_err) {
                    best = c;
                    best_err = err;
                }
            }
            o[4 + 8 * s + j % 8] |= (u8)(j < 8 ? best : best << 4);
        }
    }
#else /* tq1_0, tq2_0 */
    float d = 0.0f;
    for (int i = 0; i < 256; ++i) d = FABS(v[i]) > d ? FABS(v[i]) : d;
    float inv = finite && d != 0.0f ? FDIV_RN(1.0f, d) : 0.0f;
    inv = IS_INF(inv) ? 0.0f : inv;
    int t[256];
    for (int i = 0; i < 256; ++i) t[i] = finite ? (int)ROUND_HALF_AWAY(FMUL_RN(v[i], inv)) + 1 : 1;
#if FMT_TQ2_0 /* element 128 j + 32 n + m: bits 2 n of byte 32 j + m */
    for (int i = 0; i < 256; ++i) o[32 * (i / 128) + i % 32] |= (u8)(t[i] << (2 * (i % 128 / 32)));
#else /* five trits a byte, the first the most significant; each byte ceil(v 256 / 243) */
    for (int m = 0; m < 48; ++m) {  /* bytes 0-31: elements m + 32 i; 32-47: 160 + m' + 16 i */
        int u = 0;
        for (int i = 0; i < 5; ++i) u = 3 * u + (m < 32 ? t[m + 32 * i] : t[160 + (m - 32) + 16 * i]);
        o[m] = (u8)((u * 256 + 242) / 243);
    }
    for (int j = 0; j < 4; ++j) {  /* qh: elements 240 + j + 4 i, a zero fifth trit */
        int u = 0;
        for (int i = 0; i < 4; ++i) u = 3 * u + t[240 + j + 4 * i];
        o[48 + j] = (u8)((3 * u * 256 + 242) / 243);
    }
#endif
    if (finite) {
        put_f16(o + BLOCK_BYTES - 2, d);
    } else {
        o[BLOCK_BYTES - 1] = 0x7E;
    }
#endif
}
#endif

#if FMT_MXFP4
#if defined(ACCEL_OPENCL) /* double is core in CUDA and HIP C++ */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
/* quantize_row_mxfp4_ref, one work-item per block of 32: e = floor(log2f(max|x|)) - 2 + 127 kept
 * to its low byte (C's float to uint8_t conversion on x86), then each value's code the first of
 * least |k d - x| (d = 2^(e-128), k twice the FP4 value). log2f is taken as the float32 rounding
 * of a double log2, which decides a maximum just below a power of two as a correctly rounded
 * log2f does (the backend asks for fp64). A block holding a NaN or an infinity stores e = 0xFF
 * and zero codes (docs/api.md). */
KERNEL void quantize_k(GLOBAL const IN_T* RESTRICT x, GLOBAL u8* RESTRICT out, i64 nblocks) {
    const i64 b = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (b >= nblocks) return;
    GLOBAL u8* o = out + b * BLOCK_BYTES;
    float v[32], amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < 32; ++i) {
        v[i] = LOAD_IN(x, b * 32 + i);
        finite &= !(IS_NAN(v[i]) || IS_INF(v[i]));
        if (amax < FABS(v[i])) amax = FABS(v[i]);
    }
    for (int i = 1; i < BLOCK_BYTES; ++i) o[i] = 0;
    if (!finite) {
        o[0] = 255;
        return;
    }
    const int e = amax > 0.0f ? ((int)floor((float)log2((double)amax)) - 2 + 127) & 255 : 0;
    o[0] = (u8)e;
    const float d = e8m0_half(e);
    for (int j = 0; j < 32; ++j) {
        int best = 0;
        float best_err = FABS(FADD_RN(FMUL_RN((float)e2m1_x2(0), d), -v[j]));
        for (int c = 1; c < 16; ++c) {
            const float err = FABS(FADD_RN(FMUL_RN((float)e2m1_x2(c), d), -v[j]));
            if (err < best_err) {
                best = c;
                best_err = err;
            }
        }
        o[1 + (j & 15)] |= (u8)(j < 16 ? best : best << 4);
    }
}
#endif

#if !NO_KX
/* qmatmul(x_format=...): xq holds x quantized to the format's vec_dot partner, M rows of K / XQB
 * blocks of XQ_BYTES, and each weight block with its x blocks adds its float32 terms (kx_add),
 * in order: GGML's exact integer sums scaled in the CPU reference's float32 order, so the
 * results are its bits. One work-item per output; grid as qmatmul_k's. */
#if FMT_Q4_1 || FMT_Q5_1
#define XQB 32 /* q8_1: float16 d, float16 s = d sum(codes), 32 int8 codes */
#define XQ_BYTES 36
#elif QB == 32 || KX_SPANS
#define XQB 32 /* q8_0: float16 d, 32 int8 codes */
#define XQ_BYTES 34
#else
#define XQB 256 /* q8_k: float32 d, 256 int8 codes, 16 int16 sums of 16 codes */
#define XQ_BYTES 292
#endif

/* The term of one weight block wb and the x block xb. K-quants, GGML's vec_dot_q*_K_q8_K: S =
 * sum_j sc_j (x codes . w codes of sub-block j) and (q4_k, q5_k) Mn = sum_j m_j (x code sums of
 * sub-block j, q8_k's block sums), exact integers; the term (d_w d_x) S - (dmin_w d_x) Mn.
 * mxfp4, vec_dot_mxfp4_q8_0: (2^(e-128) d_x) s, s the integer dot of the codes. */
#if !KX_SPANS
DEVICE float kx_term(GLOBAL const u8* RESTRICT xb, GLOBAL const u8* RESTRICT wb) {
#if DECODE_ONLY
    /* q5_0, iq4_nl x q8_0, q4_1, q5_1 x q8_1 and q2_k, q3_k, iq4_xs x q8_k (ggml's vec_dot_*):
     * S = sum over groups
     * of 16 of the integer scale times (w codes . x codes), Mn (q2_k) = sum of the integer mins
     * times q8_k's sums of 16 x codes; the term (d_w d_x) S - (dm_w d_x) Mn. (The cpu
     * reference scales iq4_xs per group of 32: the same sums, other float32 roundings.) */
#if QB == 32
    const float dx = f16_to_f32((u32)xb[0] | ((u32)xb[1] << 8));
    GLOBAL const i8* xc = (GLOBAL const i8*)(xb + XQ_BYTES - 32);
#else
    const float dx = AS_FLOAT(load_u32(xb));
    GLOBAL const i8* xc = (GLOBAL const i8*)(xb + 4);
#endif
    int S = 0;
#if !(FMT_Q4_1 || FMT_Q5_1)
    int Mn = 0;
#endif
    for (int g = 0; g < QB / 16; ++g) {
        int s = 0, sx, sy;
        for (int l = 16 * g; l < 16 * g + 16; ++l) s += code_at(wb, l) * xc[l];
        group_ints(wb, g, &sx, &sy);
        S += sx * s;
#if FMT_Q2_K
        Mn += sy * (short)((u32)xb[260 + 2 * g] | ((u32)xb[261 + 2 * g] << 8));
#endif
    }
    float d, dm;
    block_d(wb, &d, &dm);
#if FMT_Q4_1 || FMT_Q5_1 /* vec_dot_q4_1_q8_1: (d_w d_x) S + m_w s_x, s_x q8_1's stored sum */
    return FADD_RN(FMUL_RN(FMUL_RN(d, dx), (float)S), FMUL_RN(dm, f16_to_f32((u32)xb[2] | ((u32)xb[3] << 8))));
#else
    return FADD_RN(FMUL_RN(FMUL_RN(d, dx), (float)S), -FMUL_RN(FMUL_RN(dm, dx), (float)Mn));
#endif
#elif FMT_MXFP4
    int s = 0;
    for (int l = 0; l < 32; ++l) {
        const int byte = wb[1 + (l & 15)];
        s += e2m1_x2(l < 16 ? byte & 15 : byte >> 4) * (i8)xb[2 + l];
    }
    const float dx = f16_to_f32((u32)xb[0] | ((u32)xb[1] << 8));
    return FMUL_RN(FMUL_RN(e8m0_half(wb[0]), dx), (float)s);
#else
    const float dx = AS_FLOAT((u32)xb[0] | ((u32)xb[1] << 8) | ((u32)xb[2] << 16) | ((u32)xb[3] << 24));
    int S = 0;  /* |S| < 2^28: 16 groups x 127 x 16 x 128 x 32 at most */
#if FMT_Q6_K
    for (int i = 0; i < 256; i += 16) {
        int s = 0;
        for (int l = i; l < i + 16; ++l) {
            const int h = l / 128, k = l % 128;
            const int lo = (wb[64 * h + k % 64] >> (4 * (k / 64))) & 15;
            const int hi = (wb[128 + 32 * h + k % 32] >> (2 * (k / 32))) & 3;
            s += (lo + 16 * hi - 32) * (i8)xb[4 + l];
        }
        S += (i8)wb[192 + i / 16] * s;
    }
    return FMUL_RN(FMUL_RN(get_f16(wb + 208), dx), (float)S);
#else
    int Mn = 0;
    for (int j = 0; j < 8; ++j) {
        int sc, mn, s = 0;
        scale_min_k4(wb + 4, j, &sc, &mn);
        GLOBAL const u8* qs = wb + BLOCK_BYTES - 128 + 32 * (j / 2);
        for (int l = 0; l < 32; ++l) {
            int q = (qs[l] >> (4 * (j % 2))) & 15;
#if FMT_Q5_K
            q |= ((wb[16 + l] >> j) & 1) << 4;
#endif
            s += q * (i8)xb[4 + 32 * j + l];
        }
        S += sc * s;
        /* the block sums of sub-block j: int16 numbers 2j and 2j + 1 */
        const int b0 = (short)((u32)xb[260 + 4 * j] | ((u32)xb[261 + 4 * j] << 8));
        const int b1 = (short)((u32)xb[262 + 4 * j] | ((u32)xb[263 + 4 * j] << 8));
        Mn += mn * (b0 + b1);
    }
    return FADD_RN(FMUL_RN(FMUL_RN(get_f16(wb), dx), (float)S),
                   -FMUL_RN(FMUL_RN(get_f16(wb + 2), dx), (float)Mn));
#endif
#endif
}

#endif

/* acc plus weight block wb's terms with its QB / XQB x blocks from xb, as the CPU reference adds
 * them: one kx_term; nvfp4 x q8_0, per sub-block of 16, (d_x s_w) S with s_w its halved E4M3
 * scale and S the dot of its doubled E2M1 codes; q1_0 x q8_0 (ggml's vec_dot_q1_0_q8_0), d_w
 * times the float32 sum over its four x blocks of d_x S. */
DEVICE float kx_add(float acc, GLOBAL const u8* RESTRICT xb, GLOBAL const u8* RESTRICT wb) {
#if FMT_NVFP4
    for (int g = 0; g < 4; ++g) {
        GLOBAL const u8* xg = xb + (g / 2) * XQ_BYTES;
        int S = 0;
        for (int l = 0; l < 16; ++l) S += code_at(wb, 16 * g + l) * (i8)xg[2 + 16 * (g % 2) + l];
        const float dx = f16_to_f32((u32)xg[0] | ((u32)xg[1] << 8));
        acc = FADD_RN(acc, FMUL_RN(FMUL_RN(dx, ue4m3_half(wb[g])), (float)S));
    }
    return acc;
#elif FMT_Q1_0
    float sumi = 0.0f, d, unused;
    for (int k = 0; k < 4; ++k) {
        GLOBAL const u8* xk = xb + k * XQ_BYTES;
        int S = 0;
        for (int l = 0; l < 32; ++l) S += code_at(wb, 32 * k + l) * (i8)xk[2 + l];
        sumi = FADD_RN(sumi, FMUL_RN(f16_to_f32((u32)xk[0] | ((u32)xk[1] << 8)), (float)S));
    }
    block_d(wb, &d, &unused);
    return FADD_RN(acc, FMUL_RN(d, sumi));
#else
    return FADD_RN(acc, kx_term(xb, wb));
#endif
}

KERNEL void qmatmul_kx(GLOBAL const u8* RESTRICT xq, GLOBAL const u8* RESTRICT w,
                       GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    const int n = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    const int m = GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1);
    if (n >= N || m >= M) return;
    const int nb = K / QB;
    float acc = 0.0f;
    for (int b = 0; b < nb; ++b)
        acc = kx_add(acc, xq + ((i64)m * nb + b) * (QB / XQB) * XQ_BYTES, w + ((i64)n * nb + b) * BLOCK_BYTES);
    STORE_OUT(out, (i64)m * N + n, acc);
}

/* the offset qgemv_kx's unsigned codes carry (q3_k's 3-bit codes plus 4, tq2_0's -1..1 plus 1),
 * taken back through q8_k's group sums */
#if FMT_Q3_K
#define KX_OFFSET 4
#elif FMT_TQ2_0
#define KX_OFFSET 1
#else
#define KX_OFFSET 0
#endif
/* the formats of blocks of 32 that meet one q8_0 or q8_1 block each in qgemv_kx */
#define KX32 (FMT_MXFP4 || LEGACY32 || FMT_IQ4_NL)
#if FMT_Q4_K || FMT_Q5_K || FMT_Q6_K || FMT_Q2_K || FMT_Q3_K || FMT_TQ2_0 || FMT_IQ4_XS || KX32
/* qgemv_kx: qmatmul_kx for q4_k, q5_k, q6_k, q2_k, q3_k, iq4_xs and the blocks of 32 (mxfp4, q4_1,
 * q5_0, q5_1, iq4_nl) on CPU devices, one work-item per RN weight rows
 * and RM rows of x, with the same float32 terms added in the same order (each output's blocks in turn, so the
 * bits are qmatmul_kx's and the CPU reference's): only the exact integer sums are vectorized.
 * Launch: local size (1, 1); groups (ceil(N / RN), ceil(M / RM)).
 *
 * On OpenCL the sums run in 16-lane vectors of 16 bits: a sub-block's 32 code products (at most
 * 15 x 128 each) are a short16 of pair sums (accel.h's ACCEL_PAIRS_U4: vpmaddubsw on AVX2; the
 * codes of sub-blocks 2p and 2p + 1 are the low and the high nibbles of the same 32 bytes, x's
 * are its bytes as they are); a tree of adjacent-pair sums (ACCEL_HADD16: vphaddw) takes the 8
 * sub-blocks' vectors to one with two lanes per sub-block (|.| <= 30720), and ACCEL_MADD16 with
 * the 6-bit scales widens that to 32 bits. (A product with each sub-block's scale as a splat, the
 * obvious spelling, LLVM refactored into more horizontal adds.) The mins' term takes q8_k's block
 * sums (sum_j m_j (x codes of j)), so the per-weight work is the code product alone (q6_k and
 * mxfp4: see their kx_sums). At one output per work-item, four blocks share one tree of
 * horizontal sums (KXG). On PoCL 3.1, 2-core
 * EPYC (Zen 3), q4_k 4096 x 4096 at M = 1: 0.55 ms with a tree per block and the float16 scales
 * in integer code; 0.45 with F16C; 0.39 with the four-block groups; 0.30 with vphaddw/vphaddd as
 * builtins (kernel time, weights in the L3). */
#if defined(ACCEL_OPENCL)
/* 32 bytes from p (2-byte aligned) as 16 little-endian 16-bit lanes, lane by lane as
 * ACCEL_BYTES16 does for bytes. */
DEVICE short16 load_s16x16(GLOBAL const u8* RESTRICT p) {
    GLOBAL const short* q = (GLOBAL const short*)p;
    return (short16)(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11],
                     q[12], q[13], q[14], q[15]);
}

/* The lane sums of a and b together, (sum a, sum b), as one tree of halves and adjacent pairs. */
DEVICE int2 sum8x2(int8 a, int8 b) {
    const int8 c = (int8)(a.lo, b.lo) + (int8)(a.hi, b.hi);
    const int4 e = (int4)(c.lo.even + c.lo.odd, c.hi.even + c.hi.odd);
    return e.even + e.odd;
}

/* The lane sums of P[0..3] and Q[0..3] as (sum P[0], ..., sum P[3], sum Q[0], ..., sum Q[3]):
 * four blocks' horizontal sums in one tree. */
DEVICE int8 sum4x2(const int8* P, const int8* Q) {
    /* per half: blocks 0-3 */
    const int8 p = ACCEL_HADD8(ACCEL_HADD8(P[0], P[1]), ACCEL_HADD8(P[2], P[3]));
    const int8 q = ACCEL_HADD8(ACCEL_HADD8(Q[0], Q[1]), ACCEL_HADD8(Q[2], Q[3]));
    return (int8)(p.lo + p.hi, q.lo + q.hi);
}

#if FMT_Q4_K
/* kx_term's S for weight block wb (scales sc, each twice) and x codes xc, as an int8 whose lanes
 * add up to it: the code products by sub-block, added in adjacent pairs three times (sub-blocks
 * 0-7 in each half's lanes, each the sum of 8, |.| <= 30720), then times the scales in 32 bits. */
DEVICE int8 kx_sums(GLOBAL const u8* RESTRICT wb, short16 sc, GLOBAL const i8* RESTRICT xc) {
    short16 t[8];  /* sub-block j's products, two per lane */
    UNROLL for (int p = 0; p < 4; ++p) {  /* sub-blocks 2p and 2p + 1: 32 bytes' nibbles */
        const uchar16 lo = (uchar16)(ACCEL_BYTES16(wb, 16 + 32 * p));
        const uchar16 hi = (uchar16)(ACCEL_BYTES16(wb, 32 + 32 * p));
        t[2 * p] = ACCEL_PAIRS_U4(lo, hi, 0, (char16)(ACCEL_BYTES16(xc, 64 * p)),
                                  (char16)(ACCEL_BYTES16(xc, 64 * p + 16)));
        t[2 * p + 1] = ACCEL_PAIRS_U4(lo, hi, 1, (char16)(ACCEL_BYTES16(xc, 64 * p + 32)),
                                      (char16)(ACCEL_BYTES16(xc, 64 * p + 48)));
    }
    const short16 h = ACCEL_HADD16(ACCEL_HADD16(ACCEL_HADD16(t[0], t[1]), ACCEL_HADD16(t[2], t[3])),
                                   ACCEL_HADD16(ACCEL_HADD16(t[4], t[5]), ACCEL_HADD16(t[6], t[7])));
    return ACCEL_MADD16(h, sc);
}
#elif FMT_Q6_K || FMT_Q2_K || FMT_Q3_K || FMT_TQ2_0
/* q6_k: sum over the 16 groups of 16 of scale x (6-bit code . x codes), as an int8 whose lanes
 * add up to it (kx_term's S is that minus 32 sum_g scale x (x code sum of g); q2_k's codes are
 * 2 bits, its S this sum; q3_k's are 3 bits, the code plus 4, so its S is this less 4 x ...). Chunk c of 32
 * values is groups 2c and 2c + 1: their codes' products pair up in lanes 0-7 and 8-15 of
 * ACCEL_PAIRS_U8 (|.| <= 2 x 63 x 128), widened to 32 bits by ACCEL_MADD16 with ones; two levels
 * of ACCEL_HADD8 leave groups (0 2 4 6 | 1 3 5 7) of chunks 0-3 and (8 10 12 14 | 9 11 13 15) of
 * chunks 4-7 (|.| <= 16 x 63 x 128), which the scales, so arranged, multiply. */
DEVICE int8 kx_sums(GLOBAL const u8* RESTRICT wb, char16 sc, GLOBAL const i8* RESTRICT xc) {
    int8 u[8];
    UNROLL for (int c = 0; c < 8; ++c) {
        const int h = c / 4, q = c % 4;  /* half h of the block; quarter q of it */
#if FMT_Q6_K
        GLOBAL const u8* ql = wb + 64 * h + 32 * (q % 2);  /* low 4 bits: nibble q / 2 */
        GLOBAL const u8* qh = wb + 128 + 32 * h;           /* high 2 bits: bits 2q, 2q + 1 */
        const uchar s1 = 4 * (q / 2), s2 = 2 * q;
        const uchar16 c0 = (((uchar16)(ACCEL_BYTES16(ql, 0)) >> s1) & (uchar)15) |
                           ((((uchar16)(ACCEL_BYTES16(qh, 0)) >> s2) & (uchar)3) << (uchar)4);
        const uchar16 c1 = (((uchar16)(ACCEL_BYTES16(ql, 16)) >> s1) & (uchar)15) |
                           ((((uchar16)(ACCEL_BYTES16(qh, 16)) >> s2) & (uchar)3) << (uchar)4);
#else /* element 128 h + 32 q + l: bits 2q of code byte 32 h + l (q3_k: plus 4 where bit c of
       * mask byte l is set) */
        GLOBAL const u8* qs = wb + Q2_CODES_AT + 32 * h;
        const uchar s2 = 2 * q;
        uchar16 c0 = ((uchar16)(ACCEL_BYTES16(qs, 0)) >> s2) & (uchar)3;
        uchar16 c1 = ((uchar16)(ACCEL_BYTES16(qs, 16)) >> s2) & (uchar)3;
#if FMT_Q3_K
        c0 |= (((uchar16)(ACCEL_BYTES16(wb, 0)) >> (uchar)c) & (uchar)1) << (uchar)2;
        c1 |= (((uchar16)(ACCEL_BYTES16(wb, 16)) >> (uchar)c) & (uchar)1) << (uchar)2;
#endif
#endif
        u[c] = ACCEL_MADD16(ACCEL_PAIRS_U8(c0, c1, (char16)(ACCEL_BYTES16(xc, 32 * c)),
                                           (char16)(ACCEL_BYTES16(xc, 32 * c + 16))), (short16)1);
    }
    const int8 a = ACCEL_HADD8(ACCEL_HADD8(u[0], u[1]), ACCEL_HADD8(u[2], u[3]));
    const int8 b = ACCEL_HADD8(ACCEL_HADD8(u[4], u[5]), ACCEL_HADD8(u[6], u[7]));
    return a * convert_int8(sc.s02461357) + b * convert_int8(sc.s8ACE9BDF);
}
#elif FMT_IQ4_XS || FMT_Q5_K
/* iq4_xs, q5_k x q8_k: sum over the 8 sub-blocks of 32 of its scale x (weight codes . x codes),
 * as an int8 whose lanes add up to it: each sub-block's dot as an int8 (iq4_xs: kvalues_iq4nl
 * by lookup, vpshufb; q5_k: nibble and fifth bit, pairs of at most 2 x 31 x 128 in 16 bits, so
 * widened per sub-block, unlike q4_k's tree of 16-bit sums), two levels of ACCEL_HADD8 leave
 * sub-block i of each four in lanes i and 4 + i. */
DEVICE int8 kx_sums(GLOBAL const u8* RESTRICT wb, int8 sc, GLOBAL const i8* RESTRICT xc) {
    int8 u[8];
#if FMT_IQ4_XS
    const char16 table = (char16)(IQ4_VALUES);
    UNROLL for (int j = 0; j < 8; ++j) {
        const uchar16 b = (uchar16)(ACCEL_BYTES16(wb, 8 + 16 * j));
        u[j] = DOT32_S8(ACCEL_LOOKUP16(table, b & (uchar)15), ACCEL_LOOKUP16(table, b >> (uchar)4),
                        (char16)(ACCEL_BYTES16(xc, 32 * j)), (char16)(ACCEL_BYTES16(xc, 32 * j + 16)));
    }
#else /* sub-block j: nibble j % 2 of 32 code bytes from 48 + 32 (j / 2), fifth bit bit j of qh */
    const uchar16 hlo = (uchar16)(ACCEL_BYTES16(wb, 16)), hhi = (uchar16)(ACCEL_BYTES16(wb, 32));
    UNROLL for (int j = 0; j < 8; ++j) {
        const uchar s = 4 * (j % 2);
        const uchar16 lo = (((uchar16)(ACCEL_BYTES16(wb, 48 + 32 * (j / 2))) >> s) & (uchar)15) |
                           (((hlo >> (uchar)j) & (uchar)1) << (uchar)4);
        const uchar16 hi = (((uchar16)(ACCEL_BYTES16(wb, 64 + 32 * (j / 2))) >> s) & (uchar)15) |
                           (((hhi >> (uchar)j) & (uchar)1) << (uchar)4);
        u[j] = DOT32_U8(lo, hi, (char16)(ACCEL_BYTES16(xc, 32 * j)), (char16)(ACCEL_BYTES16(xc, 32 * j + 16)));
    }
#endif
    const int8 a = ACCEL_HADD8(ACCEL_HADD8(u[0], u[1]), ACCEL_HADD8(u[2], u[3]));
    const int8 b = ACCEL_HADD8(ACCEL_HADD8(u[4], u[5]), ACCEL_HADD8(u[6], u[7]));
    return a * sc.s01230123 + b * sc.s45674567;
}
#endif

#if KX32
/* The blocks of 32 against x's 32 codes: kx_term's integer sum as an int8 whose lanes add up to
 * it. Element l is the low nibble of code byte l, l + 16 the high (q5_0, q5_1: its fifth bit is
 * bit l of qh); mxfp4's codes stand for twice an E2M1 value and iq4_nl's for kvalues_iq4nl,
 * both signed bytes by a table lookup (vpshufb on x86). */
DEVICE int8 kx_sums(GLOBAL const u8* RESTRICT wb, GLOBAL const i8* RESTRICT xc) {
    const char16 xlo = (char16)(ACCEL_BYTES16(xc, 0)), xhi = (char16)(ACCEL_BYTES16(xc, 16));
    const uchar16 b = (uchar16)(ACCEL_BYTES16(wb, BLOCK_BYTES - 16));
    const uchar16 lo = b & (uchar)15, hi = b >> (uchar)4;
#if FMT_MXFP4 || FMT_IQ4_NL
#if FMT_MXFP4
    const char16 table = (char16)(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
#else
    const char16 table = (char16)(IQ4_VALUES);
#endif
    return DOT32_S8(ACCEL_LOOKUP16(table, lo), ACCEL_LOOKUP16(table, hi), xlo, xhi);
#elif FMT_Q4_1
    return DOT32_U8(lo, hi, xlo, xhi);
#else /* q5_0, q5_1: bit l of qh as bit 4 of lane l, each byte of qh spread over 8 lanes */
    const uchar4 qh = as_uchar4(load_u32(wb + QH_AT));
    const uchar16 bit = (uchar16)(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    const uchar16 flo = as_uchar16(((uchar16)(qh.s0, qh.s0, qh.s0, qh.s0, qh.s0, qh.s0, qh.s0, qh.s0, qh.s1,
                                              qh.s1, qh.s1, qh.s1, qh.s1, qh.s1, qh.s1, qh.s1) & bit) != (uchar)0);
    const uchar16 fhi = as_uchar16(((uchar16)(qh.s2, qh.s2, qh.s2, qh.s2, qh.s2, qh.s2, qh.s2, qh.s2, qh.s3,
                                              qh.s3, qh.s3, qh.s3, qh.s3, qh.s3, qh.s3, qh.s3) & bit) != (uchar)0);
    const uchar16 clo = lo | (flo & (uchar)16), chi = hi | (fhi & (uchar)16);
#if FMT_Q5_0 /* codes less 16: signed */
    return DOT32_S8(as_char16(clo) - (char)16, as_char16(chi) - (char)16, xlo, xhi);
#else
    return DOT32_U8(clo, chi, xlo, xhi);
#endif
#endif
}
#endif

/* Blocks whose integer sums share one horizontal tree: 4 at one or two outputs per work-item (8
 * of mxfp4's 32-value blocks, which have no second sum), where a tree per block (its latency on
 * every block's float term) held the loop back; 1 over more outputs, whose 4 x RM x RN partial
 * vectors would not stay in registers. PoCL 3.1, Zen 3, 4096 x 4096 at M = 2: mxfp4 1.48 ->
 * 0.98 ms, q6_k 0.94 -> 0.75, q4_k 0.58 -> 0.56. */
#if RM * RN <= 2 && KX32
#define KXG 8
#elif RM * RN <= 2
#define KXG 4
#else
#define KXG 1
#endif

/* Blocks b to b + n - 1 (n <= KXG) of rows xr of x and wr of the weight added to acc, in order
 * (span: the bytes of a work-item's weight rows, for PREFETCH_ROWS). */
DEVICE void kx_blocks(float (*acc)[RN], GLOBAL const u8* const* xr, GLOBAL const u8* const* wr,
                      int b, int n, i64 span) {
    UNROLL for (int r = 0; r < RN; ++r) {
        PREFETCH_ROWS(wr + r, 1, (i64)b * BLOCK_BYTES, KXG * BLOCK_BYTES, span);  /* row by row */
        /* block b + g's integer sums as lanes: q4_k, kx_term's S and Mn; q6_k, its S + 32 Q
         * and Q (the scales times q8_k's 16 x code sums); mxfp4, its s (Q unused) */
        int8 P[RM][KXG], Q[RM][KXG];
        float d[KXG], dmin[KXG], dx[RM][KXG], sx[RM][KXG];
        UNROLL for (int g = 0; g < KXG; ++g) {
            const int bg = b + imin(g, n - 1);  /* past n: block n - 1 again, not added */
            GLOBAL const u8* wb = wr[r] + (i64)bg * BLOCK_BYTES;
#if KX32
#if FMT_MXFP4
            d[g] = e8m0_half(wb[0]);
#else
            block_d(wb, &d[g], &dmin[g]);
#endif
            UNROLL for (int i = 0; i < RM; ++i) {
                GLOBAL const u8* xb = xr[i] + (i64)bg * XQ_BYTES;
                const float2 ds = f16x2_to_f32(load_u32(xb));  /* q8_1: d, then s (q8_0: d) */
                dx[i][g] = ds.x;
                sx[i][g] = ds.y;
                P[i][g] = kx_sums(wb, (GLOBAL const i8*)(xb + XQ_BYTES - 32));
                Q[i][g] = (int8)0;
            }
        }
#else
#if FMT_Q4_K || FMT_Q5_K
            const float2 dm = f16x2_to_f32(load_u32(wb));
            const uchar16 sm = scales_mins_k4(wb + 4);
#if FMT_Q4_K
            const short16 sc = convert_short16(sm.s0123456701234567);
#else
            const int8 sc = convert_int8(sm.s01234567);
#endif
            /* sub-block j's x code sum is q8_k's int16 sums 2j and 2j + 1 (|.| <= 16 x 128) */
            const short16 qw = convert_short16(sm.s8899aabbccddeeff);  /* each min twice */
#elif FMT_Q6_K
            const float2 dm = f16x2_to_f32((u32)wb[208] | ((u32)wb[209] << 8));
            const char16 sc = (char16)(ACCEL_BYTES16((GLOBAL const i8*)wb, 192));
            const short16 qw = convert_short16(sc);  /* group g's x code sum: q8_k's sum g */
#elif FMT_Q2_K /* scale: the low nibble of byte g, minimum: the high */
            const float2 dm = f16x2_to_f32(load_u32(wb + 80));
            const uchar16 sm = (uchar16)(ACCEL_BYTES16(wb, 0));
            const char16 sc = as_char16(sm & (uchar)15);
            const short16 qw = convert_short16(sm >> (uchar)4);
#elif FMT_Q3_K
            const float2 dm = (float2)(f16x2_to_f32(*(GLOBAL const T_F16*)(wb + 108)).x, 0.0f);
            const char16 sc = convert_char16(q3_scales(wb));
            const short16 qw = convert_short16(sc);  /* the 4 the codes carry, times the scales */
#elif FMT_TQ2_0 /* codes 0..2 stand for -1..1: scales 1, the 1 they carry times q8_k's sums */
            const float2 dm = (float2)(f16x2_to_f32(*(GLOBAL const T_F16*)(wb + 64)).x, 0.0f);
            const char16 sc = (char16)1;
            const short16 qw = (short16)1;
#else
            const float2 dm = (float2)(f16x2_to_f32(*(GLOBAL const T_F16*)wb).x, 0.0f);
            const int8 sc = iq4xs_scales(wb);
#endif
            d[g] = dm.x;
            dmin[g] = dm.y;
            UNROLL for (int i = 0; i < RM; ++i) {
                GLOBAL const u8* xb = xr[i] + (i64)bg * XQ_BYTES;
                dx[i][g] = AS_FLOAT(load_u32(xb));
                P[i][g] = kx_sums(wb, sc, (GLOBAL const i8*)(xb + 4));
#if FMT_IQ4_XS
                Q[i][g] = (int8)0;
#else
                Q[i][g] = ACCEL_MADD16(load_s16x16(xb + 260), qw);
#endif
            }
        }
#endif
        UNROLL for (int i = 0; i < RM; ++i) {
#if KXG == 8  /* mxfp4: blocks 0-3 and 4-7 through sum4x2's two trees */
            const int8 s = sum4x2(P[i], P[i] + 4);
            const int S[8] = {s.s0, s.s1, s.s2, s.s3, s.s4, s.s5, s.s6, s.s7}, Mn[8] = {0};
#elif KXG == 4
            const int8 s = sum4x2(P[i], Q[i]);
            const int S[4] = {s.s0, s.s1, s.s2, s.s3}, Mn[4] = {s.s4, s.s5, s.s6, s.s7};
#else
            const int2 s = sum8x2(P[i][0], Q[i][0]);
            const int S[1] = {s.x}, Mn[1] = {s.y};
#endif
            UNROLL for (int g = 0; g < KXG; ++g)
                if (g < n)
#if FMT_Q4_K || FMT_Q5_K || FMT_Q2_K
                    acc[i][r] = FADD_RN(acc[i][r],
                                        FADD_RN(FMUL_RN(FMUL_RN(d[g], dx[i][g]), (float)S[g]),
                                                -FMUL_RN(FMUL_RN(dmin[g], dx[i][g]), (float)Mn[g])));
#elif FMT_Q6_K
                    acc[i][r] = FADD_RN(acc[i][r], FMUL_RN(FMUL_RN(d[g], dx[i][g]),
                                                           (float)(S[g] - 32 * Mn[g])));
#elif FMT_Q3_K || FMT_TQ2_0 || FMT_IQ4_XS /* kx_term's with no minimum: dm = 0 times Mn = 0 */
                    acc[i][r] = FADD_RN(acc[i][r],
                                        FADD_RN(FMUL_RN(FMUL_RN(d[g], dx[i][g]), (float)(S[g] - KX_OFFSET * Mn[g])),
                                                -FMUL_RN(FMUL_RN(0.0f, dx[i][g]), 0.0f)));
#elif FMT_Q4_1 || FMT_Q5_1 /* kx_term's (d_w d_x) S + m_w s_x */
                    acc[i][r] = FADD_RN(acc[i][r], FADD_RN(FMUL_RN(FMUL_RN(d[g], dx[i][g]), (float)S[g]),
                                                           FMUL_RN(dmin[g], sx[i][g])));
#else
                    acc[i][r] = FADD_RN(acc[i][r], FMUL_RN(FMUL_RN(d[g], dx[i][g]), (float)S[g]));
#endif
        }
    }
}

KERNEL void qgemv_kx(GLOBAL const u8* RESTRICT xq, GLOBAL const u8* RESTRICT w,
                     GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    const int n0 = GROUP_ID(0) * RN, m0 = GROUP_ID(1) * RM;
    const int nb = K / XQB;
    GLOBAL const u8* xr[RM];
    GLOBAL const u8* wr[RN];
    UNROLL for (int i = 0; i < RM; ++i) xr[i] = xq + (i64)imin(m0 + i, M - 1) * nb * XQ_BYTES;
    UNROLL for (int r = 0; r < RN; ++r) wr[r] = w + (i64)imin(n0 + r, N - 1) * nb * BLOCK_BYTES;
    float acc[RM][RN];
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int r = 0; r < RN; ++r) acc[i][r] = 0.0f;
    const i64 span = RN * (i64)nb * BLOCK_BYTES;  /* the work-item's weight rows */
    int b = 0;
    for (; b + KXG <= nb; b += KXG) kx_blocks(acc, xr, wr, b, KXG, span);
    if (b < nb) kx_blocks(acc, xr, wr, b, nb - b, span);
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int r = 0; r < RN; ++r)
        if (m0 + i < M && n0 + r < N) STORE_OUT(out, (i64)(m0 + i) * N + n0 + r, acc[i][r]);
}
#else
/* CUDA and HIP plan qmatmul_kx (GPU parameter sets); this build only keeps the kernel set
 * uniform: kx_term per block, the same terms in the same order. */
KERNEL void qgemv_kx(GLOBAL const u8* RESTRICT xq, GLOBAL const u8* RESTRICT w,
                     GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    const int n0 = GROUP_ID(0) * RN, m0 = GROUP_ID(1) * RM;
    const int nb = K / QB;
    for (int i = m0; i < imin(m0 + RM, M); ++i)
        for (int n = n0; n < imin(n0 + RN, N); ++n) {
            float acc = 0.0f;
            for (int b = 0; b < nb; ++b)
                acc = kx_add(acc, xq + ((i64)i * nb + b) * (QB / XQB) * XQ_BYTES,
                             w + ((i64)n * nb + b) * BLOCK_BYTES);
            STORE_OUT(out, (i64)i * N + n, acc);
        }
}
#endif
#endif
#endif
