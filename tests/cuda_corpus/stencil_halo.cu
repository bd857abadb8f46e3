// 1-D stencil out[i] = sum_{k=-R..R} w[k+R] * in[i+k] (zero outside), each block staging its
// elements plus a halo of R on each side in dynamic shared memory of (blockDim.x + 2R) floats.
#define R 3

extern "C" __global__ void stencil(const float* in, const float* w, float* out, int n) {
    extern __shared__ float s[];
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int l = threadIdx.x + R;
    s[l] = g < n ? in[g] : 0.0f;
    if (threadIdx.x < R) {
        int left = g - R;
        int right = g + blockDim.x;
        s[l - R] = left >= 0 && left < n ? in[left] : 0.0f;
        s[l + blockDim.x] = right < n ? in[right] : 0.0f;
    }
    __syncthreads();
    if (g < n) {
        float acc = 0.0f;
        for (int k = -R; k <= R; ++k) {
            acc += w[k + R] * s[l + k];
        }
        out[g] = acc;
    }
}
