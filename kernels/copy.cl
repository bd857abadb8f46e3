/* Strided gather: dst[i] = src[offset + sum_d index_d(i) * stride_d] for i in [0, n), where
 * index_d(i) takes i apart in C order over the view's sizes. Up to COPY_DIMS (6) dims, padded
 * in front with size-1 dims; sizes, strides and offset count elements of src, and strides may
 * be negative (a reversed slice). What reshape, transpose and slicing of an accel.Tensor cannot
 * express as a view over the same buffer is materialized here, on the device.
 *
 * Defines: COPY_BITS (u8, u16, u32 or u64) copies elements of that width bit for bit; else
 * IN_DT and OUT_DT (F32, F16, BF16) convert through float32, narrowing to nearest even
 * (astype between float formats).
 */
#if defined(COPY_BITS)
#define SRC_T COPY_BITS
#define DST_T COPY_BITS
#define COPY_ONE(src, at, dst, i) ((dst)[i] = (src)[at])
#else
#define SRC_T IN_T
#define DST_T OUT_T
#define COPY_ONE(src, at, dst, i) STORE_OUT(dst, i, LOAD_IN(src, at))
#endif

KERNEL void strided_copy(GLOBAL const SRC_T* RESTRICT src, GLOBAL DST_T* RESTRICT dst, i64 n,
                         i64 offset, i64 n1, i64 n2, i64 n3, i64 n4, i64 n5, i64 s0, i64 s1,
                         i64 s2, i64 s3, i64 s4, i64 s5) {
    const i64 step = (i64)LOCAL_SIZE(0) * NUM_GROUPS(0);
    for (i64 i = (i64)GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0); i < n; i += step) {
        /* the innermost index first; what is left of i at the end is the outermost index */
        i64 r = i, at = offset;
        at += (r % n5) * s5; r /= n5;
        at += (r % n4) * s4; r /= n4;
        at += (r % n3) * s3; r /= n3;
        at += (r % n2) * s2; r /= n2;
        at += (r % n1) * s1; r /= n1;
        at += r * s0;
        COPY_ONE(src, at, dst, i);
    }
}
