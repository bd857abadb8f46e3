// Exclusive scan of 2*blockDim.x integers per block (Blelloch up-sweep / down-sweep).
#define TILE 128

__global__ void exclusive_scan(const int* in, int* out, int* block_totals, int n) {
    __shared__ int s[2 * TILE];
    int t = threadIdx.x;
    int base = blockIdx.x * 2 * TILE;
    s[2 * t] = base + 2 * t < n ? in[base + 2 * t] : 0;
    s[2 * t + 1] = base + 2 * t + 1 < n ? in[base + 2 * t + 1] : 0;
    int offset = 1;
    for (int d = TILE; d > 0; d >>= 1) {
        __syncthreads();
        if (t < d) {
            int ai = offset * (2 * t + 1) - 1;
            int bi = offset * (2 * t + 2) - 1;
            s[bi] += s[ai];
        }
        offset *= 2;
    }
    if (t == 0) {
        block_totals[blockIdx.x] = s[2 * TILE - 1];
        s[2 * TILE - 1] = 0;
    }
    for (int d = 1; d < 2 * TILE; d *= 2) {
        offset >>= 1;
        __syncthreads();
        if (t < d) {
            int ai = offset * (2 * t + 1) - 1;
            int bi = offset * (2 * t + 2) - 1;
            int tmp = s[ai];
            s[ai] = s[bi];
            s[bi] += tmp;
        }
    }
    __syncthreads();
    if (base + 2 * t < n) out[base + 2 * t] = s[2 * t];
    if (base + 2 * t + 1 < n) out[base + 2 * t + 1] = s[2 * t + 1];
}
