// Stream compaction where order does not matter: each kept element claims a slot with an
// atomic counter.
__global__ void compact_positive(const float* in, float* out, int* count, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && in[i] > 0.0f) {
        int slot = atomicAdd(count, 1);
        out[slot] = in[i];
    }
}
