// Warp-shuffle sum reduction: emulated on OpenCL 1.2 through local memory (block-uniform calls).
__device__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__global__ void sum_all(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_sum(i < n ? x[i] : 0.0f);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
