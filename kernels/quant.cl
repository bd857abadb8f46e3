/* GGUF Q8_0 / Q4_0 block quantization, bit-exact with GGML's reference quantizer on every
 * compiler: every multiply and add is rounded on its own (no FMA contraction, FMUL_RN/FADD_RN),
 * 1/d is correctly rounded (FDIV_RN), d is stored as float16 rounded to nearest even.
 *
 * Defines: FMT_Q8_0 or FMT_Q4_0; IN_DT (F32, F16, BF16) for quantize; OUT_DT for qmatmul;
 * RM, RN, VW for qmatmul and qmatmul_x8; RM, RN, GEMV_WG (a power of two, 8 or more), GEMV_TEAMS
 * and optionally GEMV_MIN_GROUPS, GEMV_OFFSET_PER_TILE and GEMV_KSPLIT (defaults below) for qgemv
 * and qgemv_x8 (which finds block offsets per tile whatever GEMV_OFFSET_PER_TILE says);
 * STREAM_WARPS, STREAM_ROWS, STREAM_STAGES and STREAM_MIN_GROUPS (groups per multiprocessor the
 * CUDA compiler sizes registers for) for qgemv_stream; RUNS_WG, RUNS_TEAMS, RUNS_RN and
 * optionally RUNS_MIN_GROUPS (as GEMV_MIN_GROUPS), with RM, for qgemv_runs.
 * GEMV_PROBE (1 or 2) makes qgemv a measurement, not a product (gpu_goals times both beside it,
 * docs/gpu.md): 1 keeps its loop's loads, x staging and barriers but does no arithmetic on the
 * codes (its output counts bits), the ceiling of its memory traffic; 2 keeps the arithmetic but
 * reads every tile's weight from the row's first (cache-resident), the ceiling of its
 * instructions.
 * Blocks: 32 values; Q8_0 = float16 d + 32 int8 codes (34 bytes), Q4_0 = float16 d + 16 bytes
 * whose low nibble is element j and high nibble element j + 16 (18 bytes).
 * Non-finite blocks (accel's definition): a NaN gives d = NaN (0x7E00) and zero codes, an
 * infinity (no NaN) gives the reference d (infinite) and zero codes.
 */
#define QK 32
#if FMT_Q8_0
#define BLOCK_BYTES 34
#define IS_Q8_0 1 /* FMT_Q8_0 as a value (a Q4_0 build does not define it) */
#else
#define BLOCK_BYTES 18
#define IS_Q8_0 0
#endif

/* Block blk of x as float32 in v; returns whether a value is NaN, and sets *finite to whether all
 * are finite. */
DEVICE int load_block(GLOBAL const IN_T* RESTRICT x, i64 blk, float* v, int* finite) {
    int has_nan = 0;
    *finite = 1;
    for (int j = 0; j < QK; ++j) {
        v[j] = LOAD_IN(x, blk * QK + j);
        has_nan |= IS_NAN(v[j]);
        *finite &= !(IS_NAN(v[j]) || IS_INF(v[j]));
    }
    return has_nan;
}

/* The first element of largest magnitude, as ggml-quants.c finds it: starting from +0.0, so a
 * block of (signed) zeros gives +0.0 (and Q4_0 stores d = 0.0 / -8 = -0.0, 0x8000). */
DEVICE float first_extreme(const float* v) {
    float extreme = 0.0f;
    for (int j = 0; j < QK; ++j)
        if (FABS(v[j]) > FABS(extreme)) extreme = v[j];
    return extreme;
}

/* 1/d as the reference computes it; 0 (zero codes) for a non-finite block, d = 0 and, accel's
 * rule where C is undefined, where 1/d overflows. */
DEVICE float inverse_scale(float d, int finite) {
    const float id = (d != 0.0f && finite) ? FDIV_RN(1.0f, d) : 0.0f;
    return IS_INF(id) ? 0.0f : id;
}

/* The Q8_0 code of v: round(v / d) with ties away from zero, as one rounded multiply by 1/d. */
DEVICE int q8_code(float v, float id, int finite) {
    return finite ? (int)ROUND_HALF_AWAY(FMUL_RN(v, id)) : 0;
}

/* Block blk of x in v, its d and 1/d (*id) as the reference finds them for Q8_0 (q8) or Q4_0;
 * returns whether a value is NaN, and sets *finite to whether all are finite. */
DEVICE int scale_block(GLOBAL const IN_T* RESTRICT x, i64 blk, int q8, float* v, int* finite,
                       float* d, float* id) {
    const int has_nan = load_block(x, blk, v, finite);
    const float extreme = first_extreme(v);
    *d = q8 ? FDIV_RN(FABS(extreme), 127.0f) : FDIV_RN(extreme, -8.0f);
    *id = inverse_scale(*d, *finite);
    return has_nan;
}

/* One work-item per block: x holds nblocks * 32 values, out nblocks * BLOCK_BYTES bytes. */
KERNEL void quantize(GLOBAL const IN_T* RESTRICT x, GLOBAL u8* RESTRICT out, i64 nblocks) {
    i64 blk = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (blk >= nblocks) return;
    float v[QK], d, id;
    int finite;
    const int has_nan = scale_block(x, blk, IS_Q8_0, v, &finite, &d, &id);
    GLOBAL u8* ob = out + blk * BLOCK_BYTES;
    if (has_nan) {  /* 0x7E00 written as bytes: float16 conversions disagree on NaN payloads */
        ob[0] = 0x00; ob[1] = 0x7E;
    } else {
        STORE_F16((GLOBAL T_F16*)ob, 0, d);
    }
#if FMT_Q8_0
    for (int j = 0; j < QK; ++j) ob[2 + j] = (u8)(i8)q8_code(v[j], id, finite);
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

/* Code j of a block: its int8 (Q8_0), its nibble less 8 (Q4_0). */
DEVICE int code_int(GLOBAL const u8* RESTRICT blk, int j) {
#if FMT_Q8_0
    return (i8)blk[2 + j];
#else
    int byte = blk[2 + (j & 15)];
    return ((j < 16) ? (byte & 15) : (byte >> 4)) - 8;
#endif
}

DEVICE float block_code(GLOBAL const u8* RESTRICT blk, int j) {
    return (float)code_int(blk, j);
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

/* The codes of the weight block at blk as QKV integer vectors. */
DEVICE void block_codes(GLOBAL const u8* RESTRICT blk, vi_t* wv) {
    UNROLL for (int t = 0; t < QKV; ++t) {
#if FMT_Q8_0
        wv[t] = VLOAD_I8((GLOBAL const i8*)blk, 2 + t * VW);
#else
        int e = t * VW;  /* elements e..e+VW-1: low nibbles below 16, high nibbles above */
        vi_t bytes = VLOAD_U8(blk, 2 + (e & 15));
        wv[t] = (e < QK / 2 ? (bytes & (vi_t)15) : (bytes >> (vi_t)4)) - (vi_t)8;
#endif
    }
}

/* VW consecutive blocks' scales as float32 lanes: the float16 bits of the block at p and its
 * VW - 1 successors (BLOCK_BYTES apart), converted as f16_to_f32 does, all lanes at once: a
 * block's share of the scalar conversion's ~15 instructions drops to two (CPU devices). */
#define SCALE_BITS(p, j) ((i32)*(GLOBAL const u16*)((p) + (j) * BLOCK_BYTES))
#if VW == 1
#define RUN_SCALE_BITS(p) SCALE_BITS(p, 0)
#define VAS_FLOAT(v) AS_FLOAT((u32)(v))
#define VAS_INT(v) ((i32)AS_UINT(v))
#else
#define RUN_SCALE_BITS(p) ((vi_t)(ACCEL_LANES(SCALE_BITS, p, 0)))
#define VAS_FLOAT(v) ACCEL_CAT(as_float, VW)(v)
#define VAS_INT(v) ACCEL_CAT(as_int, VW)(v)
#endif
#if VW == 16 && defined(__AVX512BW__) && defined(ACCEL_F16C) && defined(ACCEL_OPENCL)
/* AVX512BW: the run's 16 float16 scales picked out of 128-byte windows by word shuffles
 * (vpermt2w), a window per BPW blocks (q4_0: 2 windows, q8_0: 4), and merged, in place of 16
 * word inserts, each on port 5 with the lookups (q4_0 4096 x 4096 GEMV, M = 1, in cache: 0.50 ->
 * 0.42 ms). The last window ends inside the run (q4_0: byte 272 of 288, q8_0: 536 of 544). */
#define RUN_SCALES_BY_WINDOWS 1
typedef ushort accel_u16x32u __attribute__((ext_vector_type(32), aligned(2)));
#define HW (BLOCK_BYTES / 2)  /* words per block */
#define BPW (63 / HW + 1)     /* blocks whose scale word lies in a window of 64 words */
#define WINDOW_WORD(c, b) ((b) / BPW == (c) ? ((b) % BPW) * HW : -1)  /* lane b: window c's word */
#define KEEP_OR_TAKE(c, b) ((b) / BPW == (c) ? 16 + (b) : (b))        /* lane b: window c's, or kept */
/* h's lanes of window c (the words of blocks c BPW ...) taken from it (two shuffles: clang types
 * the inner one's result as a plain vector, which converts to ushort16 only by assignment) */
#define TAKE_WINDOW(h, p, c) do {                                                                 \
        const ushort16 w_ = __builtin_shufflevector(                                              \
            *(GLOBAL const accel_u16x32u*)((p) + (c) * BPW * BLOCK_BYTES),                        \
            *(GLOBAL const accel_u16x32u*)((p) + (c) * BPW * BLOCK_BYTES + 64),                   \
            ACCEL_LANES(WINDOW_WORD, c, 0));                                                      \
        h = __builtin_shufflevector(h, w_, ACCEL_LANES(KEEP_OR_TAKE, c, 0));                      \
    } while (0)
DEVICE ushort16 run_scale_words(GLOBAL const u8* RESTRICT p) {
    ushort16 h = (ushort16)0;
    TAKE_WINDOW(h, p, 0);
#if BPW < 16
    TAKE_WINDOW(h, p, 1);
#endif
#if 2 * BPW < 16
    TAKE_WINDOW(h, p, 2);
#endif
#if 3 * BPW < 16
    TAKE_WINDOW(h, p, 3);
#endif
    return h;
}
#else
#define RUN_SCALES_BY_WINDOWS 0
#endif
DEVICE vf_t run_scales(GLOBAL const u8* RESTRICT p) {
#if RUN_SCALES_BY_WINDOWS
    const ushort16 h = run_scale_words(p);
    return (float16)(f16x8_to_f32(h.lo), f16x8_to_f32(h.hi));
#else
    const vi_t h = RUN_SCALE_BITS(p);
#if defined(ACCEL_F16C) && VW == 8  /* one vcvtph2ps: q4_0 x q8_0 GEMV 0.47 -> 0.40 ms (PoCL 3.1) */
    return f16x8_to_f32(convert_ushort8(h));
#elif defined(ACCEL_F16C) && VW == 16
    return (float16)(f16x8_to_f32(convert_ushort8(h.lo)), f16x8_to_f32(convert_ushort8(h.hi)));
#else
    const vi_t em = h & 0x7FFF;
    const vi_t tiny = VAS_INT(VCVT_F(em) * 0x1p-24f);    /* zero and subnormals */
    const vi_t big = (em << 13) + (em >= 0x7C00 ? (vi_t)0x70000000 : (vi_t)(112 << 23));
    return VAS_FLOAT((em < 0x0400 ? tiny : big) | ((h & 0x8000) << 16));
#endif
#endif
}

/* Q4_0 on AVX-512 (Q4_LUT): a block's 32 weights as floats by one vpermps per 16 from the table
 * of the 16 code values, in place of a mask or shift, a subtraction and a conversion: the same
 * floats, so the same sums. 4096 x 4096, PoCL 3.1, 2-core VM, weights rotated over 2 GB, kernel
 * time, interleaved: M = 1 0.74 -> 0.67 ms, M = 8 2.19 -> 1.98. */
#if FMT_Q4_0 && VW == 16 && defined(ACCEL_LOOKUP16F) && !defined(Q4_LUT)
#define Q4_LUT 1
#endif

/* Block bk of each of the RM x RN row pairs: acc[i][j] += d[j] (x_i's block . w_j's codes). */
DEVICE void qmatmul_block(vf_t acc[RM][RN], GLOBAL const IN_T* const* xr, GLOBAL const u8* const* wr,
                          int bk, const float* d) {
    /* x's block by a pointer and constant offsets: lanes indexed from an int sum were not
     * always merged into one vector load (PoCL 3.1) */
    vf_t xv[RM][QKV];
    UNROLL for (int i = 0; i < RM; ++i) {
        GLOBAL const IN_T* xb = xr[i] + (i64)bk * QK;
        UNROLL for (int t = 0; t < QKV; ++t) xv[i][t] = VLOAD_IN(xb, t * VW);
    }
    UNROLL for (int j = 0; j < RN; ++j) {
        vf_t wv[QKV];
#if Q4_LUT
        /* the codes less 8 looked up by nibble (the low 4 bits of each lane), exact as converted */
        const float16 values = (float16)(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
        const int16 bytes = VLOAD_U8(wr[j] + (i64)bk * BLOCK_BYTES, 2);
        wv[0] = ACCEL_LOOKUP16F(values, bytes);
        wv[1] = ACCEL_LOOKUP16F(values, bytes >> 4);
#else
        vi_t codes[QKV];
        block_codes(wr[j] + (i64)bk * BLOCK_BYTES, codes);
        UNROLL for (int t = 0; t < QKV; ++t) wv[t] = VCVT_F(codes[t]);
#endif
        UNROLL for (int i = 0; i < RM; ++i) {
            vf_t part = xv[i][0] * wv[0];
            UNROLL for (int t = 1; t < QKV; ++t) part = FMA(xv[i][t], wv[t], part);
            acc[i][j] = FMA((vf_t)d[j], part, acc[i][j]);
        }
    }
}

/* The blocks of a run are unrolled for tiles of at most RUN_UNROLL_TILE outputs (the GEMV's
 * RM x RN): at RM = RN = 4 the unrolled run (1800 instructions) was no faster (M = 8, PoCL 3.1,
 * interleaved in one process with RUN_UNROLL_TILE = 16, the override that A/B takes). */
#ifndef RUN_UNROLL_TILE
#define RUN_UNROLL_TILE 2
#endif
#if RM * RN <= RUN_UNROLL_TILE
#define RUN_UNROLL UNROLL
#else
#define RUN_UNROLL _Pragma("unroll 1")
#endif
/* acc[i][j] = the dot products of RM rows of x and RN weight rows, in runs of VW blocks: each
 * weight row's VW scales converted as one vector and, for small tiles, the run's blocks unrolled
 * (a loop over blocks spent 11 of its 38 instructions per block on the count and on finding the
 * run's start at M = 1, PoCL 3.1), then the last nblk % VW blocks one by one. */
DEVICE void qmatmul_tile(vf_t acc[RM][RN], GLOBAL const IN_T* const* xr, GLOBAL const u8* const* wr,
                         int nblk) {
    const int runs_end = nblk - nblk % VW;
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int j = 0; j < RN; ++j) acc[i][j] = (vf_t)0;
    float d[RN];
    for (int b0 = 0; b0 < runs_end; b0 += VW) {
        vf_t ds[RN];
        UNROLL for (int j = 0; j < RN; ++j) ds[j] = run_scales(wr[j] + (i64)b0 * BLOCK_BYTES);
        RUN_UNROLL for (int b = 0; b < VW; ++b) {
            PREFETCH_ROWS(wr, RN, (i64)(b0 + b) * BLOCK_BYTES, BLOCK_BYTES, RN * (i64)nblk * BLOCK_BYTES);
            UNROLL for (int j = 0; j < RN; ++j) d[j] = VGET(float, ds[j], b);
            qmatmul_block(acc, xr, wr, b0 + b, d);
        }
    }
    for (int bk = runs_end; bk < nblk; ++bk) {
        UNROLL for (int j = 0; j < RN; ++j) d[j] = block_scale(wr[j] + (i64)bk * BLOCK_BYTES);
        qmatmul_block(acc, xr, wr, bk, d);
    }
}

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
    qmatmul_tile(acc, xr, wr, nblk);
    UNROLL for (int i = 0; i < RM; ++i) {
        if (m0 + i >= M) break;
        UNROLL for (int j = 0; j < RN; ++j) {
            if (n0 + j >= N) break;
            STORE_OUT(out, (i64)(m0 + i) * N + n0 + j, VSUM(acc[i][j]));
        }
    }
}

/* GEMV for GPUs, also serving small M: out[m, n] = sum_k x[m, k] * dequantize(w)[n, k].
 *
 * Launch contract: local size (GEMV_WG * GEMV_TEAMS, 1); groups
 * (ceil(N / (GEMV_TEAMS / GEMV_KSPLIT * RN)), ceil(M / RM)); any N, M, and K a multiple of 32;
 * the weight may start at any even address. A work-group is GEMV_TEAMS teams of GEMV_WG
 * work-items (a power of two); teams j = GEMV_KSPLIT q + p (p < GEMV_KSPLIT) own the RN weight
 * rows from (GROUP_ID(0) * GEMV_TEAMS / GEMV_KSPLIT + q) * RN, and the group the RM rows of x
 * from GROUP_ID(1) * RM. Teams of GEMV_WG <= ACCEL_WARP work-items reduce by shuffles alone,
 * wider ones (and every team on OpenCL 1.2, which has no shuffles) finish in local memory; teams
 * that share rows add their sums in team order (gemv_sum_store).
 *
 * The group walks K in steps of GEMV_SPAN blocks, GEMV_KSPLIT tiles of GEMV_WG; work-item l of
 * team j takes block l of tile p of the step for all of its rows, so a team's loads of one row
 * cover consecutive bytes. A block is only 2-byte aligned: the work-item loads the QWORDS aligned
 * 16-byte words that cover it and moves the block into place with selects and funnel shifts,
 * never indexing registers by a run-time value (that would put the array in local memory). A
 * step moves a multiple of 16 bytes, so a work-item finds its block at the same offset in its
 * words in every step of a row: the offset is found once per row (per step on HIP, see
 * GEMV_OFFSET_PER_TILE). The step's x values are staged once per group in local memory as float
 * (double-buffered: one barrier per step) with the sums of each 4 that UNBIAS takes, at odd
 * strides per block so that neighbouring work-items reading the same float4 of neighbouring
 * blocks hit different banks, and at constant offsets from one address; every team and row
 * reuses them. The next tile's weight and x loads are issued before this tile's arithmetic, to
 * be in flight during it.
 * Codes become floats without conversion instructions. Q8_0: BYTE_F23 gives the float 2^23 + b
 * for the byte b with its sign bit flipped, and subtracting 2^23 + 128 gives the code exactly.
 * Q4_0: the funnel shifts that extract the code words put each nibble n in bits 3..6 of its byte,
 * so BYTE_F16 alone gives the float 8 + n / 2 = (n - 8) / 2 + 12: instead of a subtraction per
 * value, each 4 values x_k take one FMA of -12 (x_0 + x_1 + x_2 + x_3) (the x sum shared by the
 * RN rows), and the final sum is doubled (exactly). Error amplification: the running sum swings
 * by up to 24 |x| between those FMAs (placed mid-quad to halve the swing) where the exact codes
 * add at most 8 |x|, so the rounding error is a few times that of the exact-code sum: measured on
 * one block (K = 32, the worst case: block errors add as a random walk while the bound grows with
 * sqrt(K) |x| |w|), at most 0.17 of the tests' 5 sqrt(K) u |x| |w| bound (0.07 with exact codes),
 * also for all-positive x, and under 0.002 at K = 8192. An infinite x makes UNBIAS subtract inf
 * from inf, so a work-item whose sum comes out NaN sums its blocks again with the exact codes
 * (exact_dot, after the loop: nothing is added to the loop, and a NaN x gives NaN either way). */
#ifndef GEMV_WG
#define GEMV_WG 32
#endif
#ifndef GEMV_TEAMS
#define GEMV_TEAMS 4
#endif
#if GEMV_WG < 8
#error "GEMV_WG: 8 or more, so that a tile of GEMV_WG blocks is a whole number of 16-byte words"
#endif
#define GEMV_ITEMS (GEMV_WG * GEMV_TEAMS)
/* Teams that share a group's rows, each over every GEMV_KSPLIT-th tile of K: more groups for few
 * rows (decode shapes), at the price of one more reduction. A group's step along K is then
 * GEMV_SPAN blocks, GEMV_KSPLIT consecutive tiles. */
#ifndef GEMV_KSPLIT
#define GEMV_KSPLIT 1
#endif
#if GEMV_TEAMS % GEMV_KSPLIT
#error "GEMV_KSPLIT: a divisor of GEMV_TEAMS"
#endif
#define GEMV_SPAN (GEMV_WG * GEMV_KSPLIT)
#ifndef GEMV_PROBE
#define GEMV_PROBE 0
#endif
/* Work-items per multiprocessor the CUDA compiler sizes the GEMVs' registers for, by default (as
 * GEMV_MIN_GROUPS and RUNS_MIN_GROUPS groups): 512 for Q4_0 (at most 128 registers each), 384
 * for Q8_0 (170: its 34-byte blocks take a third more words) */
#if FMT_Q8_0
#define GEMV_RESIDENT 384
#else
#define GEMV_RESIDENT 512
#endif
#define RESIDENT_GROUPS(items) (GEMV_RESIDENT / (items) > 0 ? GEMV_RESIDENT / (items) : 1)
#ifndef GEMV_MIN_GROUPS
#define GEMV_MIN_GROUPS RESIDENT_GROUPS(GEMV_ITEMS)
#endif
/* Whether qgemv finds a block's offset in its 16-byte words per tile rather than once per row:
 * NVIDIA's compiler turns the once-found offset into 26 fewer instructions per tile (sm_90), AMD's
 * into 70 more live VGPRs (gfx90a: 192 against 123, half the waves per SIMD). A define, so that
 * the HIP build's way also runs on OpenCL devices (tests/backends/opencl/test_gemv_gpu.py) */
#ifndef GEMV_OFFSET_PER_TILE
#if defined(ACCEL_HIP)
#define GEMV_OFFSET_PER_TILE 1
#else
#define GEMV_OFFSET_PER_TILE 0
#endif
#endif
#define XS_ITERS ((GEMV_SPAN * 8 + GEMV_ITEMS - 1) / GEMV_ITEMS) /* x float4s staged per work-item */
/* local-memory strides in float4s of a block's 8 float4s of x and 2 of their sums: odd, so the 8
 * work-items that read 16 bytes each in one pass of the banks read 8 different bank quads */
#define XS_STRIDE 9
#define XSUMS_STRIDE 3
#define QWORDS ((BLOCK_BYTES + 14 + 15) / 16) /* 16-byte words around a block at any even offset */
#define RAW_WORDS (4 * QWORDS)
#if FMT_Q8_0
#define CODE_AT(quad, k) (BYTE_F23(quad, k) - 8388736.0f) /* 2^23 + 128 */
#define XSUM_AT(sums4, q) 0.0f /* no sums by 4 (and no array of them) */
#define UNBIAS(part, xsum) ((void)(xsum), (part)) /* exact codes: no offset to remove */
#define CODE_SCALE 1.0f
#else
#define CODE_AT(quad, k) BYTE_F16(quad, k)
#define XSUM_AT(sums4, q) F4_AT(sums4, (q) & 3) /* x's sum by 4 at q in its float4 of sums */
#define UNBIAS(part, xsum) FMA(-12.0f, xsum, part)
#define CODE_SCALE 2.0f
/* x . dequantize(w) / CODE_SCALE over blocks b, b + step, ... below nblk of one Q4_0 weight row
 * and one row of x, with exact codes: where UNBIAS met an infinite x (inf - inf), this gives
 * the infinity (or the NaN of x (n - 8) with n = 8) that the exact sum has. */
DEVICE float exact_dot(GLOBAL const u8* wrow, GLOBAL const IN_T* xrow, int b, int step, int nblk) {
    float sum = 0.0f;
    for (; b < nblk; b += step) {
        GLOBAL const u8* blk = wrow + (i64)b * BLOCK_BYTES;
        float part = 0.0f;
        _Pragma("unroll 1") for (int j = 0; j < QK; ++j) /* small: it is the rare path */
            part = FMA(LOAD_IN(xrow, (i64)b * QK + j), block_code(blk, j), part);
        sum = FMA(block_scale(blk), part, sum);
    }
    return sum / CODE_SCALE;
}

/* qgemv's exact sum of weight row r and x row i of its group over this work-item's blocks (the
 * rows found again from the ids). Out of line: inlined after qgemv's loop, it cost the loop 20
 * instructions per tile on sm_90 (qgemv_stream calls exact_dot inside its row loop, where a call
 * would save registers to local memory). */
DEVICE_NOINLINE float qgemv_exact(GLOBAL const IN_T* x, GLOBAL const u8* w, int M, int N, int K,
                              int i, int r) {
    const int team = LOCAL_ID(0) / GEMV_WG;
    const int row = (GROUP_ID(0) * (GEMV_TEAMS / GEMV_KSPLIT) + team / GEMV_KSPLIT) * RN + r;
    return exact_dot(w + (i64)imin(row, N - 1) * (K / QK) * BLOCK_BYTES,
                     x + (i64)imin(GROUP_ID(1) * RM + i, M - 1) * K,
                     team % GEMV_KSPLIT * GEMV_WG + LOCAL_ID(0) % GEMV_WG, GEMV_SPAN, K / QK);
}
#endif
#if ACCEL_WARP > 0
#define GEMV_SHFL (GEMV_WG < ACCEL_WARP ? GEMV_WG : ACCEL_WARP)
#else
#define GEMV_SHFL 1
#endif
#define F4_AT(v, k) ((k) == 0 ? (v).x : (k) == 1 ? (v).y : (k) == 2 ? (v).z : (v).w)

/* n aligned 16-byte words from a (n a constant), as 4 n 32-bit words of raw. qgemv's are the
 * QWORDS around a block that starts in the first (each holds at least one byte of the block, so
 * no load leaves the 16-byte words that the buffer's own bytes occupy). A macro: as a function,
 * hiprtc left the loop rolled and raw in scratch memory (gfx90a: 144 to 560 bytes per
 * work-item in qgemv, qgemv_x8 and qgemv_runs). */
#define LOAD_WORDS(a, raw, n) \
    UNROLL for (int w_ = 0; w_ < (n); ++w_) { \
        const u32x4 t_ = (a)[w_]; \
        (raw)[4 * w_] = t_.x; (raw)[4 * w_ + 1] = t_.y; (raw)[4 * w_ + 2] = t_.z; (raw)[4 * w_ + 3] = t_.w; \
    }

/* PICK_WORD(c, a, b): a where c, else b. On HIP by masks: hiprtc turned selects between raw's
 * words into loads from a selected address, which kept raw in scratch memory and read it back in
 * the loop (144 or 208 bytes per work-item on gfx90a); with masks it stays in registers (162
 * VGPRs, 3 waves per SIMD). On CUDA the selects are better (masks put local memory in sm_80's
 * loop). */
#if defined(ACCEL_HIP)
#define PICK_WORD(c, a, b) ((b) ^ (((a) ^ (b)) & (0u - (u32)((c) != 0u))))
#else
#define PICK_WORD(c, a, b) ((c) ? (a) : (b))
#endif

/* Moves the block at byte s (even) of raw (clobbered) to the start of raw, at bit offset sh of
 * raw[0] (0 or 16), which it returns. */
DEVICE u32 align_block(u32* raw, u32 s) {
    UNROLL for (int i = 0; i + 2 < RAW_WORDS; ++i) raw[i] = PICK_WORD(s & 8u, raw[i + 2], raw[i]);
    UNROLL for (int i = 0; i + 1 < RAW_WORDS; ++i) raw[i] = PICK_WORD(s & 4u, raw[i + 1], raw[i]);
    return (s & 2u) * 8u;
}

/* 32 bits of the aligned raw words from bit at of word c on. */
DEVICE u32 raw_bits(const u32* raw, int c, u32 at) {
    return (u32)((((u64)raw[c + 1] << 32) | raw[c]) >> at);
}

/* The scale of the block that align_block put at bit sh. */
DEVICE float raw_scale(const u32* raw, u32 sh) {
    u16 bits = (u16)(raw[0] >> sh);
    return LOAD_F16(&bits, 0);
}

/* A code word as CODE_AT reads it: four codes (Q4_0: its nibbles shifted to bits 3..6). */
DEVICE u32 as_quad(u32 word) {
#if FMT_Q8_0
    return word ^ 0x80808080u;
#else
    return word & 0x78787878u;
#endif
}

/* The scale and the 8 code words (one per 4 values; as_quad makes them what CODE_AT reads) of
 * the block at byte s (even) of raw (which is clobbered). */
DEVICE float take_block(u32* raw, u32 s, u32* codes) {
    const u32 sh = align_block(raw, s);
    UNROLL for (int j = 0; j < 8; ++j) {
#if FMT_Q8_0
        codes[j] = raw_bits(raw, j, sh + 16u);
#else /* word j & 3, from 3 bits early (low nibbles) or 1 bit late (high): nibbles at bits 3..6 */
        codes[j] = raw_bits(raw, j & 3, sh + (j < 4 ? 13u : 17u));
#endif
    }
    return raw_scale(raw, sh);
}

/* 32 bits of the n words W from bit b on (n and b constants once unrolled); bits past the last
 * word are 0. */
DEVICE u32 words_bits(const u32* W, int n, int b) {
    const u32 lo = W[b / 32], hi = b / 32 + 1 < n ? W[b / 32 + 1] : 0u;
    return b % 32 == 0 ? lo : (u32)((((u64)hi << 32) | lo) >> (b % 32));
}

/* The scale and the 8 code words (as take_block gives them) of the block whose bytes start at
 * byte `at` (even; a constant once unrolled) of the n words W: no run-time realignment. */
DEVICE float fixed_block(const u32* W, int n, int at, u32* codes) {
    const int cb = 8 * (at + 2); /* the first code byte's bit */
    UNROLL for (int j = 0; j < 8; ++j) {
#if FMT_Q8_0
        codes[j] = words_bits(W, n, cb + 32 * j);
#else /* low nibbles from 3 bits early, high nibbles from 1 bit late: nibbles at bits 3..6 */
        codes[j] = words_bits(W, n, cb + 32 * (j & 3) + (j < 4 ? -3 : 1));
#endif
    }
    u16 bits = (u16)(W[at / 4] >> (8 * (at % 4)));
    return LOAD_F16(&bits, 0);
}

/* Code word q's share of one block's dot products of nr weight rows with RM rows of x (qgemv's
 * and qgemv_runs' inner loop): part[i * nr + r] += the 4 values xq[i] of x row i times the 4
 * codes (CODE_AT) of as_quad(codes[r][q]), with UNBIAS of their sum sq[i] mid-quad (see qgemv). */
DEVICE void quad_parts(float* part, int nr, const u32 (*codes)[8], int q, const f32x4* xq,
                       const float* sq) {
    UNROLL for (int r = 0; r < nr; ++r) {
        const u32 quad = as_quad(codes[r][q]);
        UNROLL for (int k = 0; k < 4; ++k) {
            const float c = CODE_AT(quad, k);
            UNROLL for (int i = 0; i < RM; ++i) {
                if (k == 2) part[i * nr + r] = UNBIAS(part[i * nr + r], sq[i]);
                part[i * nr + r] = FMA(F4_AT(xq[i], k), c, part[i * nr + r]);
            }
        }
    }
}

/* The sums acc[i][r] of each team's GEMV_WG work-items added up and stored, times scale, at
 * out[(m0 + i) * N + n0 + r] by the team's first work-item: by shuffles within GEMV_SHFL
 * work-items, then (teams wider than that, and every team without shuffles) through red, the
 * local memory GEMV_RED_DECL declares; with GEMV_KSPLIT > 1 the sums of each GEMV_KSPLIT
 * consecutive teams (which share rows) are added in team order too, and the first stores them.
 * Every work-item of the group calls it (it holds barriers). */
#if GEMV_WG > GEMV_SHFL || GEMV_KSPLIT > 1
#define RED_STRIDE (GEMV_ITEMS / GEMV_SHFL) /* at least GEMV_TEAMS */
#define GEMV_RED_DECL LOCAL float red[RM * RN * RED_STRIDE];
#define GEMV_RED red
#else
#define GEMV_RED_DECL
#define GEMV_RED 0
#endif
DEVICE void gemv_sum_store(float (*acc)[RN], LOCAL_PTR float* red, GLOBAL OUT_T* RESTRICT out,
                           int M, int N, int m0, int n0, float scale) {
    const int tid = LOCAL_ID(0), lane = tid % GEMV_WG, team = tid / GEMV_WG;
#if GEMV_SHFL > 1
    UNROLL for (int o = GEMV_SHFL / 2; o > 0; o >>= 1)
        UNROLL for (int i = 0; i < RM; ++i)
            UNROLL for (int r = 0; r < RN; ++r) acc[i][r] += SHFL_DOWN(acc[i][r], o);
#endif
#if GEMV_WG > GEMV_SHFL
    if (lane % GEMV_SHFL == 0)
        UNROLL for (int i = 0; i < RM; ++i)
            UNROLL for (int r = 0; r < RN; ++r) red[(i * RN + r) * RED_STRIDE + tid / GEMV_SHFL] = acc[i][r];
    BARRIER();
    if (lane == 0)
        UNROLL for (int i = 0; i < RM; ++i)
            UNROLL for (int r = 0; r < RN; ++r) {
                float sum = 0.0f;
                for (int t = 0; t < GEMV_WG / GEMV_SHFL; ++t)
                    sum += red[(i * RN + r) * RED_STRIDE + tid / GEMV_SHFL + t];
                acc[i][r] = sum;
            }
#endif
#if GEMV_KSPLIT > 1
    {
        BARRIER(); /* every read of red above is done */
        if (lane == 0)
            UNROLL for (int i = 0; i < RM; ++i)
                UNROLL for (int r = 0; r < RN; ++r) red[(i * RN + r) * RED_STRIDE + team] = acc[i][r];
        BARRIER();
        if (lane == 0 && team % GEMV_KSPLIT == 0)
            UNROLL for (int i = 0; i < RM; ++i)
                UNROLL for (int r = 0; r < RN; ++r) {
                    float sum = 0.0f;
                    for (int k = 0; k < GEMV_KSPLIT; ++k) sum += red[(i * RN + r) * RED_STRIDE + team + k];
                    acc[i][r] = sum;
                }
    }
#endif
    (void)red;
    if (lane == 0 && team % GEMV_KSPLIT == 0)
        UNROLL for (int i = 0; i < RM; ++i)
            UNROLL for (int r = 0; r < RN; ++r)
                if (m0 + i < M && n0 + r < N) STORE_OUT(out, (i64)(m0 + i) * N + n0 + r,
                                                   scale * acc[i][r]);
}

KERNEL LAUNCH_BOUNDS(GEMV_ITEMS, 1, GEMV_MIN_GROUPS) void qgemv(GLOBAL const IN_T* RESTRICT x,
                                            GLOBAL const u8* RESTRICT w,
                                            GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    LOCAL f32x4 xs[2][RM][GEMV_SPAN * XS_STRIDE];
#if !FMT_Q8_0
    LOCAL f32x4 xsums[2][RM][GEMV_SPAN * XSUMS_STRIDE];
#endif
    GEMV_RED_DECL
    const int tid = LOCAL_ID(0), lane = tid % GEMV_WG, team = tid / GEMV_WG;
    const int n0 = (GROUP_ID(0) * (GEMV_TEAMS / GEMV_KSPLIT) + team / GEMV_KSPLIT) * RN;
    const int m0 = GROUP_ID(1) * RM, nblk = K / QK;
    /* the work-item's block in each step: tile team % GEMV_KSPLIT of the step, block lane */
    const int mine = team % GEMV_KSPLIT * GEMV_WG + lane;
    /* A step moves GEMV_SPAN blocks, a multiple of 16 bytes: a work-item's block sits at the same
     * offset at[r] in its 16-byte words in every step of row r (found once, or per step where
     * GEMV_OFFSET_PER_TILE), from wa[r] on by the step's bytes. Past the end of the row, a
     * work-item reloads its last block (or, with none, the row's last): the loads stay inside the
     * weight and the compute skips them. */
    const int last_tile = imax(nblk - 1 - mine, 0) / GEMV_SPAN;
    u32 raw[RN][RAW_WORDS], at[RN], codes[RN][8];
#if GEMV_OFFSET_PER_TILE
    GLOBAL const u8* wa[RN]; /* the block itself */
    UNROLL for (int r = 0; r < RN; ++r)
        wa[r] = w + ((i64)imin(n0 + r, N - 1) * nblk + imin(mine, nblk - 1)) * BLOCK_BYTES;
#else
    GLOBAL const u32x4* wa[RN];
    UNROLL for (int r = 0; r < RN; ++r) {
        GLOBAL const u8* p = w + ((i64)imin(n0 + r, N - 1) * nblk + imin(mine, nblk - 1)) * BLOCK_BYTES;
        at[r] = ADDR_BITS(p) & 15u;
        wa[r] = (GLOBAL const u32x4*)(p - at[r]);
    }
#endif
    GLOBAL const IN_T* xr[RM];
    UNROLL for (int i = 0; i < RM; ++i) xr[i] = x + (i64)imin(m0 + i, M - 1) * K;
    float acc[RM][RN];
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int r = 0; r < RN; ++r) acc[i][r] = 0.0f;
#if GEMV_PROBE != 1
    float d[RN];
#endif
    f32x4 xv[RM][XS_ITERS];
    /* iteration b0 computes the tile at b0 while the loads of the next one are in flight; the
     * first iteration (b0 < 0) only loads */
    for (int b0 = -GEMV_SPAN, buf = 0; b0 < nblk; b0 += GEMV_SPAN, buf ^= 1) {
        if (b0 >= 0) {
            UNROLL for (int i = 0; i < RM; ++i)
                UNROLL for (int it = 0; it < XS_ITERS; ++it) {
                    const int u = tid + it * GEMV_ITEMS, b = u >> 3;
                    if (GEMV_SPAN * 8 % GEMV_ITEMS == 0 || u < GEMV_SPAN * 8) {
                        const f32x4 v = xv[i][it];
                        xs[buf][i][b * XS_STRIDE + (u & 7)] = v;
#if !FMT_Q8_0 /* the sums UNBIAS takes, added once per tile */
                        ((LOCAL_PTR float*)xsums[buf][i])[4 * (b * XSUMS_STRIDE + (u >> 2 & 1)) + (u & 3)] =
                            (v.x + v.y) + (v.z + v.w);
#endif
                    }
                }
            BARRIER(); /* the other buffer is free once every work-item is past this point */
#if GEMV_PROBE == 1
            UNROLL for (int r = 0; r < RN; ++r) {
                codes[r][0] = 0u;
                UNROLL for (int j = 0; j < RAW_WORDS; ++j) codes[r][0] ^= raw[r][j];
            }
#else
            UNROLL for (int r = 0; r < RN; ++r) d[r] = take_block(raw[r], at[r], codes[r]);
#endif
        }
        const int nb = b0 + GEMV_SPAN;
        const int tile = GEMV_PROBE == 2 ? 0 : imin(nb / GEMV_SPAN, last_tile);
        UNROLL for (int r = 0; r < RN; ++r) {
#if GEMV_OFFSET_PER_TILE
            GLOBAL const u8* p = wa[r] + (i64)tile * (GEMV_SPAN * BLOCK_BYTES);
            at[r] = ADDR_BITS(p) & 15u;
            LOAD_WORDS((GLOBAL const u32x4*)(p - at[r]), raw[r], QWORDS);
#else
            LOAD_WORDS(wa[r] + (i64)tile * (GEMV_SPAN * BLOCK_BYTES / 16), raw[r], QWORDS);
#endif
        }
        /* work-item tid stages float4 u = tid + it * GEMV_ITEMS: float4 u % 8 of block u / 8 */
        UNROLL for (int i = 0; i < RM; ++i)
            UNROLL for (int it = 0; it < XS_ITERS; ++it) {
                const int u = tid + it * GEMV_ITEMS, blk = nb + (u >> 3);
                f32x4 v;
                v.x = v.y = v.z = v.w = 0.0f;
                if (blk < nblk && (GEMV_SPAN * 8 % GEMV_ITEMS == 0 || u < GEMV_SPAN * 8)) {
                    GLOBAL const IN_T* xp = xr[i] + blk * QK + 4 * (u & 7);
                    v.x = LOAD_IN(xp, 0); v.y = LOAD_IN(xp, 1);
                    v.z = LOAD_IN(xp, 2); v.w = LOAD_IN(xp, 3);
                }
                xv[i][it] = v;
            }
#if GEMV_PROBE == 1
        if (b0 >= 0 && b0 + mine < nblk)
            UNROLL for (int i = 0; i < RM; ++i) {
                u32 f = AS_UINT(xs[buf][i][mine * XS_STRIDE].x);
#if !FMT_Q8_0
                f ^= AS_UINT(xsums[buf][i][mine * XSUMS_STRIDE].x);
#endif
                UNROLL for (int r = 0; r < RN; ++r) acc[i][r] += (float)((f ^ codes[r][0]) & 1u);
            }
#else
        if (b0 >= 0 && b0 + mine < nblk) {
            float part[RM * RN] = {0.0f};
            UNROLL for (int q = 0; q < 8; ++q) {
                f32x4 xq[RM];
                float sq[RM];
                UNROLL for (int i = 0; i < RM; ++i) {
                    xq[i] = xs[buf][i][mine * XS_STRIDE + q];
                    sq[i] = XSUM_AT(xsums[buf][i][mine * XSUMS_STRIDE + (q >> 2)], q);
                }
                quad_parts(part, RN, codes, q, xq, sq);
            }
            UNROLL for (int i = 0; i < RM; ++i)
                UNROLL for (int r = 0; r < RN; ++r) acc[i][r] = FMA(d[r], part[i * RN + r], acc[i][r]);
        }
#endif
    }
#if !FMT_Q8_0 && GEMV_PROBE != 2
    UNROLL for (int i = 0; i < RM; ++i)
        UNROLL for (int r = 0; r < RN; ++r)
            if (IS_NAN(acc[i][r])) acc[i][r] = qgemv_exact(x, w, M, N, K, i, r);
#endif
    gemv_sum_store(acc, GEMV_RED, out, M, N, m0, n0, CODE_SCALE);
}

/* GEMV over runs of 8 blocks (run for M <= GEMV_MAX_M where it applies and ACCEL_GEMV_KERNEL
 * asks for it): the sum of qgemv, each work-item's blocks in another order.
 *
 * Launch contract: local size (RUNS_WG * RUNS_TEAMS, 1); groups (ceil(N / (RUNS_TEAMS *
 * RUNS_RN)), ceil(M / RM)); any N and M; K a multiple of 256 and the weight 16-byte aligned, so
 * that every run of 8 blocks (144 or 272 bytes) is whole 16-byte words; qgemv serves the rest.
 *
 * qgemv's work-items each take one block per tile, at an offset in their 16-byte words that
 * differs from one work-item to the next, so every code word is moved into place at run time
 * (align_block). Here a work-item takes 8 consecutive blocks of each of its team's RUNS_RN rows:
 * their words are 9 or 17 aligned 16-byte loads per row, all issued before x is staged, and
 * every block and code word sits at a bit position fixed at compile time, one funnel shift from
 * the loaded words (fixed_block). Work-item l of a team takes run s + l of each step of RUNS_WG
 * runs; the group stages the step's x in local memory (with the sums of each 4 that Q4_0's
 * offset needs, see qgemv) at a stride per run of 8 * 9 + 1 float4s, so the RUNS_WG work-items
 * that read 16 bytes each hit different bank quads. Codes become floats as in qgemv. Each team's
 * sums meet in local memory and are added in work-item order. */
#ifdef RUNS_WG
#define RUN_WORDS (2 * BLOCK_BYTES) /* 32-bit words in a run of 8 blocks: 36 or 68 */
#define RUNS_ITEMS (RUNS_WG * RUNS_TEAMS)
#define RUN_XS (8 * XS_STRIDE + 1)   /* local float4s of x per run */
#define RUN_XSUMS (8 * 2 + 1)        /* local float4s of x's sums by 4 per run */
#ifndef RUNS_MIN_GROUPS
#define RUNS_MIN_GROUPS RESIDENT_GROUPS(RUNS_ITEMS)
#endif

KERNEL LAUNCH_BOUNDS(RUNS_ITEMS, 1, RUNS_MIN_GROUPS) void qgemv_runs(GLOBAL const IN_T* RESTRICT x,
                                                        GLOBAL const u8* RESTRICT w,
                                                        GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    LOCAL f32x4 xs[RM][RUNS_WG * RUN_XS];
#if !FMT_Q8_0
    LOCAL f32x4 xsums[RM][RUNS_WG * RUN_XSUMS];
#endif
    LOCAL float red[RM * RUNS_RN][RUNS_ITEMS];
    const int tid = LOCAL_ID(0), lane = tid % RUNS_WG, team = tid / RUNS_WG;
    const int n0 = (GROUP_ID(0) * RUNS_TEAMS + team) * RUNS_RN, m0 = GROUP_ID(1) * RM;
    const int nruns = K / (8 * QK);
    GLOBAL const u32x4* wr[RUNS_RN];
    UNROLL for (int r = 0; r < RUNS_RN; ++r)
        wr[r] = (GLOBAL const u32x4*)(w + (i64)imin(n0 + r, N - 1) * nruns * (8 * BLOCK_BYTES));
    GLOBAL const IN_T* xr[RM];
    UNROLL for (int i = 0; i < RM; ++i) xr[i] = x + (i64)imin(m0 + i, M - 1) * K;
    float acc[RM][RUNS_RN];
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int r = 0; r < RUNS_RN; ++r) acc[i][r] = 0.0f;
    for (int s0 = 0; s0 < nruns; s0 += RUNS_WG) {
        const int run = s0 + lane;
        u32 raw[RUNS_RN][RUN_WORDS];
        if (run < nruns)
            UNROLL for (int r = 0; r < RUNS_RN; ++r)
                LOAD_WORDS(wr[r] + (i64)run * (RUN_WORDS / 4), raw[r], RUN_WORDS / 4);
        BARRIER(); /* every work-item is done with the last step's x */
        for (int u = tid; u < RUNS_WG * 64; u += RUNS_ITEMS) { /* float4 u % 64 of run u / 64 */
            const int rr = u >> 6, j = (u >> 3) & 7, q = u & 7;
            UNROLL for (int i = 0; i < RM; ++i) {
                f32x4 v;
                v.x = v.y = v.z = v.w = 0.0f;
                if (s0 + rr < nruns) {
                    GLOBAL const IN_T* xp = xr[i] + (i64)((s0 + rr) * 8 + j) * QK + 4 * q;
                    v.x = LOAD_IN(xp, 0); v.y = LOAD_IN(xp, 1);
                    v.z = LOAD_IN(xp, 2); v.w = LOAD_IN(xp, 3);
                }
                xs[i][rr * RUN_XS + j * XS_STRIDE + q] = v;
#if !FMT_Q8_0
                ((LOCAL_PTR float*)xsums[i])[4 * (rr * RUN_XSUMS + 2 * j + (q >> 2)) + (q & 3)] =
                    (v.x + v.y) + (v.z + v.w);
#endif
            }
        }
        BARRIER();
        if (run < nruns)
            UNROLL for (int j = 0; j < 8; ++j) {
                u32 codes[RUNS_RN][8];
                float d[RUNS_RN], part[RM * RUNS_RN] = {0.0f};
                UNROLL for (int r = 0; r < RUNS_RN; ++r)
                    d[r] = fixed_block(raw[r], RUN_WORDS, j * BLOCK_BYTES, codes[r]);
                UNROLL for (int q = 0; q < 8; ++q) {
                    f32x4 xq[RM];
                    float sq[RM];
                    UNROLL for (int i = 0; i < RM; ++i) {
                        xq[i] = xs[i][lane * RUN_XS + j * XS_STRIDE + q];
                        sq[i] = XSUM_AT(xsums[i][lane * RUN_XSUMS + 2 * j + (q >> 2)], q);
                    }
                    quad_parts(part, RUNS_RN, codes, q, xq, sq);
                }
                UNROLL for (int i = 0; i < RM; ++i)
                    UNROLL for (int r = 0; r < RUNS_RN; ++r)
                        acc[i][r] = FMA(d[r], part[i * RUNS_RN + r], acc[i][r]);
            }
    }
    UNROLL for (int i = 0; i < RM; ++i)
        UNROLL for (int r = 0; r < RUNS_RN; ++r) {
#if !FMT_Q8_0 /* an infinite x: the work-item's blocks again with exact codes (see qgemv) */
            if (IS_NAN(acc[i][r])) {
                float sum = 0.0f;
                for (int j = 0; j < 8; ++j)
                    sum += exact_dot(w + (i64)imin(n0 + r, N - 1) * nruns * (8 * BLOCK_BYTES),
                                     xr[i], lane * 8 + j, RUNS_WG * 8, nruns * 8);
                acc[i][r] = sum;
            }
#endif
            red[i * RUNS_RN + r][tid] = acc[i][r];
        }
    BARRIER();
    if (lane == 0)
        UNROLL for (int i = 0; i < RM; ++i)
            UNROLL for (int r = 0; r < RUNS_RN; ++r) {
                float sum = 0.0f;
                for (int l = 0; l < RUNS_WG; ++l) sum += red[i * RUNS_RN + r][tid + l];
                if (m0 + i < M && n0 + r < N)
                    STORE_OUT(out, (i64)(m0 + i) * N + n0 + r, CODE_SCALE * sum);
            }
}
#endif

/* Streaming GEMV for GPUs (run for M <= GEMV_MAX_M where it applies and ACCEL_GEMV_KERNEL asks
 * for it): out[m, n] = sum_k x[m, k] * dequantize(w)[n, k], the same sum as qgemv in another order.
 *
 * Launch contract: local size (32 * STREAM_WARPS, 1); groups (ceil(N / STREAM_ROWS), M); any N
 * and M; K a multiple of 64, the weight 4-byte aligned (so every pair of blocks starts at a
 * multiple of 4 bytes) and float32 x 16-byte aligned; qgemv serves the rest. STREAM_WARPS is a
 * power of two dividing STREAM_ROWS; STREAM_STAGES >= 2.
 *
 * qgemv's loads each realign one 2-byte-aligned block, and its work-items hold the next tile's
 * loads in registers; here a team of 32 work-items copies a contiguous slice of a weight row
 * (32 pairs of blocks, 1152 or 2176 bytes) into local memory as aligned 16-byte words, with
 * STREAM_STAGES - 1 rows in flight (cp.async on sm_80 and later: in flight without registers),
 * and work-item l reads its pair of blocks back at fixed offsets (36 or 68 bytes apart: no bank
 * conflicts). Work-item l keeps the 64 values of x under its pair in registers for every row of
 * the group, with the sums of each 4 that Q4_0's code offset needs (see qgemv). A group's teams
 * split K in slices of 64 blocks (as many teams per row as there are slices, up to STREAM_WARPS,
 * the others take other rows); longer rows take several passes. A team's sums for four rows are
 * reduced by one butterfly of shuffles (team_sum4; on OpenCL 1.2 each work-item's sum goes to
 * local memory instead), and the group adds the teams' totals in a fixed order at the end. */
#ifdef STREAM_ROWS
#define SLANES 32 /* work-items per team: one pair of blocks each */
#define PAIR_BYTES (2 * BLOCK_BYTES)
#define PAIR_WORDS (PAIR_BYTES / 4)
#define SLICE_BLOCKS (2 * SLANES)
#define SLICE_BYTES (SLANES * PAIR_BYTES) /* a multiple of 16 */
/* + 1: a slice may start 4, 8 or 12 bytes into its first 16-byte word */
#define STAGE_WORDS16 (SLICE_BYTES / 16 + 1)
#define STREAM_ITEMS (SLANES * STREAM_WARPS)
#define SUM_RUN 16 /* the final reduction adds runs of 16 work-items' sums, then the runs */
#define STREAM_SHFL (ACCEL_WARP >= 32) /* teams reduce by shuffles, else in local memory */
#define F32_IS_F32 1
#define F16_IS_F32 0
#define BF16_IS_F32 0
#define IN_IS_F32 ACCEL_CAT(IN_DT, _IS_F32)

/* Start copying a row's slice (from byte `at` of the row, `left` bytes of the row from there on)
 * into dst: the aligned 16-byte words that cover it, none that starts past the row (those would
 * hold no byte of the weight, and may lie past its end). */
DEVICE void stream_fetch(LOCAL_PTR u32x4* dst, GLOBAL const u8* at, u32 left, int lane) {
    const u32 a = ADDR_BITS(at) & 15u;
    GLOBAL const u32x4* src = (GLOBAL const u32x4*)(at - a) + lane;
    const int words = (int)((a + left + 15u) >> 4); /* at most STAGE_WORDS16 */
    dst += lane;
    UNROLL for (int c = 0; c < (STAGE_WORDS16 + SLANES - 1) / SLANES; ++c)
        if (lane + c * SLANES < words) STREAM_COPY16(dst + c * SLANES, src + c * SLANES);
}

/* Four values of x from k on (a multiple of 4) as a float4 (float32 x is 16-byte aligned);
 * zeros from `end` on. */
DEVICE f32x4 load_x4(GLOBAL const IN_T* xr, i64 k, int end) {
    f32x4 v;
#if IN_IS_F32
    if (k < end) return *(GLOBAL const f32x4*)(xr + k);
    v.x = v.y = v.z = v.w = 0.0f;
#else
    v.x = k < end ? LOAD_IN(xr, k) : 0.0f;
    v.y = k < end ? LOAD_IN(xr, k + 1) : 0.0f;
    v.z = k < end ? LOAD_IN(xr, k + 2) : 0.0f;
    v.w = k < end ? LOAD_IN(xr, k + 3) : 0.0f;
#endif
    return v;
}

/* This work-item's part of a row: its pair of blocks, whose words start at p, against the
 * 64 values of x under them (xv) and their sums by 4 (xq). */
DEVICE float pair_row(LOCAL_PTR const u32* p, const float* xv, const float* xq) {
    u32 W[PAIR_WORDS];
    UNROLL for (int j = 0; j < PAIR_WORDS; ++j) W[j] = p[j];
    float sum = 0.0f;
    UNROLL for (int b = 0; b < 2; ++b) {
        u32 codes[8];
        const float d = fixed_block(W, PAIR_WORDS, b * BLOCK_BYTES, codes);
        float part = 0.0f;
        UNROLL for (int q = 0; q < 8; ++q) {
            const u32 quad = as_quad(codes[q]);
            UNROLL for (int k = 0; k < 4; ++k) {
                if (k == 2) part = UNBIAS(part, xq[8 * b + q]);
                part = FMA(xv[32 * b + 4 * q + k], CODE_AT(quad, k), part);
            }
        }
        sum = FMA(d, part, sum);
    }
    return sum;
}

#if STREAM_SHFL
/* The team's totals of four values per work-item (s[g] for g < 4), by a butterfly whose first two
 * rounds halve what is exchanged: work-item l ends with the total of s[l / 8] (5 shuffles for
 * four totals instead of 20). */
DEVICE float team_sum4(const float* s, int lane) {
    const int hi = lane & 16, mid = lane & 8;
    float a = hi ? s[2] : s[0], b = hi ? s[3] : s[1];
    a += SHFL_XOR(hi ? s[0] : s[2], 16);
    b += SHFL_XOR(hi ? s[1] : s[3], 16);
    float e = mid ? b : a;
    e += SHFL_XOR(mid ? a : b, 8);
    UNROLL for (int o = 4; o > 0; o >>= 1) e += SHFL_XOR(e, o);
    return e;
}
#endif

KERNEL LAUNCH_BOUNDS(STREAM_ITEMS, 1, STREAM_MIN_GROUPS)
void qgemv_stream(GLOBAL const IN_T* RESTRICT x, GLOBAL const u8* RESTRICT w,
                  GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    LOCAL u32x4 ring[STREAM_WARPS][STREAM_STAGES][STAGE_WORDS16];
    LOCAL f32x4 xstage[STREAM_WARPS][4 * SLANES];
#if STREAM_SHFL
    LOCAL float sums[STREAM_ROWS][STREAM_WARPS];          /* per row: each team's sum */
#else
    LOCAL float sums[STREAM_ROWS][STREAM_ITEMS];          /* per row: each work-item's sum */
#endif
    const int tid = LOCAL_ID(0), lane = tid % SLANES, warp = tid / SLANES;
    const int nblk = K / QK, slices = (nblk + SLICE_BLOCKS - 1) / SLICE_BLOCKS;
    int ks = 1; /* teams per row: the slices' power of two, up to STREAM_WARPS */
    while (ks < STREAM_WARPS && ks < slices) ks *= 2;
    const int teams = STREAM_WARPS / ks, my_slice = warp % ks, team = warp / ks;
    const int steps = STREAM_ROWS / teams; /* rows per team: team + teams * i */
    const int n0 = GROUP_ID(0) * STREAM_ROWS, m = GROUP_ID(1);
    const i64 row_bytes = (i64)nblk * BLOCK_BYTES;
    GLOBAL const IN_T* xr = x + (i64)m * K;
#if STREAM_SHFL
    LOCAL_PTR float* my_sums = &sums[team][my_slice];
#define SUMS_STRIDE STREAM_WARPS
#else
    LOCAL_PTR float* my_sums = &sums[team][my_slice * SLANES + lane];
#define SUMS_STRIDE STREAM_ITEMS
#endif
    for (int pass = 0; pass * ks < slices; ++pass) {
        const int slice = pass * ks + my_slice, pair = slice * SLANES + lane;
        const int has_pair = 2 * pair < nblk; /* K is a multiple of 64: both blocks or neither */
        /* this team's rows n0 + team + teams * i for i < live hold weight bytes of this pass */
        const int live = slice < slices ? imin(steps, (N - n0 - team + teams - 1) / teams) : 0;
        const i64 stride = teams * row_bytes, skip = (i64)slice * SLICE_BYTES;
        GLOBAL const u8* rows = w + (n0 + team) * row_bytes + skip; /* row step 0's slice */
        const i64 rest = slice < slices ? row_bytes - skip : 0; /* the row's bytes from the slice */
        const u32 left = (u32)(rest < SLICE_BYTES ? rest : SLICE_BYTES);
        GLOBAL const u8* fetch_at = rows; /* the next slice to copy, one row step later each */
        const u32 back = (u32)(STREAM_STAGES * stride); /* from it to the slice being read */
#define STREAM_FETCH(i) do {                                                                      \
            if ((i) < live)                                                                      \
                stream_fetch(ring[warp][(i) % STREAM_STAGES], fetch_at, left, lane);             \
            fetch_at += stride;                                                                  \
            STREAM_COMMIT();                                                                     \
        } while (0)
        UNROLL for (int i = 0; i + 1 < STREAM_STAGES; ++i) STREAM_FETCH(i);
        /* x under the pair: 16 float4s per work-item, moved through local memory in 4 rounds so
         * that every load covers 8 runs of 64 bytes (reading its own 256 bytes, a work-item's
         * loads would each touch 32 cache lines); round r brings float4s 4r..4r+3 of each
         * work-item, stored with their index XOR (owner / 2) % 4 so that reads do not collide */
        f32x4 xin[16], xv4[16];
        UNROLL for (int r = 0; r < 4; ++r)
            UNROLL for (int t = 0; t < 4; ++t) {
                const int owner = 8 * t + lane / 4; /* float4 (lane % 4) of owner's round r */
                const i64 k = 64 * ((i64)slice * SLANES + owner) + 16 * r + 4 * (lane % 4);
                xin[4 * r + t] = load_x4(xr, k, 2 * (slice * SLANES + owner) < nblk ? K : 0);
            }
        UNROLL for (int r = 0; r < 4; ++r) {
            UNROLL for (int t = 0; t < 4; ++t) {
                const int owner = 8 * t + lane / 4;
                xstage[warp][4 * owner + ((lane % 4) ^ ((owner / 2) % 4))] = xin[4 * r + t];
            }
            TEAM_SYNC();
            UNROLL for (int c = 0; c < 4; ++c)
                xv4[4 * r + c] = xstage[warp][4 * lane + (c ^ ((lane / 2) % 4))];
            TEAM_SYNC();
        }
        float xv[64], xq[16];
        UNROLL for (int q = 0; q < 16; ++q) {
            xv[4 * q] = xv4[q].x; xv[4 * q + 1] = xv4[q].y;
            xv[4 * q + 2] = xv4[q].z; xv[4 * q + 3] = xv4[q].w;
            xq[q] = (xv[4 * q] + xv[4 * q + 1]) + (xv[4 * q + 2] + xv[4 * q + 3]);
            KEEP(xq[q]);
        }
        LOCAL_PTR u32x4* my_ring = ring[warp][0];
        for (int i0 = 0; i0 < steps; i0 += 4) { /* four row steps, then one reduction of them */
            float s[4];
            UNROLL for (int g = 0; g < 4; ++g) {
                const int i = i0 + g;
                s[g] = 0.0f;
                if (i >= steps) continue; /* the same for the whole team */
                STREAM_WAIT(STREAM_STAGES - 2); /* this work-item's copies of step i landed */
                TEAM_SYNC();                    /* everyone's have; step i - 1's reads are done */
                STREAM_FETCH(i + STREAM_STAGES - 1);
                const u32 a = (ADDR_BITS(fetch_at) - back) & 15u; /* where step i's slice starts */
                if (has_pair && i < live) {
                    LOCAL_PTR const u32* slot =
                        (LOCAL_PTR const u32*)(my_ring + (i % STREAM_STAGES) * STAGE_WORDS16);
                    s[g] = pair_row(slot + a / 4 + PAIR_WORDS * lane, xv, xq);
#if !FMT_Q8_0
                    if (IS_NAN(s[g])) /* x held an infinity: UNBIAS gave inf - inf (see qgemv) */
                        s[g] = exact_dot(w + (n0 + team + teams * i) * row_bytes, xr, 2 * pair, 1,
                                         2 * pair + 2);
#endif
                }
#if !STREAM_SHFL
                LOCAL_PTR float* to = my_sums + i * teams * SUMS_STRIDE; /* row team + teams * i */
                *to = pass ? *to + s[g] : s[g];
#endif
            }
#if STREAM_SHFL
            const float total = team_sum4(s, lane);
            const int i = i0 + lane / 8;
            if (lane % 8 == 0 && i < steps) {
                LOCAL_PTR float* to = my_sums + i * teams * SUMS_STRIDE;
                *to = pass ? *to + total : total;
            }
#endif
        }
#undef STREAM_FETCH
        TEAM_SYNC(); /* the next pass's first copies reuse the slots this pass read last */
    }
    BARRIER();
#if STREAM_SHFL
    for (int r = tid; r < STREAM_ROWS; r += STREAM_ITEMS) {
        if (n0 + r >= N) continue;
        float s = 0.0f;
        for (int j = 0; j < ks; ++j) s += sums[r][j];
        STORE_OUT(out, (i64)m * N + n0 + r, CODE_SCALE * s);
    }
#else
    const int runs = ks * SLANES / SUM_RUN;
    for (int u = tid; u < STREAM_ROWS * runs; u += STREAM_ITEMS) {
        LOCAL_PTR float* run = &sums[u / runs][(u % runs) * SUM_RUN];
        float s = 0.0f;
        UNROLL for (int t = 0; t < SUM_RUN; ++t) s += run[t];
        run[0] = s;
    }
    BARRIER();
    for (int r = tid; r < STREAM_ROWS; r += STREAM_ITEMS) {
        if (n0 + r >= N) continue;
        float s = 0.0f;
        for (int j = 0; j < runs; ++j) s += sums[r][j * SUM_RUN];
        STORE_OUT(out, (i64)m * N + n0 + r, CODE_SCALE * s);
    }
#endif
#undef SUMS_STRIDE
}
#endif

/* ---- qmatmul with x quantized to Q8_0 (x_format="q8_0", GGML's CPU semantics) ----------------
 * out[m, n] = sum over blocks b of (d_w[n, b] * d_x[m, b]) * s[m, n, b], where s is the exact
 * integer dot product of the two blocks' codes (Q4_0 codes less 8), summed in float32. Both
 * factors are exact in float32 (a product of two float16 values; |s| <= 32 * 127 * 128 < 2^24),
 * so each block adds one rounded product, as GGML's vec_dot does.
 *
 * quantize_x8 first writes x's Q8_0 quantization (the same functions as quantize's Q8_0 build,
 * so bit-exact with it) as "X8" words that the dot kernels load aligned: the 32 int8 codes of
 * each of the nblocks blocks, then per block a float pair: d as stored (rounded to float16; NaN
 * where the block has one) and the sum of its codes, which removes Q4_0's offset
 * (s = sum n c - 8 sum c, n the nibbles). One work-item per block. */
KERNEL void quantize_x8(GLOBAL const IN_T* RESTRICT x, GLOBAL u8* RESTRICT xq, i64 nblocks) {
    i64 blk = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (blk >= nblocks) return;
    float v[QK], d, id;
    int finite;
    const int has_nan = scale_block(x, blk, 1, v, &finite, &d, &id);
    GLOBAL i8* codes = (GLOBAL i8*)xq + blk * QK;
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
        const int c = q8_code(v[j], id, finite);
        codes[j] = (i8)c;
        sum += c;
    }
    u16 bits; /* d rounded to float16 as quantize stores it */
    STORE_F16(&bits, 0, d);
    GLOBAL float* ds = (GLOBAL float*)(xq + nblocks * QK) + 2 * blk;
    ds[0] = has_nan ? AS_FLOAT(0x7FC00000u) : LOAD_F16(&bits, 0);
    ds[1] = (float)sum;
}

#if FMT_Q8_0
#define CODE_WORDS 8
#else
#define CODE_WORDS 4
#endif

/* The scale and the CODE_WORDS words of code bytes of the block at byte s (even) of raw (which is
 * clobbered). */
DEVICE float take_code_words(u32* raw, u32 s, u32* words) {
    const u32 sh = align_block(raw, s);
    UNROLL for (int j = 0; j < CODE_WORDS; ++j) words[j] = raw_bits(raw, j, sh + 16u);
    return raw_scale(raw, sh);
}

/* s of a weight block (its code words wc) and an X8 block (its 8 code words xc and code sum), as
 * a float (exact). Q4_0: byte j holds the nibbles of values j and j + 16. */
DEVICE float block_dot_x8(const u32* wc, const u32* xc, float xsum) {
    int s = 0;
#if FMT_Q8_0
    (void)xsum; /* exact codes: no offset to remove */
    UNROLL for (int q = 0; q < 8; ++q) s = DOT4_I8(wc[q], xc[q], s);
    return (float)s;
#else
    UNROLL for (int q = 0; q < 4; ++q) {
        s = DOT4_I8(wc[q] & 0x0F0F0F0Fu, xc[q], s);
        s = DOT4_I8((wc[q] >> 4) & 0x0F0F0F0Fu, xc[q + 4], s);
    }
    return FMA(-8.0f, xsum, (float)s);
#endif
}

/* GEMV with x as X8 words (M <= GEMV_MAX_M on GPUs): qgemv's launch contract, teams and weight
 * loads (a block's offset in its 16-byte words found per tile), except that GEMV_KSPLIT teams
 * share each RN rows, each taking every GEMV_KSPLIT-th tile: groups
 * (ceil(N / (GEMV_TEAMS / GEMV_KSPLIT * RN)), ceil(M / RM)). Work-item l of a team takes block l
 * of each of its tiles for the team's RN rows and the group's RM rows of x, whose codes (two
 * aligned 16-byte loads) and scale pair it reads itself: every team reads the same x blocks, from
 * cache. The next tile's loads are in flight while this tile is computed. */
KERNEL LAUNCH_BOUNDS(GEMV_ITEMS, 1, GEMV_MIN_GROUPS) void qgemv_x8(GLOBAL const u8* RESTRICT xq,
                                                                GLOBAL const u8* RESTRICT w,
                                                                GLOBAL OUT_T* RESTRICT out,
                                                                int M, int N, int K) {
    GEMV_RED_DECL
    const int tid = LOCAL_ID(0), lane = tid % GEMV_WG, team = tid / GEMV_WG;
    const int phase = team % GEMV_KSPLIT; /* this team's tiles: phase, phase + GEMV_KSPLIT, ... */
    const int n0 = (GROUP_ID(0) * (GEMV_TEAMS / GEMV_KSPLIT) + team / GEMV_KSPLIT) * RN;
    const int m0 = GROUP_ID(1) * RM, nblk = K / QK;
    /* past the end of a row, a work-item reloads its last block (see qgemv) */
    const int last_tile = imax(nblk - 1 - lane, 0) / GEMV_WG, first = imin(lane, nblk - 1);
    GLOBAL const u8* wa[RN];
    UNROLL for (int r = 0; r < RN; ++r)
        wa[r] = w + ((i64)imin(n0 + r, N - 1) * nblk + first) * BLOCK_BYTES;
    GLOBAL const u32x4* xa[RM];
    GLOBAL const float* da[RM];
    UNROLL for (int i = 0; i < RM; ++i) {
        const i64 b = (i64)imin(m0 + i, M - 1) * nblk + first;
        xa[i] = (GLOBAL const u32x4*)xq + 2 * b;
        da[i] = (GLOBAL const float*)(xq + (i64)M * K) + 2 * b;
    }
    float acc[RM][RN];
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int r = 0; r < RN; ++r) acc[i][r] = 0.0f;
    u32 raw[RN][RAW_WORDS], at[RN];
    u32x4 xv[RM][2];
    float xd[RM][2];
    /* iteration b0 computes the tile at b0 while the next one's loads are in flight; the first
     * (b0 < 0) only loads */
    for (int b0 = (phase - GEMV_KSPLIT) * GEMV_WG; b0 < nblk; b0 += GEMV_KSPLIT * GEMV_WG) {
        u32 wc[RN][CODE_WORDS], xc[RM][8];
        float dw[RN], dx[RM], sx[RM];
        if (b0 >= 0) {
            UNROLL for (int r = 0; r < RN; ++r) dw[r] = take_code_words(raw[r], at[r], wc[r]);
            UNROLL for (int i = 0; i < RM; ++i) {
                xc[i][0] = xv[i][0].x; xc[i][1] = xv[i][0].y; xc[i][2] = xv[i][0].z; xc[i][3] = xv[i][0].w;
                xc[i][4] = xv[i][1].x; xc[i][5] = xv[i][1].y; xc[i][6] = xv[i][1].z; xc[i][7] = xv[i][1].w;
                dx[i] = xd[i][0]; sx[i] = xd[i][1];
            }
        }
        const int tile = imin(b0 / GEMV_WG + GEMV_KSPLIT, last_tile);
        UNROLL for (int r = 0; r < RN; ++r) {
            GLOBAL const u8* p = wa[r] + (i64)tile * (GEMV_WG * BLOCK_BYTES);
            at[r] = ADDR_BITS(p) & 15u;
            LOAD_WORDS((GLOBAL const u32x4*)(p - at[r]), raw[r], QWORDS);
        }
        UNROLL for (int i = 0; i < RM; ++i) {
            const i64 o = (i64)tile * (2 * GEMV_WG);
            xv[i][0] = xa[i][o]; xv[i][1] = xa[i][o + 1];
            xd[i][0] = da[i][o]; xd[i][1] = da[i][o + 1];
        }
        if (b0 >= 0 && b0 + lane < nblk)
            UNROLL for (int i = 0; i < RM; ++i)
                UNROLL for (int r = 0; r < RN; ++r)
                    acc[i][r] = FMA(dw[r] * dx[i], block_dot_x8(wc[r], xc[i], sx[i]), acc[i][r]);
    }
    gemv_sum_store(acc, GEMV_RED, out, M, N, m0, n0, 1.0f);
}

/* The exact integer dot product of the codes of the weight block at blk and the 32 X8 codes
 * at xc (Q4_0: the nibbles, without the offset of 8, which the caller takes off with the code
 * sum). On CPU devices (VW 8 or 16, X8_LANES8) as 8 partial sums (block_dot_lanes, accel.h's
 * DOT32_U8 / DOT32_S8: exact, X8 codes are at most 127 in magnitude and weight codes 128, so
 * every product is below 2^14), and the partial sums of a run's VW blocks are added up by one
 * tree for all of them (run_sums), where a sum per block took 7 instructions. PoCL 3.1 (AVX2),
 * instructions per block at M = 1: Q4_0 15.6, Q8_0 13.1 with vpmaddubsw; 22.6 and 24.3 with
 * 16-bit products in OpenCL C (pmullw, paddw); 52 (Q4_0) with 32-bit ones and a sum per block. */
#define X8_LANES8 (VW == 8 || VW == 16)
#if X8_LANES8
DEVICE int8 block_dot_lanes(GLOBAL const u8* RESTRICT blk, GLOBAL const i8* RESTRICT xc) {
    const char16 xlo = (char16)(ACCEL_BYTES16(xc, 0)), xhi = (char16)(ACCEL_BYTES16(xc, 16));
#if FMT_Q8_0
    return DOT32_S8((char16)(ACCEL_BYTES16((GLOBAL const i8*)blk, 2)),
                    (char16)(ACCEL_BYTES16((GLOBAL const i8*)blk, 18)), xlo, xhi);
#else
    const uchar16 bytes = (uchar16)(ACCEL_BYTES16(blk, 2));
    return DOT32_U8(bytes & (uchar16)15, bytes >> (uchar16)4, xlo, xhi);
#endif
}
DEVICE int block_dot_i8(GLOBAL const u8* RESTRICT blk, GLOBAL const i8* RESTRICT xc) {
    const int8 p = block_dot_lanes(blk, xc);
    return ACCEL_SUM8(p);
}
/* Lane b: the sum of part[b]'s lanes. Two levels of adjacent-pair sums per 128-bit half
 * (ACCEL_HADD8: vphaddd on AVX2) leave blocks 4k to 4k + 3 in each half of l2[k]; the halves'
 * sum is theirs. */
DEVICE vi_t run_sums(const int8* part) {
    int8 l1[VW / 2], l2[VW / 4];
    UNROLL for (int b = 0; b < VW / 2; ++b) l1[b] = ACCEL_HADD8(part[2 * b], part[2 * b + 1]);
    UNROLL for (int b = 0; b < VW / 4; ++b) l2[b] = ACCEL_HADD8(l1[2 * b], l1[2 * b + 1]);
#if VW == 8
    return (int8)(l2[0].lo + l2[0].hi, l2[1].lo + l2[1].hi);
#else
    return (int16)(l2[0].lo + l2[0].hi, l2[1].lo + l2[1].hi, l2[2].lo + l2[2].hi, l2[3].lo + l2[3].hi);
#endif
}
#else
DEVICE int block_dot_i8(GLOBAL const u8* RESTRICT blk, GLOBAL const i8* RESTRICT xc) {
    int s = 0;
    UNROLL for (int j = 0; j < QK; ++j) {
#if FMT_Q8_0
        const int c = (i8)blk[2 + j];
#else
        const int c = j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
#endif
        s += c * xc[j];
    }
    return s;
}
#endif

/* Lane j of VW consecutive X8 (scale, code sum) pairs from p */
#define X8_SCALE(p, j) ((p)[2 * (j)])
#define X8_SUM(p, j) ((p)[2 * (j) + 1])
#if VW == 1
#define X8_LANES(X, p) X(p, 0)
#else
#define X8_LANES(X, p) ((vf_t)(ACCEL_LANES(X, p, 0)))
#endif

/* Quantized matmul with x as X8 words, any M (CPU parameter sets; GPUs beyond GEMV_MAX_M): a
 * work-item computes RM rows of x against RN weight rows, as qmatmul's grid and in qmatmul's
 * runs of VW blocks: lane b of a run's vectors is block b's exact integer dot (block_dot_i8),
 * its scales (the weight's converted as a vector) and its Q4_0 offset, so that each block adds
 * one rounded product, d_w d_x s, to its lane's sum. */
KERNEL void qmatmul_x8(GLOBAL const u8* RESTRICT xq, GLOBAL const u8* RESTRICT w,
                       GLOBAL OUT_T* RESTRICT out, int M, int N, int K) {
    const int n0 = (GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0)) * RN;
    const int m0 = (GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1)) * RM;
    if (n0 >= N || m0 >= M) return;
    const int nblk = K / QK, runs_end = nblk - nblk % VW;
    const i64 row_bytes = (i64)nblk * BLOCK_BYTES;
    GLOBAL const i8* xr[RM];
    GLOBAL const float* dr[RM]; /* the rows' (scale, code sum) pairs */
    GLOBAL const u8* wr[RN];
    UNROLL for (int i = 0; i < RM; ++i) {
        const i64 row = imin(m0 + i, M - 1);
        xr[i] = (GLOBAL const i8*)xq + row * K;
        dr[i] = (GLOBAL const float*)(xq + (i64)M * K) + 2 * row * nblk;
    }
    UNROLL for (int j = 0; j < RN; ++j) wr[j] = w + (i64)imin(n0 + j, N - 1) * row_bytes;
    vf_t acc[RM][RN];
    float tail[RM][RN]; /* the last nblk % VW blocks */
    UNROLL for (int i = 0; i < RM; ++i) UNROLL for (int j = 0; j < RN; ++j) {
        acc[i][j] = (vf_t)0;
        tail[i][j] = 0.0f;
    }
    for (int b0 = 0; b0 < runs_end; b0 += VW) {
        UNROLL for (int j = 0; j < RN; ++j) {
            GLOBAL const u8* run = wr[j] + (i64)b0 * BLOCK_BYTES;
            const vf_t dw = run_scales(run);
            UNROLL for (int i = 0; i < RM; ++i) {
#if X8_LANES8
                int8 part[VW];
                UNROLL for (int b = 0; b < VW; ++b) {
                    if (i == 0) PREFETCH_ROWS(wr + j, 1, (i64)(b0 + b) * BLOCK_BYTES, BLOCK_BYTES, RN * row_bytes);
                    part[b] = block_dot_lanes(run + b * BLOCK_BYTES, xr[i] + (i64)(b0 + b) * QK);
                }
                const vi_t s = run_sums(part);
#elif VW == 1
                const vi_t s = block_dot_i8(run, xr[i] + (i64)b0 * QK);
#else
                vi_t s;
                UNROLL for (int b = 0; b < VW; ++b) { /* lane b of s */
                    if (i == 0) PREFETCH_ROWS(wr + j, 1, (i64)(b0 + b) * BLOCK_BYTES, BLOCK_BYTES, RN * row_bytes);
                    ((__private int*)&s)[b] = block_dot_i8(run + b * BLOCK_BYTES, xr[i] + (i64)(b0 + b) * QK);
                }
#endif
                GLOBAL const float* pairs = dr[i] + 2 * b0;
                vf_t sf = VCVT_F(s);
#if !FMT_Q8_0
                sf = FMA((vf_t)-8.0f, X8_LANES(X8_SUM, pairs), sf); /* exact: |s| < 2^24 */
#endif
                acc[i][j] = FMA(dw * X8_LANES(X8_SCALE, pairs), sf, acc[i][j]);
            }
        }
    }
    for (int bk = runs_end; bk < nblk; ++bk)
        UNROLL for (int j = 0; j < RN; ++j) {
            GLOBAL const u8* blk = wr[j] + (i64)bk * BLOCK_BYTES;
            UNROLL for (int i = 0; i < RM; ++i) {
                float sf = (float)block_dot_i8(blk, xr[i] + (i64)bk * QK);
#if !FMT_Q8_0
                sf = FMA(-8.0f, dr[i][2 * bk + 1], sf);
#endif
                tail[i][j] = FMA(block_scale(blk) * dr[i][2 * bk], sf, tail[i][j]);
            }
        }
    UNROLL for (int i = 0; i < RM; ++i) {
        if (m0 + i >= M) break;
        UNROLL for (int j = 0; j < RN; ++j)
            if (n0 + j < N) STORE_OUT(out, (i64)(m0 + i) * N + n0 + j, VSUM(acc[i][j]) + tail[i][j]);
    }
}
