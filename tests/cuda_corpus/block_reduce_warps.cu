// Block reductions as people write them: each warp reduces with shuffles, lane 0 of each
// writes its partial to shared memory, and warp 0 alone reduces the partials.
#define WARP_SIZE 32
#define LOWEST (-2147483647 - 1)

__device__ float warpReduceSum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}

__device__ int warpReduceMax(int v) {
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}

__device__ float blockReduceSum(float v) {
    static __shared__ float shared[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    v = warpReduceSum(v);
    if (lane == 0) shared[wid] = v;
    __syncthreads();
    v = (threadIdx.x < blockDim.x / 32) ? shared[lane] : 0;
    if (wid == 0) v = warpReduceSum(v);
    return v;
}

extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    v = blockReduceSum(v);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

// One block per row; warp 0 reduces the partials and its lane 0 stores the row's maximum.
extern "C" __global__ void row_max(const int* x, int* out, int cols) {
    __shared__ int partial[32];
    int lane = threadIdx.x & 31, warp_id = threadIdx.x / WARP_SIZE;
    int v = LOWEST;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) v = max(v, x[blockIdx.x * cols + c]);
    v = warpReduceMax(v);
    if (lane == 0) partial[warp_id] = v;
    __syncthreads();
    v = lane < blockDim.x / WARP_SIZE ? partial[lane] : LOWEST;
    if (warp_id == 0) {
        v = warpReduceMax(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}
