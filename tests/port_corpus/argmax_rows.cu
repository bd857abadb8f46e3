// Argmax per row (first index on ties), one block per row, values and indices in shared memory.
__global__ void argmax_rows(const float* x, int* idx, int cols) {
    __shared__ float best[128];
    __shared__ int where[128];
    const float* row = x + blockIdx.x * cols;
    float b = -INFINITY;
    int w = 0x7fffffff;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        if (row[c] > b) { b = row[c]; w = c; }
    }
    best[threadIdx.x] = b;
    where[threadIdx.x] = w;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ob = best[threadIdx.x + s];
            int ow = where[threadIdx.x + s];
            if (ob > best[threadIdx.x] || (ob == best[threadIdx.x] && ow < where[threadIdx.x])) {
                best[threadIdx.x] = ob;
                where[threadIdx.x] = ow;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) idx[blockIdx.x] = where[0];
}
