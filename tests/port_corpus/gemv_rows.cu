// y = A x, one row per thread, with a device helper for the row dot product.
__device__ float row_dot(const float* row, const float* x, int n) {
    float s = 0.0f;
    for (int j = 0; j < n; ++j) s = fmaf(row[j], x[j], s);
    return s;
}

__global__ void gemv(const float* A, const float* x, float* y, int m, int n) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < m) y[r] = row_dot(A + (size_t)r * n, x, n);
}
