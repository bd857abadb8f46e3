// Each block sums a contiguous chunk [start, end) with end = min(start + blockDim.x * 4, n):
// an unsigned expression against an int bound, the mixed-type min CUDA resolves to unsigned.
__global__ void chunk_sums(const float* x, float* sums, int n) {
    unsigned int start = blockIdx.x * blockDim.x * 4;
    unsigned int end = min(start + blockDim.x * 4, n);
    __shared__ float acc[64];
    float s = 0.0f;
    for (unsigned int i = start + threadIdx.x; i < end; i += blockDim.x) s += x[i];
    acc[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int k = 0; k < blockDim.x; ++k) t += acc[k];
        sums[blockIdx.x] = t;
    }
}
