// Sum of x: each block reduces blockDim.x-strided elements in shared memory, one partial per block.
#define BLOCK 256

// Called with a pointer into __shared__ memory: the OpenCL translation must make it __local.
__device__ void tree_reduce(float* s, unsigned int tid) {
    for (unsigned int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (tid < stride) {
            s[tid] += s[tid + stride];
        }
        __syncthreads();
    }
}

extern "C" __global__ void block_sum(const float* x, float* partial, int n) {
    __shared__ float s[BLOCK];
    unsigned int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * BLOCK + tid; i < n; i += BLOCK * gridDim.x) {
        acc += x[i];
    }
    s[tid] = acc;
    __syncthreads();
    tree_reduce(s, tid);
    if (tid == 0) {
        partial[blockIdx.x] = s[0];
    }
}
