// 2D Morton (Z-order) codes: interleave the bits of 16-bit x and y.
__device__ unsigned int part1by1(unsigned int x) {
    x &= 0x0000ffffu;
    x = (x | (x << 8)) & 0x00ff00ffu;
    x = (x | (x << 4)) & 0x0f0f0f0fu;
    x = (x | (x << 2)) & 0x33333333u;
    x = (x | (x << 1)) & 0x55555555u;
    return x;
}

__global__ void morton2d(const unsigned short* xs, const unsigned short* ys, unsigned int* codes, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) codes[i] = part1by1(xs[i]) | (part1by1(ys[i]) << 1);
}
