// Embedding lookup: out[t, :] = table[ids[t], :], 64-bit token ids, one block per token.
__global__ void embedding(const long long* ids, const float* table, float* out, int dim, long long vocab) {
    long long id = ids[blockIdx.x];
    if (id < 0 || id >= vocab) id = 0;  // out-of-range ids map to the padding row
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
        out[(long long)blockIdx.x * dim + d] = table[id * dim + d];
}
