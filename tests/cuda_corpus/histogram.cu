// 256-bin histogram of bytes: per-block counts with shared-memory atomics, merged into the
// global histogram with global atomics.
#define BINS 256

extern "C" __global__ void histogram(const unsigned char* data, int n, unsigned int* hist) {
    __shared__ unsigned int local[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
        local[b] = 0;
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        atomicAdd(&local[data[i]], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
        if (local[b] != 0) {
            atomicAdd(&hist[b], local[b]);
        }
    }
}
