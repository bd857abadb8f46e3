// Integer dot product: per-block partial in shared memory, then one global atomicAdd per block.
__global__ void dot_i32(const int* a, const int* b, int* result, int n) {
    __shared__ int acc[256];
    int tid = threadIdx.x;
    int sum = 0;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) {
        sum += a[i] * b[i];
    }
    acc[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) acc[tid] += acc[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(result, acc[0]);
}
