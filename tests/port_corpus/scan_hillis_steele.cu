// Inclusive scan of each block's slice (Hillis-Steele, double-buffered in shared memory).
#define N 256

__global__ void scan_block(const float* in, float* out, int n) {
    __shared__ float temp[2 * N];
    int tid = threadIdx.x;
    int gid = blockIdx.x * N + tid;
    int pout = 0, pin = 1;
    temp[tid] = gid < n ? in[gid] : 0.0f;
    __syncthreads();
    for (int offset = 1; offset < N; offset <<= 1) {
        pout = 1 - pout;
        pin = 1 - pout;
        if (tid >= offset)
            temp[pout * N + tid] = temp[pin * N + tid] + temp[pin * N + tid - offset];
        else
            temp[pout * N + tid] = temp[pin * N + tid];
        __syncthreads();
    }
    if (gid < n) out[gid] = temp[pout * N + tid];
}
