// RMSNorm (LLaMA): y = x / sqrt(mean(x^2) + eps) * w, one block per row.
__global__ void rmsnorm(float* out, const float* x, const float* w, int d, float eps) {
    __shared__ float ss[64];
    int row = blockIdx.x;
    float local = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = x[row * d + j];
        local += v * v;
    }
    ss[threadIdx.x] = local;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s) ss[threadIdx.x] += ss[threadIdx.x + s];
        __syncthreads();
    }
    float scale = 1.0f / sqrtf(ss[0] / (float)d + eps);
    for (int j = threadIdx.x; j < d; j += blockDim.x) out[row * d + j] = x[row * d + j] * scale * w[j];
}
