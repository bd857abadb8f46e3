// REFUSED: a kernel launching a child kernel.
__global__ void child(float* x) { x[threadIdx.x] += 1.0f; }

__global__ void parent(float* x, int chunks) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        for (int c = 0; c < chunks; ++c)
            child<<<1, 32>>>(x + c * 32);
    }
}
