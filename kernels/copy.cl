/* Strided gather: dst[i] = src[offset + sum_d index_d(i) * stride_d] for i in [0, n), where
 * index_d(i) takes i apart in C order over the view's sizes. Up to 6 dims (COPY_DIMS), padded in
 * front with size-1 dims; sizes, strides and offset count elements of src, and strides may be
 * negative (a reversed slice). What reshape, transpose and slicing of an accel.Tensor cannot
 * express as a view over the same buffer is materialized here, on the device.
 *
 * One build serves every dtype: the element kinds come as arguments (accel.kernels.COPY_KIND).
 * Equal kinds copy elements of 1, 2, 4 or 8 bytes bit for bit; float32, float16 and bfloat16
 * convert through float32, narrowing to nearest even (astype). The switches take the same branch
 * in every work-item and sit outside the copy loops.
 */
#define KIND_U8 0
#define KIND_U16 1
#define KIND_U32 2
#define KIND_U64 3
#define KIND_F32 4
#define KIND_F16 5
#define KIND_BF16 6

DEVICE float copy_load(GLOBAL const u8* RESTRICT src, i64 at, int kind) {
    if (kind == KIND_F16) return LOAD_F16((GLOBAL const u16*)src, at);
    if (kind == KIND_BF16) return LOAD_BF16((GLOBAL const u16*)src, at);
    return ((GLOBAL const float*)src)[at];
}

DEVICE void copy_store(GLOBAL u8* RESTRICT dst, i64 i, int kind, float v) {
    if (kind == KIND_F16) STORE_F16((GLOBAL u16*)dst, i, v);
    else if (kind == KIND_BF16) STORE_BF16((GLOBAL u16*)dst, i, v);
    else ((GLOBAL float*)dst)[i] = v;
}

/* A 2-d launch: dimension 0 runs along the innermost dim (n5, stride s5), dimension 1 over the
 * rows (every index of the outer dims, C order), each row's start found once. The element kind
 * is chosen outside the loops, so that each loop is a plain strided copy for the compiler. */
#define COPY_ROWS(ELEMENT)                                                                         \
    for (i64 row = row0; row < rows; row += row_step) {                                            \
        /* innermost outer index first (padding dims of 1 skipped); the rest: outermost */         \
        i64 r = row, start = offset;                                                               \
        if (n4 > 1) { start += (r % n4) * s4; r /= n4; }                                           \
        if (n3 > 1) { start += (r % n3) * s3; r /= n3; }                                           \
        if (n2 > 1) { start += (r % n2) * s2; r /= n2; }                                           \
        if (n1 > 1) { start += (r % n1) * s1; r /= n1; }                                           \
        start += r * s0;                                                                           \
        for (i64 col = col0; col < n5; col += col_step) {                                          \
            const i64 at = start + col * s5, i = row * n5 + col;                                   \
            ELEMENT;                                                                               \
        }                                                                                          \
    }

KERNEL void strided_copy(GLOBAL const u8* RESTRICT src, GLOBAL u8* RESTRICT dst, int in_kind,
                         int out_kind, i64 rows, i64 offset, i64 n1, i64 n2, i64 n3, i64 n4, i64 n5,
                         i64 s0, i64 s1, i64 s2, i64 s3, i64 s4, i64 s5) {
    const i64 col0 = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    const i64 col_step = (i64)LOCAL_SIZE(0) * NUM_GROUPS(0);
    const i64 row0 = (i64)GROUP_ID(1) * LOCAL_SIZE(1) + LOCAL_ID(1);
    const i64 row_step = (i64)LOCAL_SIZE(1) * NUM_GROUPS(1);
    if (in_kind != out_kind) {
        COPY_ROWS(copy_store(dst, i, out_kind, copy_load(src, at, in_kind)))
    } else if (in_kind == KIND_U8) {
        COPY_ROWS(dst[i] = src[at])
    } else if (in_kind == KIND_U16) {
        COPY_ROWS(((GLOBAL u16*)dst)[i] = ((GLOBAL const u16*)src)[at])
    } else if (in_kind == KIND_U32) {
        COPY_ROWS(((GLOBAL u32*)dst)[i] = ((GLOBAL const u32*)src)[at])
    } else {
        COPY_ROWS(((GLOBAL u64*)dst)[i] = ((GLOBAL const u64*)src)[at])
    }
}
