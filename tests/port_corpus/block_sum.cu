// Sum reduction: each block reduces its slice in shared memory (sequential addressing) and
// writes one partial; the host adds the partials.
#define BLOCK 128

__global__ void block_sum(const float* __restrict__ in, float* __restrict__ partial, int n) {
    __shared__ float buf[BLOCK];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (BLOCK * 2) + tid;
    float v = 0.0f;
    if (i < n) v += in[i];
    if (i + BLOCK < n) v += in[i + BLOCK];
    buf[tid] = v;
    __syncthreads();
    for (unsigned int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = buf[0];
}
