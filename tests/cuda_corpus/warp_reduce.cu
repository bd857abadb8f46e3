// Sum with warp shuffles: each warp reduces 32 values in registers, lane 0 adds to the total.
#define FULL_MASK 0xffffffff

extern "C" __global__ void warp_sum(const float* x, float* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffff, v, offset);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(total, v);
    }
}
