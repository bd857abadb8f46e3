// LayerNorm over the last dimension, one block per row, two-pass mean / variance.
#define THREADS 128

__global__ void layernorm(const float* __restrict__ x, const float* __restrict__ gamma,
                          const float* __restrict__ beta, float* __restrict__ y, int d, float eps) {
    __shared__ float s_sum[THREADS];
    const float* xr = x + (size_t)blockIdx.x * d;
    float* yr = y + (size_t)blockIdx.x * d;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < d; i += THREADS) acc += xr[i];
    s_sum[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) s_sum[threadIdx.x] += s_sum[threadIdx.x + s];
        __syncthreads();
    }
    float mean = s_sum[0] / d;
    __syncthreads();
    acc = 0.0f;
    for (int i = threadIdx.x; i < d; i += THREADS) {
        float t = xr[i] - mean;
        acc += t * t;
    }
    s_sum[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) s_sum[threadIdx.x] += s_sum[threadIdx.x + s];
        __syncthreads();
    }
    float rstd = rsqrtf(s_sum[0] / d + eps);
    for (int i = threadIdx.x; i < d; i += THREADS) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
}
