// Row softmax of a rows x cols matrix: one block per row, shared-memory max and sum reductions.
#include <math.h>
#define THREADS 128

extern "C" __global__ void softmax(const float* x, float* y, int cols) {
    __shared__ float red[THREADS];
    const float* row = x + blockIdx.x * cols;
    float* out = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        m = fmaxf(m, row[c]);
    }
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        }
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        sum += expf(row[c] - m);
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            red[threadIdx.x] += red[threadIdx.x + s];
        }
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        out[c] = expf(row[c] - m) * inv;
    }
}
