// Strided-row copy with float2 accesses through the read-only cache.
__global__ void copy_rows_f2(const float2* __restrict__ src, float2* __restrict__ dst,
                             int rows, int half_cols, int src_stride2) {
    int r = blockIdx.y;
    for (int c = threadIdx.x; c < half_cols; c += blockDim.x) {
        float2 v = __ldg(&src[r * src_stride2 + c]);
        dst[r * half_cols + c] = v;
    }
}
