// 1D convolution (cross-correlation) with a constant 5-tap filter, zero padding.
#define R 2
__constant__ float taps[2 * R + 1] = {0.0625f, 0.25f, 0.375f, 0.25f, 0.0625f};

__global__ void blur1d(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
#pragma unroll
    for (int k = -R; k <= R; ++k) {
        int j = i + k;
        if (j >= 0 && j < n) acc += taps[k + R] * in[j];
    }
    out[i] = acc;
}
