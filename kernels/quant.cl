/* GGUF Q8_0 / Q4_0 block quantization, bit-exact with GGML's reference quantizer on every
 * compiler: every multiply and add is rounded on its own (no FMA contraction, FMUL_RN/FADD_RN),
 * 1/d is correctly rounded (FDIV_RN), d is stored as float16 rounded to nearest even.
 *
 * Defines: FMT_Q8_0 or FMT_Q4_0; IN_DT (F32, F16, BF16) for quantize; OUT_DT for qmatmul.
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
    float amax = 0.0f, extreme = 0.0f;
    for (int j = 0; j < QK; ++j) {
        v[j] = LOAD_IN(x, blk * QK + j);
        has_nan |= IS_NAN(v[j]);
        finite &= !(IS_NAN(v[j]) || IS_INF(v[j]));
        if (FABS(v[j]) > amax) { amax = FABS(v[j]); extreme = v[j]; }  /* first wins on ties */
    }
#if FMT_Q8_0
    float d = FDIV_RN(amax, 127.0f);
#else
    float d = FDIV_RN(extreme, -8.0f);
#endif
    float id = (d != 0.0f && finite) ? FDIV_RN(1.0f, d) : 0.0f;
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
