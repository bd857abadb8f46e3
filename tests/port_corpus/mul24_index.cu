// Index arithmetic with the 24-bit multiply intrinsics (a habit from older GPUs).
__global__ void mul24_copy(const float* in, float* out, int n) {
    int i = __mul24(blockIdx.x, blockDim.x) + threadIdx.x;
    unsigned int j = __umul24(i, 3u);
    if (i < n) out[i] = in[j % n];
}
